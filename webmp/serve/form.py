"""The page's form: every TrainConfig field from its JSON schema, grouped, labelled, and disabled with
its reason where a browser run cannot set it; the presets and the sampling form's defaults (GET
/api/form).
"""

from __future__ import annotations

from typing import Any

from ..config import MODEL_FIELDS, TrainConfig
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


# The plan's blob, training data included, goes to whichever client asks for it over HTTP: a data
# path chosen by that client would let it read any file the server can.
BROWSER_DATA = (
    "browser runs train on the built-in datasets (the MLPs: the dataset field; gpt: the default "
    "corpus, the server's Python standard library sources); data files (--data) are for native "
    "`webmp train`"
)


BROWSER_INIT = (
    "browser runs draw their initial weights from the seed; a weights file (--init-weights) is for "
    "native `webmp train`"
)


def check_browser_config(cfg: TrainConfig) -> None:
    if cfg.data is not None:
        raise InvalidConfig(BROWSER_DATA)
    if cfg.init_weights is not None:
        raise InvalidConfig(BROWSER_INIT)


# The page's form offers every TrainConfig field, generated from its JSON schema: the kind from the
# type, the choices from the Literal, the help text from the docstring, the models that read it from
# MODEL_FIELDS and the defaults from MODEL_DEFAULTS. Only the grouping and a few labels are the
# form's own. COMMON fields show at once; the rest of a group sits under "more settings".
FORM_GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "model": ("model and data", (
        "model", "hidden", "act", "init_gain", "input_scale", "dataset", "data", "init_weights",
        "n_layer", "n_head", "d_model", "context", "tie_head", "val_tokens",
    )),
    "precision": ("precision and loss scaling", (
        "precision", "f16", "init_scale", "growth_factor", "backoff_factor", "growth_interval",
        "hysteresis", "min_scale", "min_scale_policy",
    )),
    "optimizer": ("optimizer and schedule", (
        "steps", "batch_size", "lr", "schedule", "warmup", "min_lr", "weight_decay", "beta1", "beta2",
        "eps", "clip_norm",
    )),
    "run": ("run", ("seed", "log_every", "checkpoint_every")),
}  # fmt: skip


COMMON = frozenset(
    {"model", "hidden", "n_layer", "n_head", "d_model", "context", "precision", "init_scale", "steps",
     "batch_size", "lr", "seed", "log_every"}
)  # fmt: skip


LABELS = {
    "hidden": "hidden widths",
    "n_layer": "layers",
    "n_head": "heads",
    "d_model": "width (d_model)",
    "tie_head": "tied head",
    "f16": "f16 path",
    "lr": "learning rate",
    "min_lr": "min learning rate",
}


# Fields a page cannot set, each with the reason the form shows next to it (the server refuses them
# too: check_browser_config).
NOT_IN_BROWSER = {"data": BROWSER_DATA, "init_weights": BROWSER_INIT}


_KINDS = {"integer": "int", "number": "float", "boolean": "bool", "array": "int_list", "string": "text"}


def form_field(name: str, prop: dict[str, Any]) -> dict[str, Any]:
    """One field of the form from its JSON schema property."""
    if "enum" in prop or "const" in prop:
        kind, choices = "choice", list(prop.get("enum", [prop.get("const")]))
    else:
        types = [t["type"] for t in prop.get("anyOf", [prop]) if t.get("type") != "null"]
        kind, choices = _KINDS[types[0]], None
    group = next(g for g, (_, names) in FORM_GROUPS.items() if name in names)
    return {
        "name": name,
        "label": LABELS.get(name, name.replace("_", " ")),
        "kind": kind,
        "choices": choices,
        "help": " ".join(prop.get("description", "").split()),
        "models": list(MODEL_FIELDS[name]) if name in MODEL_FIELDS else None,
        "group": group,
        "common": name in COMMON,
        "disabled": NOT_IN_BROWSER.get(name),
    }


def page_form() -> dict[str, Any]:
    """What GET /api/form returns: every TrainConfig field ({name, label, kind: int | float | bool |
    choice | int_list | text, choices, help, models: the models that read it, null for all, group,
    common: shown before "more settings", disabled: why a page cannot set it, else null}) in
    FORM_GROUPS' order, the groups ({name, title}), each model's defaults (a TrainConfig with only
    `model` given: MODEL_DEFAULTS applied), the presets, and the text generation form's defaults
    (`webmp sample`'s) and limits."""
    props = TrainConfig.model_json_schema()["properties"]
    names = [n for _, group in FORM_GROUPS.values() for n in group]
    fields = [form_field(name, props[name]) for name in names]
    defaults = {m: TrainConfig(model=m).model_dump() for m in props["model"]["enum"]}
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
        "groups": [{"name": g, "title": title} for g, (title, _) in FORM_GROUPS.items()],
        "defaults": defaults,
        "presets": [p.model_dump() for p in PRESETS],
        "sample": sample,
    }
