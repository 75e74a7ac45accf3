"""Sharded optimizer state (ZeRO stage 1, TrainConfig.zero = 1) for a data-parallel rank's plan.

The shard is whole parameters: each parameter has one owner rank, chosen greedily (largest first,
to the rank holding the fewest bytes so far) so every rank holds about 1/N of the masters and
moments. Whole parameters keep every kernel as it is (adamw / adamw_copy and grad_stats run on a
parameter's own buffers, with the same dispatch shapes as the unsharded plan, so the same bits
come out); a contiguous range of the fused gradient buffer would balance to the float but would
split tensors across ranks and need kernels over sub-ranges.

A rank's plan keeps every buffer the forward and backward passes read (the working copies, the
masters that are read in f32 such as biases and LayerNorm parameters, every gradient: the backward
pass computes all of them before the reduce-scatter) and drops, for the parameters it does not own,
the Adam moments and the masters only AdamW reads. `zero_spec` describes what travels between the
ranks (webmp.train.distributed.DataParallelStep) and what a whole checkpoint holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..engine.plan import BufferSpec, PlanBuilder

Param = Mapping[str, Any]  # models.common.Param (which imports this module)

TRAIN_STATS = "train_stats"  # a sharded rank: grad_stats over its own parameters' summed gradients


def held_master_bytes(p: Param) -> int:
    """Bytes of p's optimizer state a rank that owns it holds beyond every rank's: m, v and, when
    the forward pass reads the working copy, the f32 master."""
    n = 4 * math.prod(p["shape"])
    return 3 * n if p["copy"] else 2 * n


def shard_owners(params: Sequence[Param], world: int) -> list[int]:
    """Each parameter's owner rank (in params' order): largest first to the least loaded rank (the
    lowest rank on a tie), so the assignment is the same on every rank."""
    load = [0] * world
    owners = [0] * len(params)
    for i in sorted(range(len(params)), key=lambda i: (-held_master_bytes(params[i]), i)):
        r = min(range(world), key=lambda r: (load[r], r))
        owners[i] = r
        load[r] += held_master_bytes(params[i])
    return owners


def referenced(programs: dict[str, list], skip: tuple[str, ...]) -> set[str]:
    """Buffers some dispatch of a program outside `skip` binds."""
    return {b for name, ds in programs.items() if name not in skip for d in ds for b in d["bind"]}


def optimizer_bytes(params: Sequence[Param], keep: dict[str, BufferSpec]) -> int:
    """Bytes of masters and Adam moments among the buffers `keep`."""
    return sum(keep[n]["bytes"] for p in params for n in (p["master"], p["m"], p["v"]) if n in keep)


def zero_spec(
    pb: PlanBuilder,
    params: Sequence[Param],
    owners: list[int],
    rank: int,
    optimizer_programs: tuple[str, ...],
    kept: Sequence[str] = (),
) -> dict[str, Any]:
    """Drops this rank's unowned optimizer buffers from `pb` and returns plan["data_parallel"]["zero"]:
    owners, the partial ranges of each parameter in norm_partials, the buffers the owners send
    after the update ("gather": working copies, and masters the passes read), the buffers a whole
    checkpoint holds (with `kept`, buffers every rank has the same bits of, such as fp8's scales)
    and the specs of those this rank lacks ("absent"), and the optimizer's bytes on this rank and
    unsharded."""
    forward = referenced(pb.programs, optimizer_programs)
    unsharded = optimizer_bytes(params, pb.buffers)
    absent: list[BufferSpec] = []
    gather: list[dict[str, Any]] = []
    for p, owner in zip(params, owners, strict=True):
        for name in (p["copy"], p["master"]):
            if name and (name == p["copy"] or name in forward):
                gather.append({"buffer": name, "owner": owner, "bytes": pb.buffers[name]["bytes"]})
        if owner == rank:
            continue
        for name in (p["master"], p["m"], p["v"]):
            if name not in forward:
                absent.append(pb.buffers.pop(name))
    whole = [n for p in params for n in (p["master"], p["m"], p["v"], p["copy"]) if n] + ["state", *kept]
    return {
        "stats_program": TRAIN_STATS,
        "owners": owners,
        "gather": gather,
        "checkpoint_buffers": whole,
        "absent": absent,
        "optimizer_bytes": optimizer_bytes(params, pb.buffers),
        "optimizer_bytes_unsharded": unsharded,
    }
