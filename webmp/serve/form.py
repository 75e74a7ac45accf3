"""The page's form: every TrainConfig field from its JSON schema and its Meta (group, label, the
models that read it, disabled with its reason where a browser run cannot set it), the groups' titles
and order; the presets and the sampling form's defaults (GET /api/form). What a page may set
(check_browser_config), and a page's config read as `webmp train` reads its flags (page_config).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from ..config import FIELD_META, Meta, TrainConfig, config_error_message, field_meta
from ..nn.network import Network
from ..presets import EXAMPLE_CNN, PRESETS
from ..sample.job import (
    DEFAULT_SEED,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOKENS,
)
from .errors import InvalidConfig
from .security import MAX_UPLOAD_BYTES

# What a page may ask to generate (`webmp sample` has no limits): a sampling plan's `seq` holds the
# prompt and the tokens, and every token is one replay of the forward pass on the page's GPU.
MAX_PAGE_TOKENS = 2000
MAX_PAGE_PROMPT = 2000  # characters


# Fields a page cannot set, each with the reason the form shows next to it (their Meta.browser).
NOT_IN_BROWSER = {name: meta.browser for name, meta in FIELD_META.items() if meta.browser is not None}
# The plan's blob, training data included, goes to whichever client asks for it over HTTP: a data
# path chosen by that client would let it read any file the server can. A page uploads its data
# (PUT /api/data, webmp/serve/page_data.py) and names it by the hash the server answered.
DATA_REF = re.compile(r"sha256:[0-9a-f]{64}")
BROWSER_DATA = (
    "a browser run trains on the built-in data or on a file uploaded to the server, named by its hash "
    "(sha256:<64 hex digits>, as PUT /api/data answers); a path is for native `webmp train --data`"
)
# The network the form offers first for model net: the CNN for the 8x8 digits.
DEFAULT_NETWORK = EXAMPLE_CNN


def check_browser_config(cfg: TrainConfig) -> None:
    """Refuse a config that sets a field a page cannot (its Meta.browser, the reason InvalidConfig
    gives): one whose value is not its default; and data that is not an upload's hash (DATA_REF)."""
    fields = type(cfg).model_fields
    for name, meta in field_meta(type(cfg)).items():
        if meta.browser is not None and getattr(cfg, name) != fields[name].get_default(
            call_default_factory=True
        ):
            raise InvalidConfig(meta.browser)
    if cfg.data is not None and not DATA_REF.fullmatch(cfg.data):
        raise InvalidConfig(f"invalid data: {BROWSER_DATA}")


def page_network(spec: object) -> Network:
    """A page's network, read as `webmp train --model-spec` reads a file (Network.from_json and
    from_dict: one line naming the layer): a JSON object, or its text as the page's editor holds it
    (text that is not JSON is refused in the CLI's words). InvalidConfig naming model_spec."""
    try:
        if isinstance(spec, str):
            text = spec
            try:
                spec = json.loads(text)
            except ValueError:
                Network.from_json(text, "model_spec")  # raises: the words for a file that is not JSON
            except RecursionError:
                raise ValueError("model_spec: nested deeper than a JSON parser goes") from None
        return Network.from_dict(spec, "model_spec")
    except ValueError as e:
        raise InvalidConfig(f"invalid {e}") from None


def page_config(body: object) -> TrainConfig:
    """A config a page sends (POST /api/runs, /api/network, /api/tune): a JSON object of TrainConfig
    fields, its model_spec read by page_network. InvalidConfig: one "invalid FIELD: message" line
    per field."""
    if not isinstance(body, dict):
        raise InvalidConfig("the body must be a JSON object of TrainConfig fields")
    fields = dict(body)
    if fields.get("model_spec") is not None:
        fields["model_spec"] = page_network(fields["model_spec"])
    try:
        return TrainConfig(**fields)
    except ValidationError as e:
        raise InvalidConfig(config_error_message(e)) from None


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
# Fields with inputs of their own: the network's JSON editor and its layer table (web/network.js),
# the data's upload (web/upload.js).
PAGE_KINDS = {"model_spec": "network", "data": "data"}


def form_field(name: str, prop: dict[str, Any], meta: Meta) -> dict[str, Any]:
    """One field of the form from its JSON schema property and its Meta."""
    if name in PAGE_KINDS:
        kind, choices = PAGE_KINDS[name], None
    elif "enum" in prop or "const" in prop:
        kind, choices = "choice", list(prop.get("enum", [prop.get("const")]))
    else:
        types = [t.get("type", "object") for t in prop.get("anyOf", [prop]) if t.get("type") != "null"]
        kind, choices = _KINDS.get(types[0], "text"), None
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


def model_defaults(model: str) -> dict[str, Any]:
    """The fields a page sends for a model when it changes none: the model, and net's network."""
    return {"model": model, **({"model_spec": DEFAULT_NETWORK} if model == "net" else {})}


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
    models = next(f["choices"] for f in fields if f["name"] == "model")
    defaults = {m: model.model_validate(model_defaults(m)).model_dump() for m in models}
    if "net" in defaults:  # the network as written, not with every layer's defaults spelled out
        defaults["net"]["model_spec"] = DEFAULT_NETWORK
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
        "max_upload": MAX_UPLOAD_BYTES,
        "groups": [{"name": g, "title": title} for g, title in GROUP_TITLES.items()],
        "defaults": defaults,
        "presets": [p.model_dump() for p in PRESETS],
        "sample": sample,
    }
