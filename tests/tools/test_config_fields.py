"""Each TrainConfig field's Meta is the one place for its facts: the CLI flags, the page's form, the
resume rules, the browser refusal and the GPU-side limits are derived from it, so a new field shows
up in all of them. No GPU."""

from __future__ import annotations

import argparse
import re
from typing import Annotated, Literal, get_args

import pytest
from pydantic import Field, ValidationError, create_model

from webmp.cli import add_train_flags, flag_name
from webmp.config import FIELD_META, MLP_MODELS, FormGroup, Meta, Size, TrainConfig, field_meta
from webmp.serve.errors import InvalidConfig
from webmp.serve.form import GROUP_TITLES, NOT_IN_BROWSER, check_browser_config, form_order, page_form
from webmp.train.loop import RESUME_LOCKED

GPT = ("gpt",)


def test_every_field_has_its_meta() -> None:
    assert list(FIELD_META) == list(TrainConfig.model_fields)
    assert all(isinstance(meta, Meta) for meta in FIELD_META.values())


def test_a_field_without_meta_is_an_error_naming_it() -> None:
    bare = create_model("Bare", __base__=TrainConfig, forgotten=(int, Field(1, description="no Meta")))
    with pytest.raises(TypeError, match="Bare: forgotten without a Meta"):
        field_meta(bare)


def test_the_form_lists_every_field_once_in_its_groups_order() -> None:
    form = page_form()
    names = [f["name"] for f in form["fields"]]
    assert sorted(names) == sorted(TrainConfig.model_fields) and len(names) == len(set(names))
    assert set(GROUP_TITLES) == set(get_args(FormGroup))
    assert [g["name"] for g in form["groups"]] == list(GROUP_TITLES)
    groups = [f["group"] for f in form["fields"]]
    assert groups == sorted(groups, key=list(GROUP_TITLES).index)  # one run of fields per group
    assert names.index("input_scale") == names.index("init_gain") + 1  # Meta.form_after


def test_meta_refers_to_what_exists() -> None:
    models = set(get_args(TrainConfig.model_fields["model"].annotation))
    for name, meta in FIELD_META.items():
        assert meta.models is None or set(meta.models) <= models, name
        if meta.form_after is not None:
            assert FIELD_META[meta.form_after].group == meta.group, name
        if meta.u32 or meta.size is not None:
            assert TrainConfig.model_fields[name].annotation in (int, list[int]), name


