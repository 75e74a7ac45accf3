"""The command line: `webmp train`'s flags come from TrainConfig; --version; `python -m webmp`. No GPU."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

import webmp
from webmp.cli import add_train_flags, config_from_args, flag_name, format_default, main, train_parser
from webmp.config import MODEL_DEFAULTS, TrainConfig

FIELDS = list(TrainConfig.model_fields)
LITERALS = [n for n, f in TrainConfig.model_fields.items() if get_origin(f.annotation) is Literal]


@pytest.fixture
def train_help(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag: argparse wraps help at the terminal width
    assert main(["train", "--help"]) == 0
    return capsys.readouterr().out


def _flag_help(help_text: str, name: str) -> str:
    """A flag's entry in the help, joined to one line (a long flag puts its help on the next line)."""
    entries = re.split(r"\n(?=  -)", help_text)
    found = [
        " ".join(e.split())
        for e in entries
        if e.strip().startswith((flag_name(name) + " ", flag_name(name) + ","))
    ]
    assert len(found) == 1, f"{flag_name(name)} not shown once in `webmp train --help`"
    return found[0]


@pytest.mark.parametrize("name", FIELDS)
def test_every_field_is_a_flag_with_help_and_default(train_help: str, name: str) -> None:
    field = TrainConfig.model_fields[name]
    assert field.description, f"TrainConfig.{name} has no docstring (its help text)"
    line = _flag_help(train_help, name)
    default = format_default(field.get_default(call_default_factory=True))
    by_model = "".join(f"; {m}: {format_default(d[name])}" for m, d in MODEL_DEFAULTS.items() if name in d)
    assert line.endswith(f"(default: {default}{by_model})"), line
    assert " ".join(field.description.split())[:30] in line


@pytest.mark.parametrize("name", FIELDS)
def test_every_field_is_settable(name: str, tmp_path) -> None:
    field = TrainConfig.model_fields[name]
    if name == "model_spec":  # a file, read and checked by the flag's type
        spec = {"input": [64], "layers": [{"type": "linear", "out": 10}]}
        (tmp_path / "net.json").write_text(json.dumps(spec))
        cfg = config_from_args(train_parser().parse_args(["--model-spec", str(tmp_path / "net.json")]))
        assert cfg.model == "net" and cfg.model_spec is not None and cfg.model_spec.classes == 10
        return
    default = field.get_default(call_default_factory=True)
    value = {
        "hidden": "64,32",
        "min_lr": "0.0001",
        "min_scale": "2.0",
        "beta1": "0.5",
        "beta2": "0.5",
        "backoff_factor": "0.25",
        "growth_factor": "4.0",
        "data": "mine.csv",
        "init_weights": "start.safetensors",
    }.get(name)
    if field.annotation is bool:
        cfg = config_from_args(train_parser().parse_args([flag_name(name).replace("--", "--no-")]))
        assert getattr(cfg, name) is False and default is True
        return
    if value is None:
        if get_origin(field.annotation) is Literal:
            value = (
                next(str(c) for c in get_args(field.annotation) if c != default)
                if len(get_args(field.annotation)) > 1
                else str(default)
            )
        else:
            value = str(type(default)(default * 2 + 1))
    cfg = config_from_args(train_parser().parse_args([flag_name(name), value]))
    got = getattr(cfg, name)
    assert format_default(got) == value and (got != default or len(get_args(field.annotation)) == 1)


def test_defaults_round_trip() -> None:
    assert config_from_args(train_parser().parse_args([])) == TrainConfig()


def test_model_defaults_fill_only_the_flags_left_out() -> None:
    gpt = config_from_args(train_parser().parse_args(["--model", "gpt"]))
    assert gpt == TrainConfig(model="gpt")
    for name, value in MODEL_DEFAULTS["gpt"].items():
        assert getattr(gpt, name) == value != TrainConfig.model_fields[name].default, name
    mine = config_from_args(train_parser().parse_args(["--model", "gpt", "--steps", "7"]))
    assert mine.steps == 7 and mine.batch_size == MODEL_DEFAULTS["gpt"]["batch_size"]
    assert config_from_args(train_parser().parse_args(["--steps", "7"])).batch_size == 64  # the MLP's


