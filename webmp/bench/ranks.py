"""`mpirun -n N webmp bench --ranks N`: the data-parallel step only, on N MPI ranks (the parts of a
step: this rank's gradients, the readback of the fused buffer, the all-reduce, the upload of the
sums, the update)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..presets import SIZES
from .machine import run_info
from .step import model_data


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
    result: dict[str, Any] = {"size": size, "ranks": ranks, **run_info(), "models": {}}
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
