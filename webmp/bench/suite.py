"""`webmp bench`: matmul throughput, training-step time and host overhead, memory and readbacks.

Every figure is measured side by side in one run on one adapter, and the JSON names the adapter:
absolute numbers only mean something next to the ratios around them.

- matmul: GFLOP/s of our kernel on each precision path (f16 native, f16 emulated, f32) beside
  numpy float32 on the host and PyTorch on its best device when importable; every size is
  checked against numpy before it is timed. GPU time = many dispatches in one pass, one submit,
  one wait.
- train_step: per model of the preset (the MLPs, and the character GPT at TrainConfig(model="gpt")'s
  shape), wall and host-CPU time per step for `mixed` and `fp32` (headline: mixed / fp32), tokens
  or examples per second, dispatches and submits per step, and the host-overhead floor: the same
  dispatch list replayed with bare wgpu-py calls.
- first_step: time to the first step (plan build, runtime creation with its pipelines, the first
  step submitted and finished), and whether Mesa's on-disk shader cache was warm.
- memory: the plan's own byte accounting per category, and which activations stay 32-bit;
  readbacks: counted in the real training loop (webmp.train.loop.Trainer).
- profile (--profile): GPU time per kernel from timestamp queries, one pass per dispatch.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..data.tables import Dataset, load_digits, make_dataset
from ..data.text import TextCorpus, describe_data, load_text, tokenize
from ..engine.plan import Plan, resolve_f16_path
from ..engine.tiles import DEFAULT_TILES, Tiles, TileTable, cache_path, load_cache
from ..models import build_plan
from ..presets import GPT_BENCH_ALPHABET, SIZES, STEP_SETTINGS
from ..tune import matmul_cases
from ..tune import native as tune

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
    out: dict[str, Any] = {"torch_device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
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


# A tile choice per matmul core (webmp.ops.MATMUL_CORES), timed beside the tuned choice at every
# benchmarked shape: what each core does here, whatever the tuner picked.
CORE_TILES: dict[str, Tiles] = {
    "tiled": DEFAULT_TILES,
    "reg": {"core": "reg", "WG_X": 8, "WG_Y": 4, "TM": 16, "TN": 4, "B_PAIRS": 1},
    "reg_sg": {"core": "reg_sg", "WG_X": 8, "WG_Y": 4, "TM": 16, "TN": 8, "B_PAIRS": 1},
}


def core_gflops(gpu, path, M, N, K, variant, ta, tb, target_s) -> dict[str, float]:
    """GFLOP/s of each core (CORE_TILES) that the device runs, each checked first; a core whose
    result is wrong here gets NaN (and is never chosen by the tuner, which checks the same way)."""
    out = {}
    for core, tiles in CORE_TILES.items():
        if not matmul_cases.fits(tiles, gpu.device.limits, gpu.has_subgroups):
            continue
        case = tune.MatmulCase(gpu, path, M, N, K, variant, ta, tb, tiles=tiles)
        out[core] = case.gflops(target_s, batches=3) if case.check() <= 1.0 else math.nan
    return out


def bench_model_matmuls(gpu, plans: dict, paths, target_s: float, log) -> dict:
    """GFLOP/s of every distinct matmul shape of the GPT's mixed plan, with the tiles the plan uses
    (the tune cache's, else the defaults), per path, and their median per path: the fastest of 5
    rounds over all the shapes and paths (tune.interleaved_gflops). Attention's
    batched products are timed batched as the model dispatches them (`batch` batch-heads a
    dispatch; operands one batch after another rather than interleaved by head: the same
    arithmetic, tiles and grid)."""
    table = TileTable.for_adapter(gpu.name)
    out: dict[str, Any] = {}
    for (name, precision), (plan, _, _) in plans.items():
        if precision != "mixed" or name != "gpt":  # the GPT's shapes are the ones at stake
            continue
        products = list(dict.fromkeys(s[1:] for s in tune.plan_shapes(plan)))
        rows: list[dict] = []
        timed: list[tuple[dict, str, tune.MatmulCase]] = []
        for M, N, K, ta, tb, batch in products:
            row: dict[str, Any] = {
                "M": M,
                "N": N,
                "K": K,
                "trans_a": ta,
                "trans_b": tb,
                "batch": batch,
                "gflops": {},
                "tiles": {},
            }
            for path in paths:
                tiles = table.for_shape(path, M, N, K, ta, tb)
                case = tune.MatmulCase(gpu, path, M, N, K, "matmul_wgrad", ta, tb, tiles=tiles, batch=batch)
                if case.check() > 1.0:
                    raise RuntimeError(f"matmul {M}x{N}x{K} ({ta}{tb}) with {tiles} on {path} is wrong")
                timed.append((row, path, case))
                row["tiles"][path] = tiles
            rows.append(row)
        gflops = tune.interleaved_gflops([case for _, _, case in timed], target_s, rounds=5)
        for (row, path, _), gf in zip(timed, gflops, strict=True):
            row["gflops"][path] = gf
        median = {path: float(np.median([r["gflops"][path] for r in rows])) for path in paths}
        out[name] = {"shapes": rows, "median_gflops": median}
        log(
            f"  {name}: median over its {len(rows)} matmul shapes "
            + "  ".join(f"{p} {g:.2f}" for p, g in median.items())
        )
    return out


def bench_matmul(gpu, paths, preset, log) -> list[dict]:
    table = TileTable.for_adapter(gpu.name)
    rows: list[dict] = []
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
            "cores": {},
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
            row["gflops"][path] = case.gflops(preset["matmul_s"], batches=3)
            if preset.get("core_rows") is None or len(rows) < preset["core_rows"]:
                row["cores"][path] = core_gflops(gpu, path, M, N, K, variant, ta, tb, preset["matmul_s"])
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


def bench_corpus(chars: int | None, seed: int = 0) -> TextCorpus:
    """The GPT's text: the default corpus (chars None), or `chars` random characters over
    GPT_BENCH_ALPHABET (a step's work depends on the vocabulary size, not on the text)."""
    if chars is None:
        return load_text()
    text = "".join(np.random.default_rng(seed).choice(list(GPT_BENCH_ALPHABET), size=chars))
    source = f"{chars} random characters over {GPT_BENCH_ALPHABET!r} (seed {seed})"
    return tokenize(text, "bench", source, hashlib.sha256(text.encode()).hexdigest())


def model_data(model: dict, preset: dict) -> Dataset | TextCorpus:
    """What a step model trains on: the GPT the preset's gpt_corpus, "digits" the digits, any other
    MLP synthetic rows as wide as its first hidden layer."""
    cfg = model["config"]
    if cfg.get("model") == "gpt":
        return bench_corpus(preset["gpt_corpus"])
    if model["name"] == "digits":
        return load_digits()
    return synthetic_dataset(cfg["hidden"][0], 2 * cfg["batch_size"])


def model_settings(preset: dict, model: dict) -> dict:
    """The preset's STEP_SETTINGS, with the model's own where it has them."""
    return {k: model.get(k, preset[k]) for k in STEP_SETTINGS}


def model_shape(plan: Plan) -> str:
    """A step model's shape in a few characters: the MLP's layer widths, the GPT's layers (L),
    heads (H), width (D), context (T) and vocabulary (V)."""
    c = plan["config"]
    if c["model"] == "gpt":
        return f"L{c['n_layer']} H{c['n_head']} D{c['d_model']} T{c['context']} V{plan['layers'][0]}"
    return "-".join(map(str, plan["layers"]))


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
    """Our runtime's training loop as webmp.train.loop runs it: one run() per step, the metrics ring
    read every log_every steps (counted across calls)."""

    def __init__(self, rt, log_every: int):
        self.rt, self.log_every, self.done = rt, log_every, 0

    def __call__(self) -> None:
        self.done += 1
        self.rt.run("train_step", read_metrics=self.read_last)

    @property
    def read_last(self) -> bool:
        """Whether the last step read the metrics ring (mapped it and so waited for the GPU)."""
        return self.done % self.log_every == 0

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


def step_plan(gpu, model: dict, data, precision: str, log_every: int) -> tuple[Plan, bytes, float]:
    """A step model's plan and blob for `precision`, and the seconds building them took."""
    t0 = time.perf_counter()
    cfg = TrainConfig(**{"steps": 10**6, **model["config"], "precision": precision, "log_every": log_every})
    plan, blob = build_plan(
        cfg, data, resolve_f16_path(precision, "auto", gpu.has_f16), TileTable.for_adapter(gpu.name)
    )
    return plan, blob, time.perf_counter() - t0


def mesa_shader_cache() -> dict:
    """Files and bytes of Mesa's on-disk shader caches: the mesa_shader_cache* folders under
    $MESA_SHADER_CACHE_DIR, else $XDG_CACHE_HOME, else ~/.cache ("dir" None: disabled). lavapipe
    compiles a pipeline's shader when it is first dispatched and stores the result there."""
    if os.environ.get("MESA_SHADER_CACHE_DISABLE", "").lower() in ("1", "true", "yes"):
        return {"dir": None, "files": 0, "bytes": 0}
    base = Path(
        os.environ.get("MESA_SHADER_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    )
    files, total = 0, 0
    for d in base.glob("mesa_shader_cache*"):
        for f in d.rglob("*"):
            try:  # entries may be evicted while we walk
                if f.is_file():
                    files, total = files + 1, total + f.stat().st_size
            except OSError:
                pass
    return {"dir": str(base), "files": files, "bytes": total}


def process_bytes_written() -> int | None:
    """Bytes this process has passed to write() so far (Linux /proc/self/io "wchar"), else None."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split(":")[1]) for line in f if line.startswith("wchar:"))
    except (OSError, StopIteration, ValueError):
        return None


# A shader found in Mesa's cache costs this process a few bytes of writes (the cache database
# refreshes its entry's access time: ~15 bytes per kernel measured with Mesa 25); a shader compiled
# and stored costs kilobytes. Fewer bytes written than this per kernel: the cache was warm.
CACHE_HIT_BYTES_PER_KERNEL = 32


def cache_warm(gpu_name: str, kernels: int, written: int | None, added: int, cache_dir) -> bool | None:
    """Whether Mesa's shader cache held every kernel of a plan, judged from what this process wrote
    while creating its runtime and running the first step (the cache is shared with other processes,
    whose writes would mislead a look at its size alone; that is the fallback without /proc);
    None for an adapter that is not Mesa's, or with the cache disabled."""
    if "mesa" not in gpu_name.lower() or cache_dir is None:
        return None
    if written is not None:
        return written <= CACHE_HIT_BYTES_PER_KERNEL * kernels
    return added == 0


def bench_step(gpu, name, plan, blob, settings, log, plan_s: float = 0.0) -> tuple[dict, dict, Any]:
    """The time to the first step (runtime creation, pipelines included, and the first step
    submitted and finished; plan_s is the plan build's), then the wall time per step of our
    training loop, and the host CPU time per step of our loop and of the bare replay, alternating
    step by step so that load from neighbours hits both alike. Returns (row, first-step row,
    runtime)."""
    from ..engine.runtime import Runtime

    cache0, written0 = mesa_shader_cache(), process_bytes_written()
    t0 = time.perf_counter()
    rt = Runtime(plan, blob, gpu)
    t1 = time.perf_counter()
    loop = StepLoop(rt, settings["log_every"])
    loop()  # the first step (and the warm-up)
    rt.sync()
    t2 = time.perf_counter()
    cache1, written1 = mesa_shader_cache(), process_bytes_written()
    written = written1 - written0 if written0 is not None and written1 is not None else None

    bare = bare_dispatches(rt)
    ours = StepTimer(loop)
    floor = StepTimer(lambda: bare_replay(rt.device, bare, 1))
    per_block = settings["step_block_s"] / _wall(loop, rt)
    n = int(min(settings["step_steps"], max(2, per_block)))  # steps per block
    submits0, done0 = rt.submits, loop.done
    wall = 0.0
    plain = []  # per pair: our step did not read the metrics ring
    for _ in range(settings["step_rounds"]):
        wall += _wall(lambda: loop.repeat(n), rt)
        for _ in range(max(n, settings["host_pairs"])):
            ours(1)
            floor(1)
            plain.append(not loop.read_last)
        rt.sync()
    steps = n * settings["step_rounds"]
    wall /= steps
    # Medians over the pairs whose step of ours did not map the metrics ring: the floor never reads,
    # a read waits for the GPU (CPU time of its own, and an idle GPU for the floor step after it).
    # The mean of all our steps, reads included, is reported beside.
    if not any(plain):  # log_every 1: every step reads
        plain = [True] * len(plain)
    cpu = float(np.median([c for c, p in zip(ours.cpu, plain, strict=True) if p]))
    floor_cpu = float(np.median([c for c, p in zip(floor.cpu, plain, strict=True) if p]))
    cfg, precision, shape = plan["config"], plan["precision"], model_shape(plan)
    batch = cfg["batch_size"]
    tokens = batch * cfg["context"] if cfg["model"] == "gpt" else None
    path = plan["f16_path"] or "fp32"
    row = {
        "model": name,
        "shape": shape,
        "layers": plan["layers"],
        "batch": batch,  # examples; the GPT's context windows
        "precision": precision,
        "f16_path": path,
        "dispatches_per_step": len(rt.programs["train_step"]),  # what the runtime encodes per step
        "submits_per_step": (rt.submits - submits0) / (loop.done - done0),
        "steps_timed": steps,
        "host_steps_timed": len(ours.cpu),
        "host_pairs_in_median": sum(plain),
        "wall_ms_per_step": wall * 1e3,
        "examples_per_s": batch / wall,
        "tokens_per_step": tokens,  # the GPT's loss rows (windows x context); None for the MLPs
        "tokens_per_s": tokens / wall if tokens else None,
        "host_cpu_ms_per_step": cpu * 1e3,  # median step without a metrics read
        "host_cpu_mean_ms_per_step": float(np.mean(ours.cpu)) * 1e3,  # metrics reads included
        "floor_host_cpu_ms_per_step": floor_cpu * 1e3,
        "host_over_floor": cpu / floor_cpu if floor_cpu > 0 else None,
    }
    added = cache1["bytes"] - cache0["bytes"]
    first = {
        "model": name,
        "shape": shape,
        "precision": precision,
        "f16_path": path,
        "kernels": len(plan["kernels"]),
        "plan_s": plan_s,
        "runtime_s": t1 - t0,  # buffers, shader modules, pipelines, bind groups
        "first_step_s": t2 - t1,  # submitted and finished (lavapipe compiles shaders here)
        "total_s": plan_s + t2 - t0,
        "mesa_cache_dir": cache0["dir"],
        "mesa_cache_bytes_added": added,  # by any process on the machine meanwhile
        "bytes_written": written,  # by this process meanwhile (None without /proc/self/io)
        "mesa_cache_warm": cache_warm(gpu.name, len(plan["kernels"]), written, added, cache0["dir"]),
    }
    log(
        f"  step {name} {shape} b{batch} {precision:5}: {wall * 1e3:8.2f} ms wall, "
        f"host {cpu * 1e3:.3f} ms (floor {floor_cpu * 1e3:.3f} ms); first step after "
        f"{first['total_s']:.2f} s ({_cache_word(first)})"
    )
    return row, first, rt


def _cache_word(first: dict) -> str:
    warm = first["mesa_cache_warm"]
    if warm is None:
        return "no Mesa cache"
    written = first["bytes_written"]
    wrote = f"{written} bytes written" if written is not None else f"+{first['mesa_cache_bytes_added']} bytes"
    return f"Mesa cache {'warm' if warm else 'cold'} ({wrote})"


def activations_not_h(plan: Plan) -> dict[str, int]:
    """The activation buffers not stored in the activation format ("h"), by name, largest first:
    the same bytes on every precision path (f32 scores, logits, statistics, loss rows; u32 token
    ids and the embedding gradient's row order)."""
    wide = [b for b in plan["buffers"] if b["category"] == "activations" and b["dtype"] != "h"]
    return {b["name"]: b["bytes"] for b in sorted(wide, key=lambda b: -b["bytes"])}


def memory_entry(mixed: Plan, fp32: Plan) -> dict:
    """Both plans' bytes per category and their ratios, with the activations that stay 32-bit and the
    activation ratio the fp32 plan's buffer list implies if every h activation halves in mixed."""
    a, b = mixed["memory"], fp32["memory"]
    wide = activations_not_h(fp32)
    rest = sum(wide.values())
    h32 = b["activations"] - rest
    return {
        "mixed": a,
        "fp32": b,
        "activation_ratio": a["activations"] / b["activations"],
        "expected_activation_ratio": (h32 / 2 + rest) / (h32 + rest),
        "activations_not_h": wide,
        "total_ratio": sum(a.values()) / sum(b.values()),
    }


# --- readbacks in the real training loop -----------------------------------------------------------


def bench_readbacks(
    gpu, steps: int, log_every: int, checkpoint_every: int = 0, config: dict | None = None, data=None
) -> dict:
    """Trains `config` (TrainConfig fields; default the digits MLP) on `data` (default: what the
    config names) for `steps` steps with webmp.train.loop.Trainer and records every GPU->host read it
    makes: metrics-ring maps (Runtime.readbacks) and whole-buffer reads (Runtime.read).
    Checkpoints (off by default: only the final one) are readbacks too and are counted. The
    schedule asks for ceil(steps / log_every) maps: one every log_every steps and one after the
    last step."""
    from ..train.loop import Trainer

    fields = {**(config or {}), "steps": steps, "log_every": log_every, "checkpoint_every": checkpoint_every}
    cfg = TrainConfig(**fields)
    with tempfile.TemporaryDirectory() as tmp:
        tr = Trainer(cfg, out=Path(tmp) / "run", gpu=gpu, dataset=data, progress=False, log=None)
        rt = tr.runtime
        reads = []  # (step being run or just finished, kind)
        run, read = rt.run, rt.read

        def counted_run(program, read_metrics=False, **kw):  # kw: the lens's histograms=
            out = run(program, read_metrics=read_metrics, **kw)
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
        "model": cfg.model,
        "steps": steps,
        "log_every": log_every,
        "expected_readbacks": -(-steps // log_every),
        "readbacks_in_loop": len(loop_reads),
        "runtime_readbacks_in_loop": maps_in_loop - before,
        "limit_per_100_steps": 100 / log_every,
        "readbacks_per_100_steps": len(loop_reads) * 100 / steps,
        "readbacks_between_logs": len(between),
        "reads_after_training": sorted({k for _, k in reads[in_loop:]}),
    }


# --- per-kernel GPU time ---------------------------------------------------------------------------


def _matmul_shape(kernel, dispatch) -> str:
    """MxNxK (T when an operand is transposed) of a matmul dispatch: its size constants, or with
    RUNTIME_DIMS its args buffer's name (webmp.ops.matmul_args names it by the sizes)."""
    c = kernel["constants"]
    if "SIZE_M" in c:
        mnk = f"{c['SIZE_M']}x{c['SIZE_N']}x{c['SIZE_K']}"
    else:
        mnk = next(b for b in dispatch["bind"] if b.startswith("matmul_args_"))[len("matmul_args_") :]
    return mnk + ("T" if c.get("TRANS_A") else "N") + ("T" if c.get("TRANS_B") else "N")


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
            shape = _matmul_shape(k, d) if k["entry"].startswith("matmul") else ""
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
    models: list[str] | None = None,
) -> dict:
    """Runs the benchmark at a preset size ('tiny', 'default', 'gpu') and returns its JSON dict.
    Matmul tiles come from the auto-tune cache for this adapter (tuned first with tune_first).
    models: the names of the preset's step models to run (default all: digits, wide, gpt)."""
    from ..engine.runtime import default_gpu

    gpu = gpu or default_gpu()
    return _run_bench(gpu, size, profile, tune_first, paths, log, tune_budget, models)


def _run_bench(gpu, size, profile, tune_first, paths, log, tune_budget, models) -> dict:
    import wgpu

    t_start = time.perf_counter()
    preset = SIZES[size]
    step_models = preset["step_models"]
    if models is not None:
        names = [m["name"] for m in step_models]
        if set(models) - set(names):
            raise ValueError(f"unknown step models {sorted(set(models) - set(names))}; {size!r} has {names}")
        step_models = [m for m in step_models if m["name"] in models]
    paths = paths or (["native", "emulated", "fp32"] if gpu.has_f16 else ["emulated", "fp32"])
    log(f"webmp bench ({size}) on {gpu.name}")
    result = {
        "format": "webmp-bench/2",
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

    data, data_s = {}, {}
    for m in step_models:
        t0 = time.perf_counter()
        data[m["name"]] = model_data(m, preset)
        data_s[m["name"]] = time.perf_counter() - t0
    result["data"] = {m["name"]: describe_data(data[m["name"]]) for m in step_models}

    def build_plans() -> dict[tuple[str, str], tuple[Plan, bytes, float]]:
        return {
            (m["name"], precision): step_plan(
                gpu, m, data[m["name"]], precision, model_settings(preset, m)["log_every"]
            )
            for m in step_models
            for precision in ("mixed", "fp32")
        }

    plans = build_plans()
    if tune_first:
        shapes = [
            (path, M, N, K, ta, tb)
            for _, product, (M, N, K) in matmul_shapes(preset)
            for path in paths
            for (_, ta, tb) in [PRODUCTS[product]]
        ]
        shapes += [s for plan, _, _ in plans.values() for s in tune.plan_shapes(plan)]
        result["tune"]["report"] = tune.tune_shapes(gpu, shapes, budget_s=tune_budget, log=log)
        plans = build_plans()  # the plans pick their tiles from the fresh cache

    log("matmul (GFLOP/s):")
    result["matmul"] = bench_matmul(gpu, paths, preset, log)
    log("the step models' matmul shapes (GFLOP/s, the plans' tiles):")
    mm_paths = paths[: preset.get("model_matmul_paths", len(paths))]
    result["model_matmuls"] = bench_model_matmuls(gpu, plans, mm_paths, preset["matmul_s"], log)

    log("training step:")
    steps, firsts, profiles = [], [], {}
    for m in step_models:
        for precision in ("mixed", "fp32"):
            plan, blob, plan_s = plans[(m["name"], precision)]
            row, first, rt = bench_step(gpu, m["name"], plan, blob, model_settings(preset, m), log, plan_s)
            first["data_s"] = data_s[m["name"]]  # loading the data, once per model (not in total_s)
            steps.append(row)
            firsts.append(first)
            if profile:
                profiles[f"{m['name']}/{precision}"] = profile_program(rt)
    result["train_step"] = steps
    result["first_step"] = firsts
    result["profile"] = profiles or None

    result["memory"] = {
        m["name"]: memory_entry(plans[(m["name"], "mixed")][0], plans[(m["name"], "fp32")][0])
        for m in step_models
    }

    log("readbacks:")
    result["readbacks"] = {}
    for m in step_models:
        if not m.get("readbacks"):
            continue
        st, config = model_settings(preset, m), dict(m["config"])
        if config.get("model") == "gpt":  # one evaluation chunk at the end: the loop is what counts
            c = TrainConfig(**config)
            config["val_tokens"] = c.batch_size * c.context + 1
        rb = bench_readbacks(gpu, st["readback_steps"], st["log_every"], config=config, data=data[m["name"]])
        result["readbacks"][m["name"]] = rb
        log(f"  {_readback_line(m['name'], rb)}")
    result["summary"] = summarize(result)
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    return result


def _torch_version():
    try:
        import torch

        return torch.__version__
    except ImportError:
        return None


def _target(value, op: str, limit, met: bool | None = None, worst: str | None = None) -> dict:
    if met is None:
        met = {"<=": value <= limit, ">=": value >= limit, "==": value == limit}[op]
    t = {"value": value, "target": f"{op} {limit:g}", "met": met}
    if worst is not None:
        t["worst"] = worst
    return t


def step_verdicts(row: dict) -> dict[str, bool]:
    """A train_step row's own targets: host CPU within TARGETS of the floor, one submit per step."""
    return {
        "host_over_floor": row["host_over_floor"] <= TARGETS["host_over_floor"],
        "submits_per_step": row["submits_per_step"] == 1,
    }


def readback_verdict(rb: dict) -> bool:
    """Exactly the maps the schedule asks for in the loop (Runtime.readbacks agreeing), none between."""
    return (
        rb["readbacks_in_loop"] == rb["runtime_readbacks_in_loop"] == rb["expected_readbacks"]
        and rb["readbacks_between_logs"] == TARGETS["readbacks_between_logs"]
    )


def summarize(r: dict) -> dict:
    """Headline ratios and the targets, each with the value measured in this run; a target over
    several models reports the worst of them (and names it)."""
    s: dict[str, Any] = {}
    f16 = "native" if r["adapter"]["shader_f16"] else "emulated"
    biggest = max((m for m in r["matmul"] if m["kind"] == "square"), key=lambda m: m["M"])
    g = biggest["gflops"]
    s["largest_square"] = biggest["M"]
    s["f16_over_f32_matmul"] = g[f16] / g["fp32"]
    s["f16_over_numpy_f32"] = g[f16] / g["numpy_f32"]
    if "torch_fp32" in g:
        s["f16_over_torch_fp32"] = g[f16] / g["torch_fp32"]
    for name in dict.fromkeys(row["model"] for row in r["train_step"]):
        rows = {row["precision"]: row for row in r["train_step"] if row["model"] == name}
        s[f"mixed_over_fp32_step_{name}"] = (
            rows["mixed"]["wall_ms_per_step"] / rows["fp32"]["wall_ms_per_step"]
        )
    targets: dict[str, dict] = {}
    if r["train_step"]:
        w = max(r["train_step"], key=lambda row: row["host_over_floor"])
        targets["host_over_floor"] = _target(
            w["host_over_floor"], "<=", TARGETS["host_over_floor"], worst=f"{w['model']} {w['precision']}"
        )
        w = max(r["train_step"], key=lambda row: abs(row["submits_per_step"] - 1))
        targets["submits_per_step"] = _target(
            w["submits_per_step"], "==", 1, worst=f"{w['model']} {w['precision']}"
        )
    if r["memory"]:
        name, m = max(r["memory"].items(), key=lambda kv: kv[1]["activation_ratio"])
        targets["activation_ratio"] = _target(
            m["activation_ratio"], "<=", TARGETS["activation_ratio"], worst=name
        )
    if r["readbacks"]:
        # reads in the loop over what the schedule asks for (N / log_every): 1 where exactly those
        name, rb = max(
            r["readbacks"].items(), key=lambda kv: kv[1]["readbacks_in_loop"] / kv[1]["expected_readbacks"]
        )
        targets["readbacks_per_log_interval"] = _target(
            rb["readbacks_in_loop"] / rb["expected_readbacks"],
            "==",
            1,
            met=all(readback_verdict(x) for x in r["readbacks"].values()),
            worst=name,
        )
        between = sum(x["readbacks_between_logs"] for x in r["readbacks"].values())
        targets["readbacks_between_logs"] = _target(between, "==", TARGETS["readbacks_between_logs"])
    on_gpu = r["adapter"]["type"] not in ("CPU", "cpu")
    gpu_targets = {
        "f16_over_f32_matmul": ("gpu_f16_over_f32", ">="),
        "f16_over_torch_fp32": ("gpu_f16_over_torch_fp32", ">="),
        "mixed_over_fp32_step_wide": ("gpu_mixed_over_fp32_step", "<="),
    }
    for key, (tkey, op) in gpu_targets.items():
        if key not in s:
            continue
        t = _target(s[key], op, TARGETS[tkey])
        t["target"] += " (on a GPU, at the 'gpu' size)"
        if not (on_gpu and r["size"] == "gpu"):
            t["met"] = None
        targets[key] = t
    s["targets"] = targets
    return s


# --- output --------------------------------------------------------------------------------------------


def _matmul_line(row) -> str:
    g = row["gflops"]
    cells = "  ".join(f"{k} {v:8.2f}" for k, v in g.items())
    return f"{row['kind']:6} {row['product']:5} {row['M']:>5}x{row['N']:<5}x{row['K']:<5} {cells}"


def _readback_line(name: str, rb: dict) -> str:
    return (
        f"{name}: {rb['readbacks_in_loop']} reads in {rb['steps']} steps at log_every="
        f"{rb['log_every']} (the schedule's {rb['expected_readbacks']}; Runtime.readbacks "
        f"{rb['runtime_readbacks_in_loop']}), {rb['readbacks_between_logs']} between log intervals"
    )


def _pass(ok: bool) -> str:
    return "pass" if ok else "FAIL"


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
    out += ["", "matmul GFLOP/s by core (a fixed tile choice each: bench.CORE_TILES), per path"]
    cores = list(CORE_TILES)
    for m in (m for m in r["matmul"] if m["cores"]):
        shape = f"{m['M']}x{m['N']}x{m['K']}"
        cells = "  ".join(
            f"{path} " + "/".join(f"{c.get(k, math.nan):.1f}" for k in cores)
            for path, c in m["cores"].items()
        )
        out.append(f"{m['kind']:6} {m['product']:7} {shape:>17}  ({'/'.join(cores)})  {cells}")
    for name, mm in r.get("model_matmuls", {}).items():
        med = "  ".join(f"{p} {g:.2f}" for p, g in mm["median_gflops"].items())
        out.append(
            f"{name}: median GFLOP/s over its {len(mm['shapes'])} matmul shapes (the plan's tiles): {med}"
        )
    out += [
        "",
        "training step: wall per step of our loop, examples (MLP) or tokens (GPT) per second; host CPU "
        "per step of our loop and the bare replay (medians of alternating steps, metrics reads left "
        "out); target host/floor <= "
        f"{TARGETS['host_over_floor']:g} and 1 submit per step",
        f"{'model':30} {'prec':5} {'path':8} {'disp':>4} {'subm':>4} {'wall ms':>9} {'per s':>13} "
        f"{'host ms':>8} {'floor ms':>8} {'host/floor':>10} {'target':>6}",
    ]
    for s in r["train_step"]:
        model = f"{s['model']} {s['shape']} b{s['batch']}"
        rate = f"{s['tokens_per_s']:.0f} tok" if s["tokens_per_s"] else f"{s['examples_per_s']:.0f} ex"
        out.append(
            f"{model:30} {s['precision']:5} {s['f16_path']:8} {s['dispatches_per_step']:4} "
            f"{s['submits_per_step']:4g} {s['wall_ms_per_step']:9.2f} {rate:>13} "
            f"{s['host_cpu_ms_per_step']:8.3f} {s['floor_host_cpu_ms_per_step']:8.3f} "
            f"{s['host_over_floor']:10.2f} {_pass(all(step_verdicts(s).values())):>6}"
        )
    out += [
        "",
        "time to the first step (s): plan build, runtime creation (pipelines), first step submitted and "
        "finished",
        f"{'model':30} {'prec':5} {'kernels':>7} {'plan':>6} {'runtime':>7} {'step 1':>7} {'total':>7}  "
        "shader cache",
    ]
    for f in r.get("first_step", []):
        model = f"{f['model']} {f['shape']}"
        out.append(
            f"{model:30} {f['precision']:5} {f['kernels']:7} {f['plan_s']:6.2f} {f['runtime_s']:7.2f} "
            f"{f['first_step_s']:7.2f} {f['total_s']:7.2f}  {_cache_word(f)}"
        )
    out += [
        "",
        f"memory (bytes, from the plan); target activations mixed/fp32 <= {TARGETS['activation_ratio']:g}",
        f"{'model':8} {'category':16} {'mixed':>12} {'fp32':>12} {'ratio':>6}",
    ]
    for name, m in r["memory"].items():
        for cat in m["mixed"]:
            a, b = m["mixed"][cat], m["fp32"][cat]
            met = m["activation_ratio"] <= TARGETS["activation_ratio"]
            verdict = f" {_pass(met)}" if cat == "activations" else ""
            out.append(f"{name:8} {cat:16} {a:12d} {b:12d} {a / b if b else 0:6.3f}{verdict}")
        wide = ", ".join(f"{k} {v}" for k, v in m["activations_not_h"].items())
        out.append(
            f"{name:8} activations not in f16 (bytes on both paths): {wide}; if every other activation "
            f"halves, the ratio is {m['expected_activation_ratio']:.4f}"
        )
    out += ["", "readbacks in the training loop (webmp.train.loop.Trainer)"]
    for name, rb in r["readbacks"].items():
        out.append(f"  {_readback_line(name, rb)}: {_pass(readback_verdict(rb))}")
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
        worst = f", worst: {t['worst']}" if "worst" in t else ""
        out.append(f"  {k}: {t['value']:.3f} (target {t['target']}{worst}): {verdict}")
    out.append(f"\n{r['seconds']} s in all")
    return "\n".join(out)


# --- data-parallel steps (`mpirun -n N webmp bench --ranks N`) ---------------------------------------


def bench_ranks(size: str, ranks: int, models: list[str] | None = None, log=print) -> dict:
    """Run by every rank of `mpirun -n N webmp bench --ranks N`: trains each step model of the size
    for its readback_steps steps, data-parallel over the N ranks (each model's batch_size is the
    global batch), and reports rank 0's DataParallelStep.summary (webmp.train.distributed): per step
    after the first, this rank's gradients on the GPU, the readback of the fused buffer, the
    all-reduce (waiting for the slowest rank included), the upload of the sums, the update, their
    sum step_ms, and comm_share = (readback + all-reduce + upload) / step_ms."""
    from ..train.distributed import detect_world
    from ..train.loop import Trainer

    world = detect_world()
    if world.size != ranks:
        raise RuntimeError(
            f"--ranks {ranks}: launch it as `mpirun -n {ranks} webmp bench --ranks {ranks}` "
            f"(this process is one of {world.size})"
        )
    preset = SIZES[size]
    result: dict[str, Any] = {"size": size, "ranks": ranks, "models": {}}
    for model in preset["step_models"]:
        if models and model["name"] not in models:
            continue
        steps = model.get("readback_steps", preset["readback_steps"])
        fields = {**model["config"], "steps": steps, "checkpoint_every": 0}
        cfg = TrainConfig(**{**fields, "log_every": model.get("log_every", preset["log_every"])})
        with tempfile.TemporaryDirectory() as tmp:
            trainer = Trainer(
                cfg,
                out=Path(tmp) / "run" if world.rank == 0 else None,
                dataset=model_data(model, preset),
                progress=False,
                log=None,
                world=world,
            )
            summary = trainer.run()
        dp = {**summary["data_parallel"], "adapter": trainer.gpu.name}
        result["models"][model["name"]] = dp
        log(
            f"{model['name']:8} {ranks} ranks: {dp['step_ms']:.2f} ms/step, readback "
            f"{dp['readback_ms']:.2f}, all-reduce {dp['allreduce_ms']:.2f}, upload {dp['upload_ms']:.2f} ms "
            f"({100 * dp['comm_share']:.1f}% of the step, {dp['fused_bytes']} bytes)"
        )
    return result


def cli_bench(argv: list[str]) -> int:
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
        choices=["native", "emulated", "fp32"],
        help="matmul precision paths (default: all the adapter supports)",
    )
    p.add_argument(
        "--models",
        nargs="+",
        choices=sorted({m["name"] for size in SIZES.values() for m in size["step_models"]}),
        help="the training-step models to run (default: all of the size's: digits, wide, gpt)",
    )
    p.add_argument(
        "--ranks",
        type=int,
        help="only the data-parallel step, on N MPI ranks: run as `mpirun -n N webmp bench --ranks N` "
        "(readback, all-reduce and upload ms per step; rank 0 writes --out)",
    )
    p.add_argument(
        "--cold-start",
        action="store_true",
        help="only this: plan to first finished step of the default MLP, natively and in a headless "
        "Chromium page, with Mesa's shader cache cold and warm (webmp/bench/cold.py)",
    )
    args = p.parse_args(argv)
    if args.ranks is not None:
        return cli_bench_ranks(args)
    if args.cold_start:
        from . import cold as bench_cold

        try:
            return bench_cold.cli(args.out)
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
            log=lambda *a: print(*a, file=sys.stderr, flush=True),
        )
    except RuntimeError as e:
        print(f"webmp bench: {e}", file=sys.stderr)
        return 1
    print(format_table(r))
    Path(args.out).write_text(json.dumps(r, indent=1))
    print(f"wrote {args.out}")
    return 0


def cli_bench_ranks(args: argparse.Namespace) -> int:
    from ..train.distributed import detect_world

    try:
        world = detect_world()
        rank0 = world.rank == 0
        r = bench_ranks(
            args.size,
            args.ranks,
            args.models,
            log=(lambda *a: print(*a, file=sys.stderr, flush=True)) if rank0 else (lambda *a: None),
        )
    except (RuntimeError, ValueError) as e:
        print(f"webmp bench: {e}", file=sys.stderr)
        return 1
    if rank0:
        Path(args.out).write_text(json.dumps(r, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_bench(sys.argv[1:]))
