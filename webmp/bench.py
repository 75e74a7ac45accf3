"""`webmp bench`: matmul throughput, training-step time and host overhead, memory and readbacks.

Every figure is measured side by side in one run on one adapter, and the JSON names the adapter:
absolute numbers only mean something next to the ratios around them.

- matmul: GFLOP/s of our kernel on each precision path (f16 native, f16 emulated, f32) beside
  numpy float32 on the host and PyTorch on its best device when importable; every size is
  checked against numpy before it is timed. GPU time = many dispatches in one pass, one submit,
  one wait.
- train_step: wall and host-CPU time per step for `mixed` and `fp32` (headline: mixed / fp32), and
  the host-overhead floor: the same dispatch list replayed with bare wgpu-py calls.
- memory: the plan's own byte accounting per category; readbacks: counted in the real training
  loop (webmp.train.Trainer) over 100 steps.
- profile (--profile): GPU time per kernel from timestamp queries, one pass per dispatch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import tune
from .config import TrainConfig
from .data import load_digits, make_dataset
from .models import build_plan
from .plan import Plan, resolve_f16_path
from .tilecache import TileTable, cache_path, load_cache

TARGETS = {
    "host_over_floor": 1.2,
    "activation_ratio": 0.55,
    "readbacks_between_logs": 0,
    # measured only where a GPU is present (see docs/benchmarks.md)
    "gpu_f16_over_f32": 2.0,
    "gpu_f16_over_torch_fp32": 0.5,
    "gpu_mixed_over_fp32_step": 0.6,
}

PRODUCTS = {  # name -> (variant, trans_a, trans_b); the three products a training step runs
    "A.B": ("matmul_fwd", 0, 0),
    "At.B": ("matmul_wgrad", 1, 0),
    "A.Bt": ("matmul_dgrad", 0, 1),
}

# Preset sizes. "default" finishes in under two minutes on a 2-core CPU with lavapipe; "gpu" is the
# real benchmark (4096^3 matmuls, a 4096-wide MLP at batch 1024); "tiny" is for tests.
#   square, train: matmul sizes (n for n^3; batch x in x out, timed as its three products)
#   step_models: (name, hidden widths, batch); "digits" trains on digits, others on synthetic data
#   step_rounds blocks of up to step_steps steps (about step_block_s seconds each) give the wall
#     time per step; each round then alternates at least host_pairs (our step, floor step) pairs
#     for host CPU time
#   matmul_s: seconds per timed batch of matmuls; readback_steps, log_every: the readback count
SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(
        square=[32],
        train=[(16, 40, 24)],
        step_models=[("digits", [32], 16), ("wide", [48], 16)],
        step_rounds=2,
        step_steps=3,
        step_block_s=0.05,
        host_pairs=3,
        matmul_s=0.02,
        readback_steps=20,
        log_every=5,
    ),
    "default": dict(
        square=[256, 512],
        train=[(64, 256, 256), (128, 512, 512)],
        step_models=[("digits", [256, 256], 64), ("wide", [512, 512], 128)],
        step_rounds=3,
        step_steps=10,
        step_block_s=0.5,
        host_pairs=8,
        matmul_s=0.15,
        readback_steps=100,
        log_every=10,
    ),
    "gpu": dict(
        square=[1024, 2048, 4096],
        train=[(1024, 4096, 4096)],
        step_models=[("digits", [256, 256], 64), ("wide", [4096, 4096], 1024)],
        step_rounds=5,
        step_steps=20,
        step_block_s=2.0,
        host_pairs=20,
        matmul_s=0.5,
        readback_steps=100,
        log_every=10,
    ),
}


def _best_of(fn, n=3):
    return min(fn() for _ in range(n))


# --- matmul ----------------------------------------------------------------------------------------


def _numpy_gflops(a, b, flops, target_s):
    """numpy float32 a @ b: the better of BLAS's own threading and one thread (a busy small
    machine can make multi-threaded BLAS far slower than one thread)."""
    from threadpoolctl import threadpool_limits

    def measure():
        once = max(1e-6, _best_of(lambda: _timed(lambda: a @ b), 2))
        reps = int(min(50, max(1, target_s / once)))
        return flops * reps / _best_of(lambda: _timed(lambda: [a @ b for _ in range(reps)]), 5) / 1e9

    threaded = measure()
    with threadpool_limits(limits=1, user_api="blas"):
        single = measure()
    return max(threaded, single)


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def torch_matmul(case, target_s: float) -> dict:
    """PyTorch on its best device: CUDA fp32 (TF32 off) and fp16, else CPU fp32. {} if absent."""
    try:
        import torch
    except ImportError:
        return {}
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    a = case.a.T if case.trans_a else case.a
    b = case.b.T if case.trans_b else case.b
    ref = a @ b
    out = {"torch_device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for name, dt in [("torch_fp32", torch.float32)] + (
        [("torch_fp16", torch.float16)] if dev == "cuda" else []
    ):
        ta = torch.tensor(a, dtype=dt, device=dev)
        tb = torch.tensor(b, dtype=dt, device=dev)
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        got = (ta @ tb).float().cpu().numpy()
        out[name + "_max_abs_err"] = float(np.abs(got - ref).max())

        def batch(reps, ta=ta, tb=tb, sync=sync):
            sync()
            t0 = time.perf_counter()
            for _ in range(reps):
                ta @ tb
            sync()
            return time.perf_counter() - t0

        once = max(1e-6, batch(1))
        reps = int(min(200, max(2, target_s / once)))
        out[name] = case.flops * reps / _best_of(lambda reps=reps: batch(reps)) / 1e9
    return out


def matmul_shapes(preset) -> list[tuple]:
    """(kind, product, (M, N, K)): squares, and each training shape's three products."""
    shapes = [("square", "A.B", (n, n, n)) for n in preset["square"]]
    for batch, fin, fout in preset["train"]:  # batch x in x out: forward, weight grad, input grad
        shapes += [
            ("train", "A.B", (batch, fout, fin)),
            ("train", "At.B", (fin, fout, batch)),
            ("train", "A.Bt", (batch, fin, fout)),
        ]
    return shapes


