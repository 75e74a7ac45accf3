"""The page's form: every TrainConfig field from its JSON schema and its Meta (group, label, the
models that read it, disabled with its reason where a browser run cannot set it), the groups' titles
and order; the presets and the sampling form's defaults (GET /api/form).
"""

from __future__ import annotations

from typing import Any

from ..config import FIELD_META, Meta, TrainConfig, field_meta
from ..presets import PRESETS
from ..sample.job import (
    DEFAULT_SEED,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOKENS,
)
from .errors import InvalidConfig

# What a page may ask to generate (`webmp sample` has no limits): a sampling plan's `seq` holds the
# prompt and the tokens, and every token is one replay of the forward pass on the page's GPU.
MAX_PAGE_TOKENS = 2000
MAX_PAGE_PROMPT = 2000  # characters


# Fields a page cannot set, each with the reason the form shows next to it (their Meta.browser).
BROWSER_MODELS = ("mlp", "mlp-ln", "gpt")  # model net: its network is a file (model_spec's Meta.browser)
NOT_IN_BROWSER = {name: meta.browser for name, meta in FIELD_META.items() if meta.browser is not None}


def check_browser_config(cfg: TrainConfig) -> None:
    """Refuse a config that sets a field a page cannot (its Meta.browser, the reason InvalidConfig
    gives): one whose value is not its default."""
    fields = type(cfg).model_fields
    for name, meta in field_meta(type(cfg)).items():
        if meta.browser is not None and getattr(cfg, name) != fields[name].get_default(
            call_default_factory=True
        ):
            raise InvalidConfig(meta.browser)


# The page's form offers every TrainConfig field, generated from its JSON schema and Meta: the kind
# from the type, the choices from the Literal, the help text from the docstring, the group, label
# and models that read it from the Meta, the defaults from MODEL_DEFAULTS. The groups' titles and
# order are the form's own; a group shows its Meta.common fields at once, the rest under "more
# settings".
GROUP_TITLES = {
    "model": "model and data",
    "precision": "precision and loss scaling",
    "optimizer": "optimizer and schedule",
    "run": "run",
}
_KINDS = {"integer": "int", "number": "float", "boolean": "bool", "array": "int_list", "string": "text"}


def form_field(name: str, prop: dict[str, Any], meta: Meta) -> dict[str, Any]:
    """One field of the form from its JSON schema property and its Meta."""
    if "enum" in prop or "const" in prop:
        kind, choices = "choice", list(prop.get("enum", [prop.get("const")]))
    else:
        types = [t.get("type", "object") for t in prop.get("anyOf", [prop]) if t.get("type") != "null"]
        kind, choices = _KINDS.get(types[0], "text"), None  # an object (a network): shown, disabled
    return {
        "name": name,
        "label": meta.label or name.replace("_", " "),
        "kind": kind,
        "choices": choices,
        "help": " ".join(prop.get("description", "").split()),
        "models": list(meta.models) if meta.models is not None else None,
        "group": meta.group,
        "common": meta.common,
        "disabled": meta.browser,
    }


def form_order(metas: dict[str, Meta]) -> list[str]:
    """The fields in the form's order: by group (GROUP_TITLES' order), within one in declaration order
    but for those placed after another (Meta.form_after). A group not in GROUP_TITLES raises."""
    names = [name for name, meta in metas.items() if meta.form_after is None]
    for name, meta in metas.items():
        if meta.form_after is not None:
            names.insert(names.index(meta.form_after) + 1, name)
    groups = list(GROUP_TITLES)
    return sorted(names, key=lambda name: groups.index(metas[name].group))


def page_form(model: type[TrainConfig] = TrainConfig) -> dict[str, Any]:
    """What GET /api/form returns: every TrainConfig field ({name, label, kind: int | float | bool |
    choice | int_list | text, choices, help, models: the models that read it, null for all, group,
    common: shown before "more settings", disabled: why a page cannot set it, else null}) in
    form_order, the groups ({name, title}), each model's defaults (a TrainConfig with only
    `model` given: MODEL_DEFAULTS applied), the presets, and the text generation form's defaults
    (`webmp sample`'s) and limits."""
    props = model.model_json_schema()["properties"]
    metas = field_meta(model)
    fields = [form_field(name, props[name], metas[name]) for name in form_order(metas)]
    for f in fields:
        if f["name"] == "model":  # a network of one's own comes from a file: native runs only
            f["choices"] = [m for m in f["choices"] if m in BROWSER_MODELS]
    defaults = {m: model.model_validate({"model": m}).model_dump() for m in BROWSER_MODELS}
    sample = {
        "prompt": "",
        "tokens": DEFAULT_TOKENS,
        "temperature": DEFAULT_TEMPERATURE,
        "seed": DEFAULT_SEED,
        "max_tokens": MAX_PAGE_TOKENS,
        "max_prompt": MAX_PAGE_PROMPT,
    }
    return {
        "fields": fields,
        "groups": [{"name": g, "title": title} for g, title in GROUP_TITLES.items()],
        "defaults": defaults,
        "presets": [p.model_dump() for p in PRESETS],
        "sample": sample,
    }