def test_derived_sets_are_the_expected_ones() -> None:
    """The facts that were tables of their own before Meta, spelled out once more here: a change to
    any of them is a change of what a user can do, so it should show in this test's diff."""
    assert set(RESUME_LOCKED) == {
        "model", "hidden", "act", "dataset", "data", "init_weights", "input_scale", "precision",
        "batch_size", "grad_accum", "seed", "init_gain", "n_layer", "n_head", "d_model", "context",
        "tie_head", "model_spec", "fp8_margin", "fp8_amax_history", "fp8_amax_algo", "fp8_keep_ends",
        "fp8_loss_scale",
    }  # fmt: skip
    assert set(NOT_IN_BROWSER) == {"init_weights", "zero"}
    assert {n for n, m in FIELD_META.items() if m.u32} == {
        "steps", "growth_interval", "hysteresis", "warmup", "checkpoint_every", "val_tokens",
    }  # fmt: skip
    assert {n: m.size.limit for n, m in FIELD_META.items() if m.size is not None} == {
        "hidden": 1 << 16, "d_model": 1 << 14, "n_head": 1 << 10, "n_layer": 1 << 10, "context": 1 << 13,
        "batch_size": 1 << 20, "grad_accum": 1 << 8, "log_every": 1 << 16, "fp8_amax_history": 1 << 16,
    }  # fmt: skip
    assert {n: m.models for n, m in FIELD_META.items() if m.models is not None} == {
        **dict.fromkeys(("hidden", "act", "init_gain"), MLP_MODELS),
        **dict.fromkeys(("dataset", "input_scale"), (*MLP_MODELS, "net")),
        "model_spec": ("net",),
        **dict.fromkeys(
            ("n_layer", "n_head", "d_model", "context", "tie_head", "val_tokens", "recompute"), GPT
        ),
        "attention": ("gpt", "net"),
    }
    metavars = {n: m.metavar for n, m in FIELD_META.items() if m.metavar}
    assert metavars == {"data": "PATH", "init_weights": "PATH", "model_spec": "FILE.json"}


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("steps", 2**32, "steps must be below 2^32 = 4294967296 (a 32-bit counter on the GPU)"),
        ("val_tokens", 2**32, "val_tokens must be below 2^32"),
        ("hidden", [64, 70000], "hidden must be at most 65536 (a layer's width), got [64, 70000]"),
        ("context", 9000, "context must be at most 8192 (the attention scores grow with its square)"),
    ],
)
def test_limits_come_from_the_meta(field: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        TrainConfig(**{field: value})
    cfg = TrainConfig()
    with pytest.raises(ValidationError, match=re.escape(message)):  # on assignment too
        setattr(cfg, field, value)


def test_browser_refusal_comes_from_the_meta() -> None:
    check_browser_config(TrainConfig(data=None, init_weights=None))  # the defaults, given: fine
    for name, why in NOT_IN_BROWSER.items():
        with pytest.raises(InvalidConfig) as err:
            check_browser_config(TrainConfig(**{name: {"zero": 1}.get(name, "x")}))  # not the default
        assert str(err.value.args[0]) == why == FIELD_META[name].browser
    # a network is a page's to give; its data only an upload's hash, never a path on the server
    check_browser_config(TrainConfig(model_spec={"input": [64], "layers": [{"type": "linear", "out": 10}]}))
    check_browser_config(TrainConfig(data="sha256:" + "0" * 64))
    for path in ("x.csv", "/etc/passwd", "sha256:" + "0" * 63, "sha256:../" + "0" * 61):
        with pytest.raises(InvalidConfig, match="^invalid data: .*a path is for native `webmp train --data`"):
            check_browser_config(TrainConfig(data=path))


def test_a_new_field_is_a_flag_a_form_field_and_validated() -> None:
    """A throwaway field added to a TrainConfig subclass, with nothing but its own declaration, is a
    `webmp train` flag, a form field in its group and place, and checked against its Meta's limits
    and its browser availability."""
    knob = Meta("precision", label="the knob", common=True, size=Size(10, "knobs"), metavar="N")
    extra = create_model(
        "Extra",
        __base__=TrainConfig,
        knob=(
            Annotated[int, knob],
            Field(3, description="a throwaway knob"),
        ),
        where=(
            Annotated[Literal["here", "there"], Meta("model", browser="not on a page", form_after="model")],
            Field("here", description="a throwaway choice"),
        ),
    )
    p = argparse.ArgumentParser()
    add_train_flags(p, extra)
    args = p.parse_args([flag_name("knob"), "5", flag_name("where"), "there"])
    assert (extra(**vars(args)).knob, extra(**vars(args)).where) == (5, "there")
    help_text = " ".join(p.format_help().split())
    assert "--knob N a throwaway knob (default: 3)" in help_text

    form = page_form(extra)
    fields = {f["name"]: f for f in form["fields"]}
    assert fields["knob"] == {
        "name": "knob", "label": "the knob", "kind": "int", "choices": None, "help": "a throwaway knob",
        "models": None, "group": "precision", "common": True, "disabled": None,
    }  # fmt: skip
    assert fields["where"]["choices"] == ["here", "there"] and fields["where"]["disabled"] == "not on a page"
    names = [f["name"] for f in form["fields"]]
    assert names[:2] == ["model", "where"]
    assert names.index("knob") == names.index("min_scale_policy") + 1  # the end of its group
    assert [n for n in names if n not in ("knob", "where")] == form_order(FIELD_META)  # the others as before

    with pytest.raises(ValidationError, match=r"knob must be at most 10 \(knobs\)"):
        extra(knob=11)
    with pytest.raises(InvalidConfig, match="not on a page"):
        check_browser_config(extra(where="there"))
    check_browser_config(extra(knob=4))