def bench_matmul(gpu, paths, preset, log) -> list[dict]:
    table = TileTable.for_adapter(gpu.name)
    rows = []
    for kind, product, (M, N, K) in matmul_shapes(preset):
        variant, ta, tb = PRODUCTS[product]
        row = {
            "kind": kind,
            "product": product,
            "M": M,
            "N": N,
            "K": K,
            "gflops": {},
            "error_ratio": {},
            "tiles": {},
        }
        case: tune.MatmulCase | None = None
        for path in paths:
            case = tune.MatmulCase(
                gpu, path, M, N, K, variant, ta, tb, tiles=table.for_shape(path, M, N, K, ta, tb)
            )
            err = case.check()
            row["error_ratio"][path] = round(err, 4)
            row["tiles"][path] = case.tiles
            if err > 1.0:
                raise RuntimeError(
                    f"matmul {product} {M}x{N}x{K} on the {path} path is wrong "
                    f"(worst error {err:.3g} x its tolerance); not timing it"
                )
            row["gflops"][path] = _best_of(lambda case=case: case.gflops(preset["matmul_s"]), 2)
        assert case is not None, "bench_matmul needs at least one path"
        a = (case.a.T if ta else case.a).astype(np.float32)
        b = (case.b.T if tb else case.b).astype(np.float32)
        row["gflops"]["numpy_f32"] = _numpy_gflops(a, b, case.flops, preset["matmul_s"])
        extra = torch_matmul(case, preset["matmul_s"])
        row["gflops"].update({k: v for k, v in extra.items() if k in ("torch_fp32", "torch_fp16")})
        row.update({k: v for k, v in extra.items() if k not in ("torch_fp32", "torch_fp16")})
        rows.append(row)
        log("  matmul " + _matmul_line(row))
    return rows


# --- training step ---------------------------------------------------------------------------------


