"""`webmp bench --memory`: the memory levers of the GPT, alone and together. For each context of the
preset and each entry of LEVERS: the plan's GPU bytes by category (plan_buffers, a dry run), its
largest buffer, whether the adapter takes it ("refused" with the reason where it does not) and, at
the preset's timed contexts, the median wall time of an optimizer step (the levers' steps taken in
turn, round after round). Every entry of one context trains the same effective batch (batch x
grad_accum; the preset's own at each context, a smaller one at the longest), so the rows of one
context compare like with like. RANK_LEVERS add what one rank of a data-parallel run holds,
without and with ZeRO-1 (bytes only: one process is one rank)."""

from __future__ import annotations

from typing import Any

from ..engine.plan import memory_by_category

# A lever is one more entry: (name, the flags that turn it on, the TrainConfig overrides). Each entry
# starts from the baseline: the three-kernel attention, every activation kept, one batch a step.
# "{accum}" and "{micro}" stand for the preset's accumulation and its micro-batch.
BASELINE = {"attention": "unfused", "recompute": "none", "grad_accum": 1}
LEVERS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("baseline", "--attention unfused", {}),
    ("grad_accum", "--grad-accum {accum} --batch-size {micro}", {"grad_accum": "accum"}),
    ("recompute", "--recompute blocks", {"recompute": "blocks"}),
    ("fused", "--attention fused", {"attention": "fused"}),
    (
        "all",
        "--grad-accum {accum} --batch-size {micro} --recompute blocks --attention fused",
        {"grad_accum": "accum", "recompute": "blocks", "attention": "fused"},
    ),
)


# Memory-only entries: a data-parallel rank's plan at the same effective batch, split over RANKS
# ranks (`mpirun -n 2 webmp train ...`), without and with ZeRO-1. One bench process is one rank, so
# these are not timed; each row is the rank holding the most bytes.
RANKS = 2
RANK_LEVERS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("ranks", f"mpirun -n {RANKS}, --attention unfused", {}),
    ("zero", f"mpirun -n {RANKS}, --attention unfused --zero 1", {"zero": 1}),
)


def rank_configs(config: dict, batch: int) -> dict[str, tuple[str, dict]]:
    """{lever: (how it runs, its TrainConfig fields)} of RANK_LEVERS at the effective batch `batch`
    (a data-parallel run's batch_size is the global batch: each rank takes batch / RANKS rows)."""
    if batch % RANKS:
        raise ValueError(f"the effective batch {batch} does not split over {RANKS} ranks")
    return {
        name: (flags, {**config, **BASELINE, "batch_size": batch, **overrides})
        for name, flags, overrides in RANK_LEVERS
    }


def lever_configs(config: dict, batch: int, accum: int) -> dict[str, tuple[str, dict]]:
    """{lever: (its flags, its TrainConfig fields)} for the GPT `config` at effective batch `batch`:
    the accumulating entries take `accum` micro-batches of batch // accum."""
    if batch % accum:
        raise ValueError(f"the effective batch {batch} is not a multiple of --grad-accum {accum}")
    micro = batch // accum
    out = {}
    for name, flags, overrides in LEVERS:
        cfg = {**config, **BASELINE, "batch_size": batch}
        for key, value in overrides.items():
            cfg[key] = value
        if cfg["grad_accum"] == "accum":
            cfg.update(grad_accum=accum, batch_size=micro)
        out[name] = (flags.format(accum=accum, micro=micro), cfg)
    return out


def step_runtime(gpu, cfg, corpus, path: str):
    """A Runtime of `cfg`'s plan with the adapter's tiles, its first train_step run (pipelines made)."""
    from ..engine.runtime import Runtime
    from ..engine.tiles import TileTable
    from ..models import build_plan

    plan, blob = build_plan(cfg, corpus, path, TileTable.for_adapter(gpu.name, gpu.info))
    rt = Runtime(plan, blob, gpu, first=["train_step"])
    rt.run("train_step")
    rt.read("state")
    return rt


def time_interleaved(runtimes: dict, steps: int) -> dict[str, float]:
    """{name: median ms of a train_step (one submit and a state read)} over `steps` rounds, each
    round one step of every runtime in turn: a slow minute of a shared host hits them alike."""
    from statistics import median
    from time import perf_counter

    times: dict[str, list[float]] = {name: [] for name in runtimes}
    for _ in range(steps):
        for name, rt in runtimes.items():
            t0 = perf_counter()
            rt.run("train_step")
            rt.read("state")
            times[name].append(perf_counter() - t0)
    return {name: round(1e3 * median(t), 1) for name, t in times.items()}


