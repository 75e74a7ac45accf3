"""Text generation from a trained GPT (`webmp sample`), on the GPU with the training kernels.

The plan (webmp.models.gpt.build_gpt_sample_plan) holds everything: the prompt's token ids in the
GPU buffer `seq`, a program adding one token (window, the training plan's forward pass, the draw),
and how often to replay it. This module only loads a run, checks the input, replays the program
`tokens_per_submit` times a submit (no host work per token) and reads `seq` once at the end.

  sample(run_dir, prompt, tokens=..., temperature=..., seed=...) -> prompt + generated text
  generate(cfg, vocab, params, prompt, ...)                       the same without a run directory

Both return the prompt followed by the generated characters: what `webmp sample` prints (then a
newline). An empty prompt starts the model from a newline (the character ending the line before
the text), which is then not part of the result; a vocabulary without a newline refuses it.
Temperature 0 is greedy (the argmax; ties to the lowest token id); above 0 each token is drawn
from softmax(logits / temperature) with a counter-based RNG of the seed and the token's position,
so a seed gives the same text on every adapter where the logits agree.

The vocabulary comes from checkpoint.json ("vocab", written by `webmp train`); for runs written
before it was saved, from the training data again if it is still there with the same sha256.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .checkpoint import META, TENSORS, load_checkpoint
from .config import TrainConfig
from .models.gpt import TOKENS_PER_SUBMIT, build_gpt_sample_plan, gpt_param_shapes
from .plan import resolve_f16_path
from .rundir import CONFIG
from .runtime import GPU, Runtime, default_gpu
from .tilecache import TileTable

DEFAULT_TOKENS = 200
DEFAULT_TEMPERATURE = 0.8
START = "\n"  # what an empty prompt starts from


class SampleError(ValueError):
    """Bad input to sampling (run directory, prompt), said in one line."""


def check_settings(tokens: int, temperature: float, seed: int) -> None:
    """SampleError unless tokens >= 1, temperature a finite number >= 0 and seed a 32-bit unsigned int."""
    if isinstance(tokens, bool) or not isinstance(tokens, (int, np.integer)) or tokens < 1:
        raise SampleError(f"tokens must be a positive integer, got {tokens!r}")
    if not 0 <= temperature < float("inf"):
        raise SampleError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if not 0 <= seed < 2**32:
        raise SampleError(f"seed must be in 0 .. 2**32 - 1, got {seed!r}")


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


def generate_ids(
    cfg: TrainConfig,
    vocab: Sequence[str],
    params: dict[str, np.ndarray],
    prompt_ids: Sequence[int],
    *,
    tokens: int,
    temperature: float,
    seed: int = 0,
    gpu: GPU | None = None,
    path: str | None = None,
    tiles: TileTable | None = None,
    tokens_per_submit: int = TOKENS_PER_SUBMIT,
) -> np.ndarray:
    """The `tokens` token ids generated after `prompt_ids` on the GPU. path: the prelude (default:
    resolve_f16_path of cfg's precision and f16 choice, as the Trainer); tiles: matmul tiles
    (default: the adapter's tuned table, as the Trainer); tokens_per_submit: program replays a
    submit (the plan's SampleSpec)."""
    check_settings(tokens, temperature, seed)
    gpu = gpu or default_gpu()
    path = path or resolve_f16_path(cfg.precision, cfg.f16, gpu.has_f16)
    tiles = tiles or TileTable.for_adapter(gpu.name)
    plan, blob = build_gpt_sample_plan(
        cfg, vocab, path, tiles, params=params, prompt=prompt_ids, tokens=tokens,
        temperature=temperature, seed=seed, tokens_per_submit=tokens_per_submit,
    )  # fmt: skip
    spec = plan["sample"]
    rt = Runtime(plan, blob, gpu)
    left = spec["tokens"]
    while left > 0:
        n = min(left, spec["tokens_per_submit"])
        rt.run(spec["program"], repeat=n)
        left -= n
    seq = np.frombuffer(rt.read(spec["seq"]), np.uint32)
    length = int(np.frombuffer(rt.read(spec["seq_len"]), np.uint32)[0])
    capacity = spec["prompt_tokens"] + spec["tokens"]
    if length != capacity:
        raise RuntimeError(f"the GPU generated {length - spec['prompt_tokens']} of {tokens} tokens")
    if np.frombuffer(rt.read("flags"), np.uint32)[0]:
        warnings.warn(
            "an activation overflowed the f16 range while sampling; the text may be garbage",
            stacklevel=2,
        )
    return seq[spec["prompt_tokens"] : capacity].copy()


def generate(
    cfg: TrainConfig,
    vocab: Sequence[str],
    params: dict[str, np.ndarray],
    prompt: str,
    *,
    tokens: int = DEFAULT_TOKENS,
    temperature: float = DEFAULT_TEMPERATURE,
    seed: int = 0,
    gpu: GPU | None = None,
    path: str | None = None,
) -> str:
    """`prompt` followed by `tokens` generated characters, from a GPT of config `cfg` with
    vocabulary `vocab` (token id -> character) and f32 parameters `params` (by name, as
    webmp.models.gpt.gpt_param_shapes)."""
    check_settings(tokens, temperature, seed)
    ids = encode_prompt(prompt, vocab)
    out = generate_ids(
        cfg, vocab, params, ids, tokens=tokens, temperature=temperature, seed=seed, gpu=gpu, path=path
    )
    return prompt + "".join(vocab[int(i)] for i in out)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SampleError(f"{path}: unreadable ({e})") from None


def load_run(run_dir: str | Path) -> tuple[TrainConfig, list[str], dict[str, np.ndarray]]:
    """(config, vocabulary, f32 parameters) of a GPT run directory's checkpoint; SampleError (one
    line) when it is not a directory, not a GPT run, has no checkpoint or no vocabulary."""
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
    if cfg.model != "gpt":
        raise SampleError(f"{d} is a {cfg.model!r} run; webmp sample needs a run of --model gpt")
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
    shapes = gpt_param_shapes(len(vocab), cfg.d_model, cfg.n_layer, cfg.context, cfg.tie_head)
    params = {}
    for name, shape in shapes.items():
        raw = contents.get(name)
        if raw is None or len(raw) != 4 * int(np.prod(shape)):
            raise SampleError(
                f"{d}: the checkpoint's {name} does not fit its configuration and vocabulary of "
                f"{len(vocab)} (expected {shape} f32 values)"
            )
        params[name] = np.frombuffer(raw, np.float32).reshape(shape).copy()
    return cfg, list(vocab), params


def _vocab_from_data(d: Path, cfg: TrainConfig, sha256: str | None) -> list[str]:
    """The vocabulary of a run that did not save it: its training data's, if unchanged."""
    from .corpus import load_text
    from .data import DataError

    what = cfg.data or "the default corpus (the Python standard library)"
    try:
        corpus = load_text(cfg.data)
    except (DataError, OSError) as e:
        raise SampleError(f"{d} saved no vocabulary, and its training data is unreadable: {e}") from None
    if sha256 is not None and corpus.sha256 != sha256:
        raise SampleError(f"{d} saved no vocabulary and its training data {what} changed since")
    return corpus.vocab


def sample(
    run_dir: str | Path,
    prompt: str = "",
    *,
    tokens: int = DEFAULT_TOKENS,
    temperature: float = DEFAULT_TEMPERATURE,
    seed: int = 0,
    f16: str | None = None,
    gpu: GPU | None = None,
) -> str:
    """`prompt` followed by `tokens` characters generated by the GPT of `run_dir` (its checkpoint).
    f16: 'native', 'emulated' or 'auto' instead of the run's choice (its precision stays)."""
    check_settings(tokens, temperature, seed)
    cfg, vocab, params = load_run(run_dir)
    ids = encode_prompt(prompt, vocab)  # before touching the GPU
    gpu = gpu or default_gpu()
    path = resolve_f16_path(cfg.precision, f16 or cfg.f16, gpu.has_f16)
    out = generate_ids(
        cfg, vocab, params, ids, tokens=tokens, temperature=temperature, seed=seed, gpu=gpu, path=path
    )
    return prompt + "".join(vocab[int(i)] for i in out)