def synthetic_dataset(features: int, rows: int, classes: int = 10, seed: int = 0):
    rng = np.random.default_rng(seed)
    return make_dataset(
        "synthetic",
        rng.standard_normal((rows, features)),
        rng.integers(0, classes, rows),
        rng.standard_normal((rows // 2, features)),
        rng.integers(0, classes, rows // 2),
        classes,
    )


def step_model(name, hidden, batch):
    if name == "digits":
        return load_digits()
    return synthetic_dataset(hidden[0], 2 * batch)


def bare_dispatches(rt, program="train_step"):
    """(pipeline, bind group, workgroups) per dispatch, with bind groups made here by plain calls."""
    out = []
    for d in rt.plan["programs"][program]:
        bg = rt.device.create_bind_group(
            layout=rt.layouts[d["kernel"]],
            entries=[{"binding": i, "resource": {"buffer": rt.buffers[n]}} for i, n in enumerate(d["bind"])],
        )
        out.append((rt.pipelines[d["kernel"]], bg, d["workgroups"]))
    return out


def bare_replay(device, dispatches, steps: int) -> None:
    """The host floor: one encoder, one compute pass, one submit per step, nothing else."""
    queue = device.queue
    for _ in range(steps):
        enc = device.create_command_encoder()
        cpass = enc.begin_compute_pass()
        for pipeline, bg, (x, y, z) in dispatches:
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, bg)
            cpass.dispatch_workgroups(x, y, z)
        cpass.end()
        queue.submit([enc.finish()])


class StepTimer:
    """Runs one step at a time and keeps each step's host-thread CPU time. Thread CPU time, not
    process time: on a CPU adapter the driver's own threads do the "GPU" work in this process."""

    def __init__(self, step):
        self.step, self.cpu = step, []

    def __call__(self, steps: int) -> None:
        for _ in range(steps):
            c0 = time.thread_time()
            self.step()
            self.cpu.append(time.thread_time() - c0)


class StepLoop:
    """Our runtime's training loop as webmp.train runs it: one run() per step, the metrics ring
    read every log_every steps (counted across calls)."""

    def __init__(self, rt, log_every: int):
        self.rt, self.log_every, self.done = rt, log_every, 0

    def __call__(self) -> None:
        self.done += 1
        self.rt.run("train_step", read_metrics=self.done % self.log_every == 0)

    def repeat(self, n: int) -> None:
        for _ in range(n):
            self()


def _wall(fn, rt) -> float:
    """Wall seconds of fn() and the wait for the GPU to finish it."""
    rt.sync()
    t0 = time.perf_counter()
    fn()
    rt.sync()
    return time.perf_counter() - t0


def step_plan(gpu, name, hidden, batch, precision, log_every) -> tuple[Plan, bytes]:
    cfg = TrainConfig(hidden=hidden, batch_size=batch, precision=precision, steps=10**6, log_every=log_every)
    return build_plan(
        cfg,
        step_model(name, hidden, batch),
        resolve_f16_path(precision, "auto", gpu.has_f16),
        TileTable.for_adapter(gpu.name),
    )


def bench_step(gpu, name, plan, blob, preset, log) -> tuple[dict, object]:
    """Wall time per step of our training loop, and host CPU time per step of our loop and of the
    bare replay, alternating step by step so that load from neighbours hits both alike.
    Returns (row, runtime)."""
    from .runtime import Runtime

    rt = Runtime(plan, blob, gpu)
    bare = bare_dispatches(rt)
    loop = StepLoop(rt, preset["log_every"])
    ours = StepTimer(loop)
    floor = StepTimer(lambda: bare_replay(rt.device, bare, 1))
    loop()  # warm-up
    n = int(min(preset["step_steps"], max(2, preset["step_block_s"] / _wall(loop, rt))))  # steps per block
    wall = 0.0
    for _ in range(preset["step_rounds"]):
        wall += _wall(lambda: loop.repeat(n), rt)
        for _ in range(max(n, preset["host_pairs"])):
            ours(1)
            floor(1)
        rt.sync()
    steps = n * preset["step_rounds"]
    wall /= steps
    cpu, floor_cpu = float(np.median(ours.cpu)), float(np.median(floor.cpu))
    dims, batch, precision = plan["layers"], plan["config"]["batch_size"], plan["precision"]
    row = {
        "model": name,
        "layers": dims,
        "batch": batch,
        "precision": precision,
        "f16_path": plan["f16_path"] or "fp32",
        "dispatches_per_step": len(plan["programs"]["train_step"]),
        "steps_timed": steps,
        "host_steps_timed": len(ours.cpu),
        "wall_ms_per_step": wall * 1e3,
        "host_cpu_ms_per_step": cpu * 1e3,  # median step
        "host_cpu_mean_ms_per_step": float(np.mean(ours.cpu)) * 1e3,  # metrics reads included
        "floor_host_cpu_ms_per_step": floor_cpu * 1e3,
        "host_over_floor": cpu / floor_cpu if floor_cpu > 0 else None,
    }
    log(
        f"  step {name} {'-'.join(map(str, dims))} b{batch} {precision:5}: {wall * 1e3:8.2f} ms wall, "
        f"host {cpu * 1e3:.3f} ms (floor {floor_cpu * 1e3:.3f} ms)"
    )
    return row, rt


# --- readbacks in the real training loop -----------------------------------------------------------


def bench_readbacks(gpu, steps: int, log_every: int, checkpoint_every: int = 0) -> dict:
    """Trains the digits MLP for `steps` steps with webmp.train.Trainer and records every GPU->host
    read it makes: metrics-ring maps (Runtime.readbacks) and whole-buffer reads (Runtime.read).
    Checkpoints (off by default: only the final one) are readbacks too and are counted."""
    from .train import Trainer

    cfg = TrainConfig(steps=steps, log_every=log_every, checkpoint_every=checkpoint_every)
    with tempfile.TemporaryDirectory() as tmp:
        tr = Trainer(cfg, out=Path(tmp) / "run", gpu=gpu, progress=False, log=None)
        rt = tr.runtime
        reads = []  # (step being run or just finished, kind)
        run, read = rt.run, rt.read

        def counted_run(program, read_metrics=False):
            out = run(program, read_metrics=read_metrics)
            if read_metrics:
                reads.append((tr.step + 1, "metrics"))
            return out

        def counted_read(name):
            reads.append((tr.step, f"read:{name}"))
            return read(name)

        setattr(rt, "run", counted_run)  # noqa: B010 (count the Trainer's own calls)
        setattr(rt, "read", counted_read)  # noqa: B010
        before = rt.readbacks
        loop_end = []
        finish = tr.finish

        def marked_finish():
            loop_end.append((len(reads), rt.readbacks))
            return finish()

        setattr(tr, "finish", marked_finish)  # noqa: B010
        tr.run()
    in_loop, maps_in_loop = loop_end[0]
    loop_reads = reads[:in_loop]
    between = [r for r in loop_reads if r[0] % log_every != 0 and r[0] != steps]
    return {
        "steps": steps,
        "log_every": log_every,
        "limit_per_100_steps": 100 / log_every,
        "readbacks_per_100_steps": len(loop_reads) * 100 / steps,
        "runtime_readbacks_in_loop": maps_in_loop - before,
        "readbacks_between_logs": len(between),
        "reads_after_training": sorted({k for _, k in reads[in_loop:]}),
    }


# --- per-kernel GPU time ---------------------------------------------------------------------------


def profile_program(rt, program="train_step", steps: int = 3) -> dict | None:
    """GPU time per kernel from timestamp queries (one pass per dispatch); None without the feature."""
    import wgpu

    if "timestamp-query" not in rt.device.features:
        return None
    ds = rt.plan["programs"][program]
    bare = bare_dispatches(rt, program)
    n = 2 * len(ds)
    qs = rt.device.create_query_set(type="timestamp", count=n)
    resolved = rt.device.create_buffer(
        size=8 * n, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
    )
    kernels = {k["name"]: k for k in rt.plan["kernels"]}
    total: dict[tuple[str, str], float] = {}
    for _ in range(steps):
        enc = rt.device.create_command_encoder()
        for i, (pipeline, bg, (x, y, z)) in enumerate(bare):
            cpass = enc.begin_compute_pass(
                timestamp_writes={
                    "query_set": qs,
                    "beginning_of_pass_write_index": 2 * i,
                    "end_of_pass_write_index": 2 * i + 1,
                }
            )
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, bg)
            cpass.dispatch_workgroups(x, y, z)
            cpass.end()
        enc.resolve_query_set(qs, 0, n, resolved, 0)
        rt.device.queue.submit([enc.finish()])
        ticks = np.frombuffer(rt.device.queue.read_buffer(resolved), np.uint64).reshape(-1, 2)
        for d, (t0, t1) in zip(ds, ticks, strict=True):
            k = kernels[d["kernel"]]
            c = k["constants"]
            shape = (
                "x".join(str(c[s]) for s in ("M", "N", "K") if s in c)
                if k["entry"].startswith("matmul")
                else ""
            )
            key = (k["entry"], shape)
            total[key] = total.get(key, 0.0) + max(0, int(t1) - int(t0)) / 1e3 / steps  # ns -> us
    step_us = sum(total.values())
    rows = [
        {
            "kernel": e,
            "shape": s,
            "us_per_step": round(us, 2),
            "share": round(us / step_us, 4) if step_us else 0,
        }
        for (e, s), us in sorted(total.items(), key=lambda kv: -kv[1])
    ]
    by_family: dict[str, float] = {}
    for (e, _), us in total.items():
        by_family[e] = by_family.get(e, 0.0) + round(us, 2)
    return {
        "gpu_us_per_step": round(step_us, 1),
        "kernels": rows,
        "families": {k: round(v, 2) for k, v in sorted(by_family.items(), key=lambda kv: -kv[1])},
        "note": "one compute pass per dispatch, timestamps in ns as WebGPU defines them",
    }


# --- the whole run -----------------------------------------------------------------------------------


def adapter_info(gpu) -> dict:
    info = gpu.adapter.info
    return {
        "name": gpu.name,
        "backend": info.get("backend_type"),
        "type": info.get("adapter_type"),
        "vendor": info.get("vendor"),
        "shader_f16": gpu.has_f16,
        "timestamp_query": "timestamp-query" in gpu.device.features,
        "vk_icd": os.environ.get("VK_ICD_FILENAMES"),
    }


def run_bench(
    size: str = "default",
    profile: bool = False,
    tune_first: bool = False,
    paths: list[str] | None = None,
    gpu=None,
    log=print,
    tune_budget: float = 60.0,
) -> dict:
    """Runs the benchmark at a preset size ('tiny', 'default', 'gpu') and returns its JSON dict.
    Matmul tiles come from the auto-tune cache for this adapter (tuned first with tune_first)."""
    from .runtime import default_gpu

    gpu = gpu or default_gpu()
    return _run_bench(gpu, size, profile, tune_first, paths, log, tune_budget)


def _run_bench(gpu, size, profile, tune_first, paths, log, tune_budget) -> dict:
    import wgpu

    t_start = time.perf_counter()
    preset = SIZES[size]
    paths = paths or (["native", "emulated", "fp32"] if gpu.has_f16 else ["emulated", "fp32"])
    log(f"webmp bench ({size}) on {gpu.name}")
    result = {
        "format": "webmp-bench/1",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "size": size,
        "adapter": adapter_info(gpu),
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "wgpu": wgpu.__version__,
            "torch": _torch_version(),
        },
        "tune": {"cache": str(cache_path()), "tuned_classes": len(load_cache().get(gpu.name, {}))},
    }

    models = {
        (name, precision): step_plan(gpu, name, hidden, batch, precision, preset["log_every"])
        for name, hidden, batch in preset["step_models"]
        for precision in ("mixed", "fp32")
    }
    if tune_first:
        shapes = [
            (path, M, N, K, ta, tb)
            for _, product, (M, N, K) in matmul_shapes(preset)
            for path in paths
            for (_, ta, tb) in [PRODUCTS[product]]
        ]
        shapes += [s for plan, _ in models.values() for s in tune.plan_shapes(plan)]
        result["tune"]["report"] = tune.tune_shapes(gpu, shapes, budget_s=tune_budget, log=log)
        # rebuild: the plans pick their tiles from the fresh cache
        models = {
            (name, precision): step_plan(gpu, name, hidden, batch, precision, preset["log_every"])
            for name, hidden, batch in preset["step_models"]
            for precision in ("mixed", "fp32")
        }

    log("matmul (GFLOP/s):")
    result["matmul"] = bench_matmul(gpu, paths, preset, log)

    log("training step:")
    steps, profiles = [], {}
    for (name, precision), (plan, blob) in models.items():
        row, rt = bench_step(gpu, name, plan, blob, preset, log)
        steps.append(row)
        if profile:
            profiles[f"{name}/{precision}"] = profile_program(rt)
    result["train_step"] = steps
    result["profile"] = profiles or None

    result["memory"] = {}
    for name, _, _ in preset["step_models"]:
        mixed, fp32 = models[(name, "mixed")][0]["memory"], models[(name, "fp32")][0]["memory"]
        result["memory"][name] = {
            "mixed": mixed,
            "fp32": fp32,
            "activation_ratio": mixed["activations"] / fp32["activations"],
            "total_ratio": sum(mixed.values()) / sum(fp32.values()),
        }

    log("readbacks:")
    result["readbacks"] = bench_readbacks(gpu, preset["readback_steps"], preset["log_every"])
    result["summary"] = summarize(result)
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    return result


