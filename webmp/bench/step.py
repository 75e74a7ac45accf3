"""`webmp bench`'s training-step section: per step model of the size (the MLPs, and the character
GPT at TrainConfig(model="gpt")'s shape), what it trains on, its plan, the time to its first step
(and whether Mesa's on-disk shader cache was warm), the wall time per step of our real training
loop, and the host CPU time per step of that loop beside the host-overhead floor: the same
dispatch list replayed with bare wgpu-py calls."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..data.tables import Dataset, load_digits, make_dataset
from ..data.text import TextCorpus, load_text, tokenize
from ..engine.plan import Plan, resolve_f16_path
from ..engine.tiles import TileTable
from ..models import build_plan
from ..presets import GPT_BENCH_ALPHABET, STEP_SETTINGS

# --- what the step models train on ---------------------------------------------------------------


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
    if model["name"] == "digits" or cfg.get("model_spec") is not None:
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
    if c["model"] == "net":
        return network_shape(c["model_spec"]["layers"])
    return "-".join(map(str, plan["layers"]))


def network_shape(layers: list[dict]) -> str:
    """A network's layers in a few characters: conv16 relu maxpool2 res(conv16 relu) flatten fc10."""
    short = {"conv2d": "conv", "linear": "fc", "maxpool2d": "maxpool", "avgpool2d": "avgpool"}
    parts = []
    for layer in layers:
        if layer["type"] == "residual":
            parts.append(f"res({network_shape(layer['layers'])})")
            continue
        size = layer.get("out") or layer.get("kernel") or ""
        parts.append(f"{short.get(layer['type'], layer['type'])}{size}")
    return " ".join(parts)


def step_plan(gpu, model: dict, data, precision: str, log_every: int) -> tuple[Plan, bytes, float]:
    """A step model's plan and blob for `precision`, and the seconds building them took. fp8 quantises
    every Linear layer (fp8_keep_ends off: the bench's small models have no hidden Linear to keep
    the ends around, and the row shows fp8's whole cost)."""
    t0 = time.perf_counter()
    fp8 = {"fp8_keep_ends": False} if precision == "fp8" else {}
    cfg = TrainConfig(
        **{"steps": 10**6, **model["config"], "precision": precision, "log_every": log_every, **fp8}
    )
    plan, blob = build_plan(
        cfg, data, resolve_f16_path(precision, "auto", gpu.has_f16), TileTable.for_adapter(gpu.name, gpu.info)
    )
    return plan, blob, time.perf_counter() - t0


# --- our loop and the bare replay ------------------------------------------------------------------


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


# --- Mesa's shader cache ---------------------------------------------------------------------------


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


def cache_word(first: dict) -> str:
    """A first-step row's shader cache in a few words."""
    warm = first["mesa_cache_warm"]
    if warm is None:
        return "no Mesa cache"
    written = first["bytes_written"]
    wrote = f"{written} bytes written" if written is not None else f"+{first['mesa_cache_bytes_added']} bytes"
    return f"Mesa cache {'warm' if warm else 'cold'} ({wrote})"


# --- one step model, timed ------------------------------------------------------------------------


def first_step(
    gpu, name: str, plan: Plan, blob: bytes, log_every: int, plan_s: float
) -> tuple[Any, StepLoop, dict]:
    """Creates the runtime (pipelines included) and runs the first step, submitted and finished;
    returns the runtime, its step loop (one step done) and the first-step row (plan_s is the plan
    build's)."""
    from ..engine.runtime import Runtime

    cache0, written0 = mesa_shader_cache(), process_bytes_written()
    t0 = time.perf_counter()
    rt = Runtime(plan, blob, gpu)
    t1 = time.perf_counter()
    loop = StepLoop(rt, log_every)
    loop()  # the first step (and the warm-up)
    rt.sync()
    t2 = time.perf_counter()
    cache1, written1 = mesa_shader_cache(), process_bytes_written()
    written = written1 - written0 if written0 is not None and written1 is not None else None
    added = cache1["bytes"] - cache0["bytes"]
    first = {
        "model": name,
        "shape": model_shape(plan),
        "precision": plan["precision"],
        "f16_path": plan["f16_path"] or "fp32",
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
    return rt, loop, first


def time_steps(rt, loop: StepLoop, settings: dict) -> dict:
    """Blocks of our loop's steps, each then waited for (wall per step), and alternating single
    steps of our loop and of the bare replay (host CPU per step), so that load from neighbours hits
    both alike. Medians over the pairs whose step of ours did not map the metrics ring: the floor
    never reads, a read waits for the GPU (CPU time of its own, and an idle GPU for the floor step
    after it); the mean of all our steps, reads included, beside."""
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
    if not any(plain):  # log_every 1: every step reads
        plain = [True] * len(plain)
    return {
        "submits_per_step": (rt.submits - submits0) / (loop.done - done0),
        "steps_timed": steps,
        "host_steps_timed": len(ours.cpu),
        "host_pairs_in_median": sum(plain),
        "wall_s": wall / steps,
        "cpu_s": float(np.median([c for c, p in zip(ours.cpu, plain, strict=True) if p])),
        "cpu_mean_s": float(np.mean(ours.cpu)),
        "floor_cpu_s": float(np.median([c for c, p in zip(floor.cpu, plain, strict=True) if p])),
    }


def bench_step(gpu, name, plan, blob, settings, log, plan_s: float = 0.0) -> tuple[dict, dict, Any]:
    """The time to the first step (first_step), then the wall time per step of our training loop
    and the host CPU time per step of our loop and of the bare replay (time_steps). Returns (row,
    first-step row, runtime)."""
    rt, loop, first = first_step(gpu, name, plan, blob, settings["log_every"], plan_s)
    t = time_steps(rt, loop, settings)
    wall, cpu, floor_cpu = t["wall_s"], t["cpu_s"], t["floor_cpu_s"]
    cfg, shape = plan["config"], first["shape"]
    batch = cfg["batch_size"]
    tokens = batch * cfg["context"] if cfg["model"] == "gpt" else None
    row = {
        "model": name,
        "shape": shape,
        "layers": plan["layers"],
        "batch": batch,  # examples; the GPT's context windows
        "precision": plan["precision"],
        "f16_path": first["f16_path"],
        "dispatches_per_step": len(rt.programs["train_step"]),  # what the runtime encodes per step
        **{k: t[k] for k in ("submits_per_step", "steps_timed", "host_steps_timed", "host_pairs_in_median")},
        "wall_ms_per_step": wall * 1e3,
        "examples_per_s": batch / wall,
        "tokens_per_step": tokens,  # the GPT's loss rows (windows x context); None for the MLPs
        "tokens_per_s": tokens / wall if tokens else None,
        "host_cpu_ms_per_step": cpu * 1e3,  # median step without a metrics read
        "host_cpu_mean_ms_per_step": t["cpu_mean_s"] * 1e3,  # metrics reads included
        "floor_host_cpu_ms_per_step": floor_cpu * 1e3,
        "host_over_floor": cpu / floor_cpu if floor_cpu > 0 else None,
    }
    log(
        f"  step {name} {shape} b{batch} {plan['precision']:5}: {wall * 1e3:8.2f} ms wall, "
        f"host {cpu * 1e3:.3f} ms (floor {floor_cpu * 1e3:.3f} ms); first step after "
        f"{first['total_s']:.2f} s ({cache_word(first)})"
    )
    return row, first, rt
