"""Text generation from a trained GPT or token network (`webmp sample`), on the GPU with the training kernels.

The plan (webmp.models.build_sample_plan) holds everything: the prompt's token ids in the
GPU buffer `seq`, the programs adding one token (the window's forward pass, or the newest
position's over the attention caches, then the draw) and the schedule that says which to replay
how often. Loading a run, checking the input and building the plan are
webmp/sample/job.py's (no wgpu there: the server builds the browser page's sampling plans with
it); this module replays the schedule's programs, at most `tokens_per_submit` a submit, through
wgpu-py (no host work per token) and reads `seq` once at the end (`replay`, whose twin in the
page is web/loops.js's generate).

  sample(run_dir, prompt, tokens=..., temperature=..., seed=...) -> prompt + generated text
  generate(cfg, vocab, params, prompt, ...)                       the same without a run directory

Both return the prompt followed by the generated characters: what `webmp sample` prints (then a
newline). The rules (empty prompt, temperature 0, the seed, where the vocabulary comes from) are
in webmp/sample/job.py's docstring.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..config import TrainConfig
from ..engine.plan import SamplePlan, resolve_f16_path
from ..engine.precompile import cpu_cores, helpers_for
from ..engine.runtime import GPU, Runtime, default_gpu
from ..engine.tiles import TileTable
from ..models import build_sample_plan
from ..models.net_sample import TOKENS_PER_SUBMIT
from .job import (
    DEFAULT_SEED,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOKENS,
    SampleJob,
    SampleSettings,
    prepare,
)


def run_schedule(rt: Runtime, spec) -> None:
    """Each run of a sampling plan's schedule: its program once per token, tokens_per_submit
    replays a submit (web/loops.js's generate is the page's twin)."""
    for run in spec["schedule"]:
        left = run["tokens"]
        while left > 0:
            n = min(left, spec["tokens_per_submit"])
            rt.run(run["program"], repeat=n)
            left -= n


def replay(plan: SamplePlan, blob: bytes, gpu: GPU | None = None, compile_helpers: int = 0) -> np.ndarray:
    """Run a sampling plan on the GPU: each run of its schedule, its program once per token,
    tokens_per_submit replays a submit; the generated token ids (u32), read from `seq` once.
    compile_helpers: its kernels compiled first on that many more devices at once
    (webmp.engine.precompile)."""
    spec = plan["sample"]
    rt = Runtime(plan, blob, gpu, compile_helpers=compile_helpers)
    run_schedule(rt, spec)
    seq = np.frombuffer(rt.read(spec["seq"]), np.uint32)
    length = int(np.frombuffer(rt.read(spec["seq_len"]), np.uint32)[0])
    capacity = spec["prompt_tokens"] + spec["tokens"]
    if length != capacity:
        raise RuntimeError(f"the GPU generated {length - spec['prompt_tokens']} of {spec['tokens']} tokens")
    if np.frombuffer(rt.read(spec["flags"]), np.uint32)[0]:
        warnings.warn(
            "webmp: an activation overflowed the f16 range while sampling; the text may be garbage",
            stacklevel=3,
        )
    return seq[spec["prompt_tokens"] : capacity].copy()


def generate_ids(
    cfg: TrainConfig,
    vocab: Sequence[str],
    params: dict[str, np.ndarray],
    prompt_ids: Sequence[int],
    *,
    tokens: int,
    temperature: float,
    seed: int = DEFAULT_SEED,
    gpu: GPU | None = None,
    path: str | None = None,
    tiles: TileTable | None = None,
    tokens_per_submit: int = TOKENS_PER_SUBMIT,
    kv_cache: bool = True,
    fp8_scale: np.ndarray | None = None,
    compile_helpers: int = 0,
) -> np.ndarray:
    """The `tokens` token ids generated after `prompt_ids` on the GPU. path: the prelude (default:
    resolve_f16_path of cfg's precision and f16 choice, as the Trainer); tiles: matmul tiles
    (default: the adapter's tuned table, as the Trainer); tokens_per_submit: program replays a
    submit (the plan's SampleSpec); kv_cache=False: the window program for every token (the same
    tokens, slower: webmp/models/net_sample.py); fp8_scale: an fp8 run's scale exponents (its
    checkpoint's; None: 1); compile_helpers: as replay's."""
    settings = SampleSettings.of(tokens=tokens, temperature=temperature, seed=seed)
    gpu = gpu or default_gpu()
    path = path or resolve_f16_path(cfg.precision, cfg.f16, gpu.has_f16)
    tiles = tiles or TileTable.for_adapter(gpu.name, gpu.info)
    plan, blob = build_sample_plan(
        cfg, vocab, path, tiles, params=params, prompt=prompt_ids, tokens=settings.tokens,
        temperature=settings.temperature, seed=settings.seed, tokens_per_submit=tokens_per_submit,
        kv_cache=kv_cache, fp8_scale=fp8_scale,
    )  # fmt: skip
    return replay(plan, blob, gpu, compile_helpers)


def generate(
    cfg: TrainConfig,
    vocab: Sequence[str],
    params: dict[str, np.ndarray],
    prompt: str,
    *,
    tokens: int = DEFAULT_TOKENS,
    temperature: float = DEFAULT_TEMPERATURE,
    seed: int = DEFAULT_SEED,
    gpu: GPU | None = None,
    path: str | None = None,
) -> str:
    """`prompt` followed by `tokens` generated characters, from the GPT or token network of config `cfg` with
    vocabulary `vocab` (token id -> character) and f32 parameters `params` (by name, as
    webmp.models.sample_param_shapes)."""
    job = SampleJob.new(cfg, vocab, params, prompt, tokens=tokens, temperature=temperature, seed=seed)
    ids = generate_ids(
        cfg, job.vocab, params, job.prompt_ids, tokens=job.tokens, temperature=job.temperature,
        seed=job.seed, gpu=gpu, path=path,
    )  # fmt: skip
    return job.text(ids)


def sample(
    run_dir: str | Path,
    prompt: str = "",
    *,
    tokens: int = DEFAULT_TOKENS,
    temperature: float = DEFAULT_TEMPERATURE,
    seed: int = DEFAULT_SEED,
    f16: str | None = None,
    gpu: GPU | None = None,
    tiles: TileTable | None = None,
) -> str:
    """`prompt` followed by `tokens` characters generated by the model of `run_dir` (its checkpoint).
    f16: 'native', 'emulated' or 'auto' instead of the run's choice (its precision stays); tiles:
    matmul tiles (default: the adapter's tuned table, as the Trainer; a browser page's plans use
    TileTable(), the defaults). Where the driver compiles a kernel at its first dispatch, the plan's
    kernels are compiled first on more devices at once (webmp.engine.precompile), as `webmp train`'s."""
    job = prepare(run_dir, prompt, tokens=tokens, temperature=temperature, seed=seed)  # before the GPU
    gpu = gpu or default_gpu()
    helpers, _ = helpers_for(gpu.info, gpu.features, cpu_cores())
    ids = generate_ids(
        job.cfg, job.vocab, job.params, job.prompt_ids, tokens=job.tokens, temperature=job.temperature,
        seed=job.seed, gpu=gpu, path=job.path(gpu.has_f16, f16), tiles=tiles, fp8_scale=job.fp8_scale,
        compile_helpers=helpers,
    )  # fmt: skip
    return job.text(ids)
