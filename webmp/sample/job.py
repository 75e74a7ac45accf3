"""Text generation without a GPU: loading a run that generates text (the gpt, or a
network with a token input), checking the input, building its sampling plan.

This is the half of `webmp sample` that does not need wgpu, so the server (webmp/serve/sampling.py)
builds the page's sampling plans with the same code as the command line (webmp/sample/replay.py,
which replays a plan through wgpu-py):

  job = prepare(run_dir, prompt, tokens=..., temperature=..., seed=...)   # SampleError: one line
  plan, blob = job.plan(job.path(has_f16))   # webmp.models.build_sample_plan
  ... replay plan["sample"]["schedule"], read plan["sample"]["seq"] ...
  text = job.text(seq[prompt_tokens:])        # the prompt, then the generated characters

The settings (tokens, temperature, seed) are checked by one model, `SampleSettings`, for
`webmp sample`'s flags, this API and the server's query alike, in the same words.

An empty prompt starts the model from a newline (the character ending the line before the text),
which is then not part of the text; a vocabulary without a newline refuses it. Temperature 0 is
greedy (the argmax; ties to the lowest token id); above 0 each token is drawn from
softmax(logits / temperature) with a counter-based RNG of the seed and the token's position, so a
seed gives the same text on every adapter where the logits agree.

The vocabulary comes from checkpoint.json ("vocab", written by `webmp train` and by browser runs);
for runs written before it was saved, from the training data again if it is still there with the
same sha256.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from ..config import TrainConfig
from ..engine.plan import SamplePlan, resolve_f16_path
from ..engine.tiles import TileTable
from ..models import build_sample_plan, sample_param_shapes
from ..models.net_sample import TOKENS_PER_SUBMIT
from ..train.checkpoint import META, TENSORS, load_checkpoint
from ..train.rundir import CONFIG

DEFAULT_TOKENS = 200
DEFAULT_TEMPERATURE = 0.8
DEFAULT_SEED = 0
START = "\n"  # what an empty prompt starts from


class SampleError(ValueError):
    """Bad input to sampling (run directory, prompt, settings), said in one line."""


class SettingError(SampleError):
    """A refused setting, "<setting> <problem>" ("tokens must be a positive integer, got 0"):
    `webmp sample` puts the problem after its flag instead (argparse's "argument --tokens: ...")."""

    def __init__(self, setting: str, problem: str):
        super().__init__(f"{setting} {problem}")
        self.setting, self.problem = setting, problem


def _refused(problem: str, value: object) -> PydanticCustomError:
    return PydanticCustomError("sample_setting", problem + ", got {got}", {"got": repr(value)})


def _from_text(value: object, kind: type[int] | type[float]) -> object:
    """A setting given as text (a flag, a URL's query) as a number; anything else as it is."""
    if not isinstance(value, str):
        return value
    try:
        return kind(value.strip())
    except ValueError:
        raise _refused("must be an integer" if kind is int else "must be a number", value) from None


def _is_int(value: object) -> TypeGuard[int | np.integer]:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


class SampleSettings(BaseModel):
    """How much text to generate and how: one set of checks and messages for `webmp sample`'s flags,
    the Python API's keywords and the server's sampling query (which adds the page's limits:
    webmp/serve/form.py). A value may be text; `of` refuses a bad one with a SettingError."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: int = Field(DEFAULT_TOKENS, description="characters to generate")
    temperature: float = Field(
        DEFAULT_TEMPERATURE, description="softmax temperature; 0 = greedy, the most likely character"
    )
    seed: int = Field(DEFAULT_SEED, description="seeds the draws")

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens(cls, value: object) -> int:
        n = _from_text(value, int)
        if not _is_int(n) or n < 1:
            raise _refused("must be a positive integer", n)
        return int(n)

    @field_validator("temperature", mode="before")
    @classmethod
    def _temperature(cls, value: object) -> float:
        t = _from_text(value, float)
        if not isinstance(t, (int, float, np.integer, np.floating)) or not 0 <= t < float("inf"):
            raise _refused("must be a finite number >= 0", t)
        return float(t)

    @field_validator("seed", mode="before")
    @classmethod
    def _seed(cls, value: object) -> int:
        s = _from_text(value, int)
        if not _is_int(s) or not 0 <= s < 2**32:
            raise _refused("must be in 0 .. 2**32 - 1", s)
        return int(s)

    @classmethod
    def of(cls, **values: object) -> SampleSettings:
        """The settings `values` give (None: the default); SettingError for the first bad one."""
        try:
            return cls.model_validate({k: v for k, v in values.items() if v is not None})
        except ValidationError as e:
            first = e.errors()[0]
            raise SettingError(".".join(str(p) for p in first["loc"]), first["msg"]) from None


def encode_prompt(prompt: str, vocab: Sequence[str]) -> list[int]:
    """Token ids of `prompt` (an empty one: START's); SampleError naming every character outside
    the vocabulary."""
    ids = {c: i for i, c in enumerate(vocab)}
    if not prompt:
        if START not in ids:
            raise SampleError(
                "an empty prompt starts from a newline, but this run's vocabulary has none; give a prompt"
            )
        return [ids[START]]
    unknown = sorted(set(prompt) - set(ids))
    if unknown:
        shown = " ".join(repr(c) for c in unknown)
        raise SampleError(
            f"the prompt has {len(unknown)} character(s) outside the run's vocabulary of "
            f"{len(vocab)}: {shown}"
        )
    return [ids[c] for c in prompt]


@dataclass(frozen=True)
class SampleJob:
    """A checked request to generate text with a GPT or a token network: its shape (cfg), vocabulary
    (token id -> character), f32 parameters (by name, as webmp.models.sample_param_shapes), the prompt and its
    token ids, and the settings. What is left to choose is where it runs: the f16 path and tiles."""

    cfg: TrainConfig
    vocab: list[str]
    params: dict[str, np.ndarray]
    prompt: str
    prompt_ids: list[int]
    tokens: int
    temperature: float
    seed: int
    fp8_scale: np.ndarray | None = None  # an fp8 run's scale exponents (its checkpoint's)

    @classmethod
    def new(
        cls,
        cfg: TrainConfig,
        vocab: Sequence[str],
        params: dict[str, np.ndarray],
        prompt: str,
        *,
        tokens: int = DEFAULT_TOKENS,
        temperature: float = DEFAULT_TEMPERATURE,
        seed: int = DEFAULT_SEED,
        fp8_scale: np.ndarray | None = None,
    ) -> SampleJob:
        settings = SampleSettings.of(tokens=tokens, temperature=temperature, seed=seed)
        ids = encode_prompt(prompt, vocab)
        return cls(
            cfg, list(vocab), params, prompt, ids, settings.tokens, settings.temperature, settings.seed,
            fp8_scale,
        )  # fmt: skip

    def path(self, has_f16: bool, f16: str | None = None) -> str:
        """The prelude for an adapter with or without shader-f16: the run's precision, and its f16
        choice unless `f16` ('native', 'emulated', 'auto') overrides it (as the Trainer resolves it)."""
        return resolve_f16_path(self.cfg.precision, f16 or self.cfg.f16, has_f16)

    def plan(
        self, path: str, tiles: TileTable | None = None, tokens_per_submit: int = TOKENS_PER_SUBMIT
    ) -> tuple[SamplePlan, bytes]:
        """The sampling plan and its blob on prelude `path` with matmul `tiles` (None: the defaults)."""
        return build_sample_plan(
            self.cfg, self.vocab, path, tiles, params=self.params, prompt=self.prompt_ids,
            tokens=self.tokens, temperature=self.temperature, seed=self.seed,
            tokens_per_submit=tokens_per_submit, fp8_scale=self.fp8_scale,
        )  # fmt: skip

    def text(self, generated: Sequence[int] | np.ndarray) -> str:
        """The prompt followed by the generated tokens' characters (what `webmp sample` prints)."""
        return self.prompt + "".join(self.vocab[int(i)] for i in generated)


def prepare(
    run_dir: str | Path,
    prompt: str = "",
    *,
    tokens: int = DEFAULT_TOKENS,
    temperature: float = DEFAULT_TEMPERATURE,
    seed: int = DEFAULT_SEED,
) -> SampleJob:
    """The job of generating `tokens` characters after `prompt` with the model of `run_dir` (its
    checkpoint); SampleError (one line) for bad settings, before the run is read, or a bad run or
    prompt."""
    SampleSettings.of(tokens=tokens, temperature=temperature, seed=seed)
    cfg, vocab, params, fp8_scale = load_run(run_dir)
    return SampleJob.new(
        cfg, vocab, params, prompt, tokens=tokens, temperature=temperature, seed=seed, fp8_scale=fp8_scale
    )


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SampleError(f"{path}: unreadable ({e})") from None


def load_run(
    run_dir: str | Path,
) -> tuple[TrainConfig, list[str], dict[str, np.ndarray], np.ndarray | None]:
    """(config, vocabulary, f32 parameters, an fp8 run's scale exponents) of a run directory's
    checkpoint (the gpt's or a token network's); SampleError (one line) when it is not a
    directory, not a run that generates text, has no checkpoint or no vocabulary."""
    d = Path(run_dir)
    if not d.is_dir():
        raise SampleError(f"{d}: no such run directory")
    meta_path, config_path = d / META, d / CONFIG
    if meta_path.is_file():
        saved = _read_json(meta_path).get("config", {})
    elif config_path.is_file():
        saved = _read_json(config_path)
    else:
        raise SampleError(f"{d} is not a run directory (no {CONFIG} or {META})")
    try:
        cfg = TrainConfig(**{k: v for k, v in saved.items() if k in TrainConfig.model_fields})
    except ValueError as e:
        raise SampleError(f"{d}: its configuration is not valid ({' '.join(str(e).split())})") from None
    if not cfg.trains_on_text:
        raise SampleError(
            f"{d} is a {cfg.model!r} run on a table or images; webmp sample needs a run of --model gpt "
            "or of a network with a token input"
        )
    if not (d / TENSORS).is_file() or not meta_path.is_file():
        raise SampleError(
            f"{d} has no checkpoint ({TENSORS} + {META}); the run has not finished or saved one"
        )
    try:
        contents, meta = load_checkpoint(d)
    except (OSError, ValueError) as e:
        raise SampleError(f"{d}: cannot read the checkpoint ({' '.join(str(e).split())})") from None
    vocab = meta.get("vocab")
    if vocab is None:
        vocab = _vocab_from_data(d, cfg, meta.get("data_sha256"))
    shapes = sample_param_shapes(cfg, len(vocab))
    params = {}
    for name, shape in shapes.items():
        raw = contents.get(name)
        if raw is None or len(raw) != 4 * int(np.prod(shape)):
            raise SampleError(
                f"{d}: the checkpoint's {name} does not fit its configuration and vocabulary of "
                f"{len(vocab)} (expected {shape} f32 values)"
            )
        params[name] = np.frombuffer(raw, np.float32).reshape(shape).copy()
    scale = contents.get("fp8_scale") if cfg.precision == "fp8" else None
    if cfg.precision == "fp8" and scale is None:
        raise SampleError(f"{d}: an fp8 run's checkpoint without its fp8_scale")
    return cfg, list(vocab), params, None if scale is None else np.frombuffer(scale, np.int32).copy()


def _vocab_from_data(d: Path, cfg: TrainConfig, sha256: str | None) -> list[str]:
    """The vocabulary of a run that did not save it: its training data's, if unchanged."""
    from ..data.tables import DataError
    from ..data.text import load_text

    what = cfg.data or "the default corpus (the Python standard library)"
    try:
        corpus = load_text(cfg.data)
    except (DataError, OSError) as e:
        raise SampleError(f"{d} saved no vocabulary, and its training data is unreadable: {e}") from None
    if sha256 is not None and corpus.sha256 != sha256:
        raise SampleError(f"{d} saved no vocabulary and its training data {what} changed since")
    return corpus.vocab
