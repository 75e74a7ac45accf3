"""`webmp bench`: matmul throughput, training-step time and host overhead, memory and readbacks.

Every figure is measured side by side in one run on one adapter, and the JSON names the adapter
and the host: absolute numbers only mean something next to the ratios around them. This module
runs the sections in turn (run_bench) and is the command line (cli_bench); each section is a module
of its own:

- matmul: GFLOP/s of our kernel on each precision path (f16 native, f16 emulated, bf16, f32) beside
  numpy float32 on the host and PyTorch on its best device when importable; every size is
  checked against numpy before it is timed. GPU time = many dispatches in one pass, one submit,
  one wait.
- step: per model of the preset (the MLPs, and the character GPT at TrainConfig(model="gpt")'s
  shape), wall and host-CPU time per step for `mixed`, `bf16` and `fp32` (memory.STEP_PRECISIONS;
  headlines: mixed / fp32, bf16 / fp32), tokens
  or examples per second, dispatches and submits per step, and the host-overhead floor: the same
  dispatch list replayed with bare wgpu-py calls; and the time to the first step (plan build,
  runtime creation with its pipelines, the first step submitted and finished), and whether Mesa's
  on-disk shader cache was warm.
- memory: the plan's own byte accounting per category, and which activations stay 32-bit;
  readbacks: counted in the real training loop (webmp.train.loop.Trainer).
- sampling: tokens per second of text generation with the GPT's shape, with the attention caches
  and window-only, inside the window and at `webmp sample`'s default length.
- profile (--profile): GPU time per kernel from timestamp queries, one pass per dispatch.
- levers (--memory; always at --size tiny): the GPT's GPU bytes by category and step time with each
  memory lever (--grad-accum, --recompute, --attention fused) alone and all together.
- report: the targets, the summary and the printed table; markdown: docs/benchmarks.md from the
  JSON; cold (--cold-start) and ranks (--ranks N): runs of their own.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..config import TrainConfig
from ..data.text import describe_data
from ..engine.plan import Plan
from ..engine.tune_cache import cache_path, load_cache
from ..presets import SIZES
from ..tune import native as tune
from .first_run import first_run_vs_tuned
from .levers import batches_text, bench_levers
from .machine import adapter_info, run_info
from .matmul import PRODUCTS, bench_matmul, bench_model_matmuls, matmul_shapes
from .memory import STEP_PRECISIONS, attention_memory, memory_entry
from .profile import profile_program
from .readbacks import bench_readbacks, readback_line
from .report import format_table, summarize
from .sampling import bench_sampling
from .step import bench_step, model_data, model_settings, step_plan

SAMPLING_REPS = 3  # replays of each sampling plan: the best counts
FORMAT = "webmp-bench/3"  # 3: host's cpu_model, cpu_id, cpu_mhz; adapter's device, driver; webmp


def _step_models(preset: dict, size: str, models: list[str] | None) -> list[dict]:
    step_models = preset["step_models"]
    if models is None:
        return step_models
    names = [m["name"] for m in step_models]
    if set(models) - set(names):
        raise ValueError(f"unknown step models {sorted(set(models) - set(names))}; {size!r} has {names}")
    return [m for m in step_models if m["name"] in models]


def _header(gpu, size: str) -> dict:
    """What the run is: its format, when and where it ran, and the tune cache it found."""
    info = run_info()
    return {
        "format": FORMAT,
        "date": info["date"],
        "size": size,
        "adapter": adapter_info(gpu),
        "host": info["host"],
        "webmp": info["webmp"],
        "tune": {"cache": str(cache_path()), "tuned_classes": len(load_cache().get(gpu.name, {}))},
    }


def _build_plans(gpu, step_models, preset, data) -> dict[tuple[str, str], tuple[Plan, bytes, float]]:
    return {
        (m["name"], precision): step_plan(
            gpu, m, data[m["name"]], precision, model_settings(preset, m)["log_every"]
        )
        for m in step_models
        for precision in STEP_PRECISIONS
    }


def _tune(gpu, preset, paths, plans, budget_s: float, log) -> dict:
    """Tunes the plans' own shapes and the bench's matmul shapes on every path (cached per adapter).
    A class is timed at the first of its shapes given (tune.classes_of): the plans' come first,
    the most work first, so that a class holding a model's product is tuned at that product (the
    GPT's 512 x 128 x 1024 rather than the bench's 1024 x 256 x 1024 of the same class)."""
    own = [s for plan, _, _ in plans.values() for s in tune.plan_shapes(plan)]
    shapes = sorted(dict.fromkeys(own), key=lambda s: -tune.shape_work(s))
    shapes += [
        (path, M, N, K, ta, tb, 1)
        for _, product, (M, N, K) in matmul_shapes(preset)
        for path in paths
        for (_, ta, tb) in [PRODUCTS[product]]
    ]
    return tune.tune_shapes(gpu, shapes, budget_s=budget_s, log=log)


def _bench_steps(gpu, step_models, preset, plans, data_s, profile: bool, log) -> dict:
    """Each model's step in each of STEP_PRECISIONS: the train_step and first_step rows, and the
    profiles."""
    steps, firsts, profiles = [], [], {}
    for m in step_models:
        for precision in STEP_PRECISIONS:
            plan, blob, plan_s = plans[(m["name"], precision)]
            row, first, rt = bench_step(gpu, m["name"], plan, blob, model_settings(preset, m), log, plan_s)
            first["data_s"] = data_s[m["name"]]  # loading the data, once per model (not in total_s)
            steps.append(row)
            firsts.append(first)
            if profile:
                profiles[f"{m['name']}/{precision}"] = profile_program(rt)
    return {"train_step": steps, "first_step": firsts, "profile": profiles or None}


def _bench_readbacks(gpu, step_models, preset, data, log) -> dict:
    out = {}
    for m in step_models:
        if not m.get("readbacks"):
            continue
        st, config = model_settings(preset, m), dict(m["config"])
        if config.get("model") == "gpt":  # one evaluation chunk at the end: the loop is what counts
            c = TrainConfig(**config)
            config["val_tokens"] = c.batch_size * c.context + 1
        rb = bench_readbacks(gpu, st["readback_steps"], st["log_every"], config=config, data=data[m["name"]])
        out[m["name"]] = rb
        log(f"  {readback_line(m['name'], rb)}")
    return out


def _bench_levers(gpu, preset: dict, data: dict, log) -> dict:
    """The levers' section on the preset's gpt step model (run whether or not --models has it)."""
    gpt = next(m for m in preset["step_models"] if m["name"] == "gpt")
    settings = preset["levers"]
    corpus = data["gpt"] if "gpt" in data else model_data(gpt, preset)
    path = "native" if gpu.has_f16 else "emulated"
    log(f"memory levers (the gpt's shape, {path} path, {batches_text(settings)}):")
    return bench_levers(gpu, {**gpt["config"], **settings["config"]}, corpus, path, settings, log)


def run_bench(
    size: str = "default",
    profile: bool = False,
    tune_first: bool = False,
    paths: list[str] | None = None,
    gpu=None,
    log=print,
    tune_budget: float = 60.0,
    models: list[str] | None = None,
    memory: bool = False,
) -> dict:
    """Runs the benchmark at a preset size ('tiny', 'default', 'gpu') and returns its JSON dict.
    Matmul tiles come from the auto-tune cache for this adapter (tuned first with tune_first).
    models: the names of the preset's step models to run (default all: digits, wide, gpt, cnn).
    memory: the levers' section too (webmp.bench.levers; the tiny size always runs its small one)."""
    from ..engine.runtime import default_gpu

    gpu = gpu or default_gpu()
    t_start = time.perf_counter()
    preset = SIZES[size]
    step_models = _step_models(preset, size, models)
    paths = paths or (["native", "emulated", "bf16", "fp32"] if gpu.has_f16 else ["emulated", "bf16", "fp32"])
    log(f"webmp bench ({size}) on {gpu.name}")
    result = _header(gpu, size)
    data, data_s = {}, {}
    for m in step_models:
        t0 = time.perf_counter()
        data[m["name"]] = model_data(m, preset)
        data_s[m["name"]] = time.perf_counter() - t0
    result["data"] = {m["name"]: describe_data(data[m["name"]]) for m in step_models}
    plans = _build_plans(gpu, step_models, preset, data)
    if tune_first:
        result["tune"]["report"] = _tune(gpu, preset, paths, plans, tune_budget, log)
        plans = _build_plans(gpu, step_models, preset, data)  # their tiles from the fresh cache

    log("matmul (GFLOP/s):")
    result["matmul"] = bench_matmul(gpu, paths, preset, log)
    log("the step models' matmul shapes (GFLOP/s, the plans' tiles):")
    mm_paths = paths[: preset.get("model_matmul_paths", len(paths))]
    result["model_matmuls"] = bench_model_matmuls(gpu, plans, mm_paths, preset["matmul_s"], log)
    log("training step:")
    result.update(_bench_steps(gpu, step_models, preset, plans, data_s, profile, log))
    result["memory"] = {
        m["name"]: memory_entry({p: plans[(m["name"], p)][0] for p in STEP_PRECISIONS}) for m in step_models
    }
    log("readbacks:")
    result["readbacks"] = _bench_readbacks(gpu, step_models, preset, data, log)
    gpts = [m for m in step_models if m["config"].get("model") == "gpt"]
    if gpts:
        log("sampling:")
        vocab = data[gpts[0]["name"]].vocab  # type: ignore[union-attr]
        result["sampling"] = bench_sampling(gpu, gpts[0]["config"], vocab, SAMPLING_REPS, log)
        log("attention memory, fused and three-kernel (the gpt's shape, f16 path):")
        result["attention_memory"] = attention_memory(
            gpu, gpts[0]["config"], data[gpts[0]["name"]], "native" if gpu.has_f16 else "emulated",
            timed=size != "tiny", log=log,
        )  # fmt: skip
    if gpts:
        log("the GPT's step with the first run's tiles and the tuned ones:")
        path = "native" if gpu.has_f16 else "emulated"
        result["first_run"] = first_run_vs_tuned(gpu, gpts[0]["config"], data[gpts[0]["name"]], path, log=log)
    if memory or size == "tiny":
        result["levers"] = _bench_levers(gpu, preset, data, log)
    result["summary"] = summarize(result)
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    return result


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="webmp bench", description=__doc__.split("\n")[0])
    p.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="default",
        help="default: finishes in minutes on a CPU adapter; gpu: 4096^3 matmuls and a 4096-wide MLP; "
        "tiny: for tests",
    )
    p.add_argument("--out", default="bench.json", help="JSON output (default bench.json)")
    p.add_argument("--profile", action="store_true", help="GPU time per kernel from timestamp queries")
    p.add_argument(
        "--tune",
        action="store_true",
        help="auto-tune matmul tiles for the benchmarked shapes first (cached per adapter)",
    )
    p.add_argument(
        "--tune-budget", type=float, default=60.0, help="seconds the auto-tune may take (default 60)"
    )
    p.add_argument(
        "--paths",
        nargs="+",
        choices=["native", "emulated", "bf16", "fp32"],
        help="matmul precision paths (default: all the adapter supports)",
    )
    p.add_argument(
        "--models",
        nargs="+",
        choices=sorted({m["name"] for size in SIZES.values() for m in size["step_models"]}),
        help="the training-step models to run (default: all of the size's: digits, wide, gpt, cnn)",
    )
    p.add_argument(
        "--memory",
        action="store_true",
        help="also the memory levers: the GPT's GPU bytes by category and step time with --grad-accum, "
        "--recompute blocks and --attention fused, alone and together, at contexts 64, 256, 1024",
    )
    p.add_argument(
        "--ranks",
        type=int,
        help="only the data-parallel step, on N MPI ranks: run as `mpirun -n N webmp bench --ranks N` "
        "(readback, all-reduce and upload ms per step; rank 0 writes --out)",
    )
    p.add_argument(
        "--cold-start",
        nargs="?",
        const="mlp",
        choices=["mlp", "gpt"],
        help="only this: plan to first finished step of the default MLP (or with `gpt`, of "
        "TrainConfig(model='gpt')), natively and in a headless Chromium page, with Mesa's shader "
        "cache cold and warm (webmp/bench/cold.py)",
    )
    return p


def cli_bench(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.ranks is not None:
        from .ranks import cli_bench_ranks

        return cli_bench_ranks(args)
    if args.cold_start:
        from . import cold as bench_cold

        try:
            return bench_cold.cli(args.out, {"model": "gpt"} if args.cold_start == "gpt" else None)
        except RuntimeError as e:
            print(f"webmp bench: {e}", file=sys.stderr)
            return 1
    try:
        r = run_bench(
            args.size,
            profile=args.profile,
            tune_first=args.tune,
            paths=args.paths,
            tune_budget=args.tune_budget,
            models=args.models,
            memory=args.memory,
            log=lambda *a: print(*a, file=sys.stderr, flush=True),
        )
    except RuntimeError as e:
        print(f"webmp bench: {e}", file=sys.stderr)
        return 1
    print(format_table(r))
    Path(args.out).write_text(json.dumps(r, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_bench(sys.argv[1:]))