def lever_row(
    gpu, context: int, lever: str, fields: dict, corpus, path: str, limit: int, world: int = 1
) -> dict:
    """One (context, lever) row from a dry run of its plan (with `world` > 1, the fullest rank's);
    refused: why the adapter cannot take it (None where it can)."""
    from ..config import TrainConfig
    from ..models import plan_buffers

    row: dict = {
        "context": context,
        "lever": lever,
        "batch": fields["batch_size"] * fields.get("grad_accum", 1),
    }
    row.update(memory=None, largest=None, refused=None, ms_per_step=None, ranks=world)
    try:
        cfg = TrainConfig(**fields)
        ranks = [plan_buffers(cfg, corpus, path, rank=r, world=world) for r in range(world)]
    except ValueError as e:  # a dispatch grid or shape the kernels cannot take
        row["refused"] = f"the plan cannot be built: {e}"
        return row
    bufs = max(ranks, key=lambda bs: sum(b["bytes"] for b in bs))
    largest = max(bufs, key=lambda b: b["bytes"])
    row["memory"] = memory_by_category(bufs)
    row["largest"] = {"name": largest["name"], "bytes": largest["bytes"]}
    if largest["bytes"] > limit:
        row["refused"] = f"{largest['name']} takes {largest['bytes']} bytes, the adapter binds {limit}"
    return row


def bench_levers(gpu, config: dict, corpus, path: str, settings: dict, log=print) -> dict:
    """The levers' section: settings are the preset's "levers" (contexts, timed, batch, batch_at,
    grad_accum). Rows per context of settings["contexts"], per lever of LEVERS and RANK_LEVERS, at
    the effective batch settings["batch_at"][context] where it has one, else settings["batch"]; a
    row of LEVERS at a context in settings["timed"] ({context: rounds}) that fits is timed (ms per
    optimizer step, the median of that many rounds after a first)."""
    from ..config import TrainConfig

    limit = min(gpu.limits.get("maxStorageBufferBindingSize", 0), gpu.limits.get("maxBufferSize", 0))
    batch_at = settings.get("batch_at", {})
    configs = lever_configs(config, settings["batch"], settings["grad_accum"])
    base = TrainConfig(**configs["baseline"][1])
    rows: list[dict] = []
    for T in settings["contexts"]:
        batch = batch_at.get(T, settings["batch"])
        at_T = lever_configs(config, batch, settings["grad_accum"])
        here = {
            lever: lever_row(gpu, T, lever, {**f, "context": T}, corpus, path, limit)
            for lever, (_, f) in at_T.items()
        }
        if T in settings["timed"]:
            runtimes = {
                lever: step_runtime(gpu, TrainConfig(**{**at_T[lever][1], "context": T}), corpus, path)
                for lever, row in here.items()
                if row["refused"] is None
            }
            for lever, ms in time_interleaved(runtimes, settings["timed"][T]).items():
                here[lever]["ms_per_step"] = ms
            del runtimes
        for lever, (_, f) in rank_configs(config, batch).items():
            here[lever] = lever_row(gpu, T, lever, {**f, "context": T}, corpus, path, limit, RANKS)
        rows += here.values()
        for row in here.values():
            log(lever_line(row, rows))
    return {
        "path": path,
        "batch": settings["batch"],
        "batch_at": {str(T): b for T, b in batch_at.items()},
        "grad_accum": settings["grad_accum"],
        "steps_timed": {str(T): n for T, n in settings["timed"].items()},  # rounds at each timed context
        "adapter_limit": limit,
        "levers": {name: flags for name, (flags, _) in configs.items()}
        | {name: flags for name, (flags, _) in rank_configs(config, settings["batch"]).items()},
        "config": {k: getattr(base, k) for k in ("n_layer", "n_head", "d_model")},
        "rows": rows,
    }


def batches_text(lv: dict) -> str:
    """The section's effective batches in words: "effective batch 64 (16 at context 1024)"."""
    at = ", ".join(f"{b} at context {T}" for T, b in lv.get("batch_at", {}).items())
    return f"effective batch {lv['batch']}" + (f" ({at})" if at else "")


def versus_baseline(row: dict, rows: list[dict]) -> tuple[float | None, float | None]:
    """(total bytes / the baseline's, ms per step / the baseline's) at the row's context; None where
    either is missing (refused, not timed)."""
    base = next((r for r in rows if r["context"] == row["context"] and r["lever"] == "baseline"), None)
    if base is None:
        return None, None
    mem = (
        sum(row["memory"].values()) / sum(base["memory"].values())
        if row["memory"] and base["memory"]
        else None
    )
    ms = row["ms_per_step"] / base["ms_per_step"] if row["ms_per_step"] and base["ms_per_step"] else None
    return mem, ms


def lever_line(row: dict, rows: list[dict]) -> str:
    """One row as the bench prints it."""
    mib = 2**20
    head = f"context {row['context']:5d} batch {row.get('batch', '?'):>3} {row['lever']:10}"
    if row["memory"] is None:
        return f"{head} refused: {row['refused']}"
    mem, ms = versus_baseline(row, rows)
    total = sum(row["memory"].values())
    out = f"{head} activations {row['memory']['activations'] / mib:8.1f} MiB, total {total / mib:8.1f} MiB"
    out += f" ({mem:.3f}x baseline)" if mem is not None else ""
    if row["refused"]:
        return f"{out}; refused: {row['refused']}"
    if row["ms_per_step"] is None:
        return f"{out}; not timed" + (f" (one rank of {row['ranks']})" if row.get("ranks", 1) > 1 else "")
    return f"{out}; {row['ms_per_step']:.1f} ms/step" + (f" ({ms:.2f}x baseline)" if ms is not None else "")
