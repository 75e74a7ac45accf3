"""`webmp bench`'s sampling figure: tokens per second of text generation (webmp/models/net_sample.py)
with the gpt of the size's step models, from initial weights (the speed does not depend on them), with
the attention caches and with the window for every token (kv_cache=False: the sampler before the
caches), for a generation inside the window (a one-token prompt, T - 1 tokens: one window, then one
position a token) and for `webmp sample`'s default length after a one-token prompt (past the window
every token runs the whole window again). Per setting and plan: the setup (plan, pipelines, uploads)
once, then the replay (the schedule's submits, then the read of seq) timed `reps` times with seq
reset in between, the best kept; and whether both plans drew the same tokens."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from ..config import TrainConfig
from ..engine.plan import SamplePlan
from ..engine.runtime import GPU, Runtime
from ..engine.tiles import TileTable
from ..models import build_sample_plan
from ..models.gpt import gpt_init
from ..sample.job import DEFAULT_SEED, DEFAULT_TEMPERATURE, DEFAULT_TOKENS
from ..sample.replay import run_schedule


def replay_seconds(rt: Runtime, plan: SamplePlan, blob: bytes) -> tuple[float, list[int]]:
    """One replay of the plan's schedule from its initial seq and seq_len, timed to the read of seq."""
    spec = plan["sample"]
    for name in (spec["seq"], spec["seq_len"]):
        init = next(b["init"] for b in plan["buffers"] if b["name"] == name)
        assert init is not None  # both hold data: the prompt and its length
        rt.write(name, blob[init["offset"] : init["offset"] + init["bytes"]])
    rt.read(spec["seq_len"])
    t0 = time.perf_counter()
    run_schedule(rt, spec)
    seq = np.frombuffer(rt.read(spec["seq"]), np.uint32)
    return time.perf_counter() - t0, seq[spec["prompt_tokens"] :].tolist()


def bench_setting(
    gpu: GPU, cfg: TrainConfig, vocab: Sequence[str], params: dict, tokens: int, kv_cache: bool, reps: int
) -> dict:
    t0 = time.perf_counter()
    plan, blob = build_sample_plan(
        cfg, vocab, "native" if gpu.has_f16 else "emulated", TileTable.for_adapter(gpu.name), params=params,
        prompt=[0], tokens=tokens, temperature=DEFAULT_TEMPERATURE, seed=DEFAULT_SEED, kv_cache=kv_cache,
    )  # fmt: skip
    rt = Runtime(plan, blob, gpu)
    rt.read(plan["sample"]["seq_len"])  # the uploads done
    setup = time.perf_counter() - t0
    times, ids = zip(*(replay_seconds(rt, plan, blob) for _ in range(reps)), strict=True)
    best = min(times)
    return {
        "kv_cache": kv_cache,
        "schedule": [[r["program"], r["tokens"]] for r in plan["sample"]["schedule"]],
        "setup_s": round(setup, 3),
        "replay_s": round(best, 4),
        "replay_all_s": [round(t, 4) for t in times],
        "tokens_per_s": round(tokens / best, 1),
        "ids": list(ids[0]),
    }


def bench_sampling(
    gpu: GPU, config: dict, vocab: Sequence[str], reps: int, log: Callable[..., None]
) -> list[dict]:
    """Both settings (module docstring), each with and without the caches."""
    cfg = TrainConfig(**config)
    V, T = len(vocab), cfg.context
    params = gpt_init(
        V, cfg.d_model, cfg.n_layer, cfg.n_head, T, np.random.default_rng(cfg.seed), cfg.tie_head
    )
    rows = []
    for what, tokens in (("inside the window", T - 1), ("webmp sample's default", DEFAULT_TOKENS)):
        cached, window = (bench_setting(gpu, cfg, vocab, params, tokens, kv, reps) for kv in (True, False))
        row = {
            "setting": what, "prompt_tokens": 1, "tokens": tokens, "context": T, "cached": cached,
            "window": window, "speedup": round(cached["tokens_per_s"] / window["tokens_per_s"], 2),
            "same_tokens": cached["ids"] == window["ids"],
        }  # fmt: skip
        for r in (cached, window):
            del r["ids"]
        rows.append(row)
        log(f"  {sampling_line(row)}")
    return rows


def sampling_line(row: dict) -> str:
    c, w = row["cached"], row["window"]
    same = "the same tokens" if row["same_tokens"] else "DIFFERENT TOKENS"
    return (
        f"{row['setting']} ({row['tokens']} tokens, context {row['context']}): {c['tokens_per_s']} tok/s "
        f"with the caches, {w['tokens_per_s']} window-only: {row['speedup']}x, {same}"
    )