def test_gpt_shape_is_checked() -> None:
    with pytest.raises(ValidationError, match="d_model .100. must be n_head .4. times an even head size"):
        TrainConfig(model="gpt", d_model=100)
    assert TrainConfig(model="gpt", d_model=96, n_head=6).d_model == 96  # head size 16


def test_known_flags_keep_their_spelling() -> None:
    args = train_parser().parse_args(
        [
            "--batch-size",
            "8",
            "--min-lr",
            "1e-5",
            "--clip-norm",
            "1.0",
            "--f16",
            "emulated",
            "--hidden",
            "64,32",
            "--min-scale-policy",
            "warn",
            "--checkpoint-every",
            "0",
            "--out",
            "o",
            "--resume",
            "r",
            "--quiet",
        ]
    )
    cfg = config_from_args(args)
    assert (cfg.batch_size, cfg.min_lr, cfg.clip_norm, cfg.f16) == (8, 1e-5, 1.0, "emulated")
    assert (cfg.hidden, cfg.min_scale_policy, cfg.checkpoint_every) == ([64, 32], "warn", 0)
    assert (args.out, args.resume, args.quiet) == ("o", "r", True)


def test_hidden_parses_comma_separated_widths() -> None:
    assert config_from_args(train_parser().parse_args(["--hidden", "64,32"])).hidden == [64, 32]
    assert config_from_args(train_parser().parse_args(["--hidden", "128"])).hidden == [128]


@pytest.mark.parametrize("name", LITERALS)
def test_literal_choices_are_enforced(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", flag_name(name), "no-such-choice"]) == 2
    err = capsys.readouterr().err
    assert flag_name(name) in err and "invalid choice" in err
    for choice in get_args(TrainConfig.model_fields[name].annotation):
        assert repr(choice) in err


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--steps", "0"], "steps"),
        (["--beta1", "1.0"], "beta1"),
        (["--eps", "0"], "eps"),
        (["--hidden", "64,0"], "hidden"),
        (["--backoff-factor", "2"], "backoff_factor"),
        (["--lr", "1e-4", "--min-lr", "1e-3"], "min_lr"),
    ],
)
def test_invalid_value_exits_2_naming_the_field(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", *argv, "--out", "/nonexistent/never-created"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("webmp train: ") and field in err, err
    assert not Path("/nonexistent/never-created").exists()


@pytest.mark.parametrize("argv", [["--steps", "ten"], ["--lr", "fast"], ["--hidden", "a,b"]])
def test_unparsable_value_exits_2_naming_the_flag(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", *argv]) == 2
    assert f"argument {argv[0]}" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 0
    assert capsys.readouterr().out.strip() == f"webmp {webmp.__version__}"


def test_version_has_one_source() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert re.search(r"(?m)^dynamic = \[.*\"version\".*\]", pyproject)
    assert 'version = {attr = "webmp.__version__"}' in pyproject
    assert not re.search(r"(?m)^version = \"", pyproject)


def test_top_level_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(cmd in out for cmd in ("train", "serve", "bench"))
    assert main(["no-such-command"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main([]) == 2


def test_python_dash_m_webmp() -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(webmp.__file__).resolve().parent.parent))
    out = subprocess.run(
        [sys.executable, "-m", "webmp", "--version"], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"webmp {webmp.__version__}"
    bad = subprocess.run(
        [sys.executable, "-m", "webmp", "train", "--precision", "fp4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 2 and "--precision" in bad.stderr


def test_bool_and_unsupported_annotations() -> None:
    """The generator's other cases, on a small model: bool is --x/--no-x; an unknown type is a clear error."""

    class Small(BaseModel):
        model_config = ConfigDict(use_attribute_docstrings=True)
        fast: bool = False
        """go fast"""
        ratios: list[float] = [0.5, 0.25]
        """ratios"""

    p = argparse.ArgumentParser()
    add_train_flags(p, Small)
    assert vars(p.parse_args([])) == {}  # left out: the model's defaults apply
    assert vars(p.parse_args(["--fast", "--ratios", "1,2.5"])) == {"fast": True, "ratios": [1.0, 2.5]}
    assert p.parse_args(["--fast", "--no-fast"]).fast is False
    assert "go fast (default: False)" in " ".join(p.format_help().split())

    class Odd(BaseModel):
        when: dict[str, int] = {}

    with pytest.raises(TypeError, match="Odd.when"):
        add_train_flags(argparse.ArgumentParser(), Odd)