def _torch_version():
    try:
        import torch

        return torch.__version__
    except ImportError:
        return None


def summarize(r: dict) -> dict:
    """Headline ratios and the targets, each with the value measured in this run."""
    s = {}
    f16 = "native" if r["adapter"]["shader_f16"] else "emulated"
    biggest = max((m for m in r["matmul"] if m["kind"] == "square"), key=lambda m: m["M"])
    g = biggest["gflops"]
    s["largest_square"] = biggest["M"]
    s["f16_over_f32_matmul"] = g[f16] / g["fp32"]
    s["f16_over_numpy_f32"] = g[f16] / g["numpy_f32"]
    if "torch_fp32" in g:
        s["f16_over_torch_fp32"] = g[f16] / g["torch_fp32"]
    for name in {row["model"] for row in r["train_step"]}:
        rows = {row["precision"]: row for row in r["train_step"] if row["model"] == name}
        s[f"mixed_over_fp32_step_{name}"] = (
            rows["mixed"]["wall_ms_per_step"] / rows["fp32"]["wall_ms_per_step"]
        )
    worst_floor = max(row["host_over_floor"] for row in r["train_step"])
    worst_act = max(m["activation_ratio"] for m in r["memory"].values())
    rb = r["readbacks"]
    on_gpu = r["adapter"]["type"] not in ("CPU", "cpu")
    s["targets"] = {
        "host_over_floor": {
            "value": worst_floor,
            "target": f"<= {TARGETS['host_over_floor']}",
            "met": worst_floor <= TARGETS["host_over_floor"],
        },
        "activation_ratio": {
            "value": worst_act,
            "target": f"<= {TARGETS['activation_ratio']}",
            "met": worst_act <= TARGETS["activation_ratio"],
        },
        "readbacks_per_100_steps": {
            "value": rb["readbacks_per_100_steps"],
            "target": f"<= {rb['limit_per_100_steps']:g}",
            "met": rb["readbacks_per_100_steps"] <= rb["limit_per_100_steps"],
        },
        "readbacks_between_logs": {
            "value": rb["readbacks_between_logs"],
            "target": "== 0",
            "met": rb["readbacks_between_logs"] == 0,
        },
    }
    gpu_targets = {
        "f16_over_f32_matmul": ("gpu_f16_over_f32", ">="),
        "f16_over_torch_fp32": ("gpu_f16_over_torch_fp32", ">="),
        "mixed_over_fp32_step_wide": ("gpu_mixed_over_fp32_step", "<="),
    }
    for key, (tkey, op) in gpu_targets.items():
        if key not in s:
            continue
        met = s[key] >= TARGETS[tkey] if op == ">=" else s[key] <= TARGETS[tkey]
        s["targets"][key] = {
            "value": s[key],
            "target": f"{op} {TARGETS[tkey]} (on a GPU, at the 'gpu' size)",
            "met": met if on_gpu and r["size"] == "gpu" else None,
        }
    return s


# --- output --------------------------------------------------------------------------------------------


def _matmul_line(row) -> str:
    g = row["gflops"]
    cells = "  ".join(f"{k} {v:8.2f}" for k, v in g.items())
    return f"{row['kind']:6} {row['product']:5} {row['M']:>5}x{row['N']:<5}x{row['K']:<5} {cells}"


def format_table(r: dict) -> str:
    out = [f"webmp bench — {r['adapter']['name']} — {r['date']} — size {r['size']}", ""]
    cols = list(dict.fromkeys(k for m in r["matmul"] for k in m["gflops"]))
    out.append("matmul GFLOP/s (checked against numpy before timing)")
    out.append(f"{'kind':6} {'product':7} {'M x N x K':>17} " + " ".join(f"{c:>11}" for c in cols))
    for m in r["matmul"]:
        shape = f"{m['M']}x{m['N']}x{m['K']}"
        out.append(
            f"{m['kind']:6} {m['product']:7} {shape:>17} "
            + " ".join(f"{m['gflops'][c]:11.2f}" if c in m["gflops"] else f"{'-':>11}" for c in cols)
        )
    out += [
        "",
        "training step: wall per step of our loop; host CPU per step (median) of our loop and the bare "
        "replay",
        f"{'model':22} {'prec':5} {'path':8} {'disp':>4} {'wall ms':>9} {'host ms':>8} {'floor ms':>8} "
        f"{'host/floor':>10}",
    ]
    for s in r["train_step"]:
        model = f"{s['model']} {'-'.join(map(str, s['layers']))} b{s['batch']}"
        out.append(
            f"{model:22} {s['precision']:5} {s['f16_path']:8} {s['dispatches_per_step']:4} "
            f"{s['wall_ms_per_step']:9.2f} {s['host_cpu_ms_per_step']:8.3f} "
            f"{s['floor_host_cpu_ms_per_step']:8.3f} {s['host_over_floor']:10.2f}"
        )
    out += [
        "",
        "memory (bytes, from the plan)",
        f"{'model':8} {'category':16} {'mixed':>12} {'fp32':>12} {'ratio':>6}",
    ]
    for name, m in r["memory"].items():
        for cat in m["mixed"]:
            a, b = m["mixed"][cat], m["fp32"][cat]
            out.append(f"{name:8} {cat:16} {a:12d} {b:12d} {a / b if b else 0:6.3f}")
    rb = r["readbacks"]
    out += [
        "",
        f"readbacks: {rb['readbacks_per_100_steps']:g} per 100 steps at log_every={rb['log_every']} "
        f"(limit {rb['limit_per_100_steps']:g}), {rb['readbacks_between_logs']} between log intervals",
    ]
    if r.get("profile"):
        for key, p in r["profile"].items():
            if not p:
                out.append(f"profile {key}: adapter has no timestamp-query")
                continue
            out += [
                "",
                f"profile {key}: {p['gpu_us_per_step']:.1f} us GPU per step (one pass per dispatch)",
                f"{'kernel':16} {'shape':18} {'us/step':>10} {'share':>6}",
            ]
            out += [
                f"{k['kernel']:16} {k['shape']:18} {k['us_per_step']:10.1f} {100 * k['share']:5.1f}%"
                for k in p["kernels"]
            ]
    s = r["summary"]
    out += ["", "headline"]
    out += [f"  {k}: {v:.3f}" for k, v in s.items() if isinstance(v, float)]
    out += ["", "targets"]
    for k, t in s["targets"].items():
        verdict = {True: "met", False: "NOT met", None: "not measured here (needs a GPU at --size gpu)"}[
            t["met"]
        ]
        out.append(f"  {k}: {t['value']:.3f} (target {t['target']}): {verdict}")
    out.append(f"\n{r['seconds']} s in all")
    return "\n".join(out)


def cli_bench(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="webmp bench", description=__doc__.split("\n")[0])
    p.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="default",
        help="default: finishes in minutes on a CPU adapter; gpu: 4096^3 matmuls and a 4096-wide MLP",
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
        choices=["native", "emulated", "fp32"],
        help="matmul precision paths (default: all the adapter supports)",
    )
    args = p.parse_args(argv)
    try:
        r = run_bench(
            args.size,
            profile=args.profile,
            tune_first=args.tune,
            paths=args.paths,
            tune_budget=args.tune_budget,
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
