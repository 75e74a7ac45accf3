"""A data-parallel step with the optimizer state sharded over the ranks (ZeRO stage 1,
TrainConfig.zero = 1; the plan's side: webmp.models.zero).

A step on every rank: `grads_program` (all of this rank's gradients, as unsharded), one readback
of the fused buffer, a reduce-scatter of the gradients (each rank receives the sums of the
parameters it owns, in rank blocks), those sums written back; `stats_program` (grad_stats over
the owned gradients: their norm partials at the unsharded plan's places, the overflow bit); one
readback of the partials and the flags, an all-reduce of (partials, others' places zeroed; the
loss rows; the flag bits), written back: every rank's scaler sees the unsharded plan's partials,
loss rows and flags bit for bit, so every rank takes the same verdict, scale and clipping; then
`update_program` (scaler, AdamW on the owned parameters) and an all-gather of the updated
working copies and the masters the passes read in f32. Summed in any order, x + 0 is x, and a
sum of two is the same either way round, so on 2 ranks the weights are those of the unsharded
run bit for bit; on more ranks the reduce-scatter may add the ranks in another order than the
all-reduce does.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..engine.plan import DataParallelSpec
from ..engine.runtime import Runtime
from .distributed import BeforeAllreduce, DataParallelStep, World


class ShardedStep(DataParallelStep):
    """Runs a sharded data-parallel plan's training steps (TIMES as DataParallelStep's: readback_ms
    counts the three readbacks, allreduce_ms the reduce-scatter, the all-reduce and the
    all-gather, upload_ms the writes, update_ms the stats and update programs)."""

    def __init__(
        self,
        runtime: Runtime,
        spec: DataParallelSpec,
        world: World,
        before_allreduce: BeforeAllreduce | None = None,
    ):
        super().__init__(runtime, spec, world, before_allreduce)
        zero = spec["zero"]
        if zero is None:
            raise ValueError("the plan's optimizer state is not sharded: run it with DataParallelStep")
        self.zero = zero
        owners, grads = zero["owners"], spec["gradients"]
        order = sorted(range(len(grads)), key=lambda i: (owners[i], i))  # rank blocks
        self.grad_index = np.concatenate(
            [np.arange(grads[i]["offset"], grads[i]["offset"] + grads[i]["floats"]) for i in order]
        )
        self.counts = [
            sum(g["floats"] for g, o in zip(grads, owners, strict=True) if o == r) for r in range(world.size)
        ]
        mine = [i for i in order if owners[i] == world.rank]
        starts = np.cumsum([0] + [grads[i]["floats"] for i in mine])
        self.own_grads = [
            (grads[i]["buffer"], int(s), grads[i]["floats"]) for i, s in zip(mine, starts, strict=False)
        ]
        self.num_partials = sum(n for _, n in zero["partials"])
        self.own_partials = np.zeros(self.num_partials, bool)
        for (first, n), owner in zip(zero["partials"], owners, strict=True):
            self.own_partials[first : first + n] = owner == world.rank
        self.gather_sizes = [
            sum(g["bytes"] for g in zero["gather"] if g["owner"] == r) for r in range(world.size)
        ]
        off, self.own_gather = 0, []
        for g in zero["gather"]:
            if g["owner"] == world.rank:
                self.own_gather.append((g["buffer"], off, g["bytes"]))
                off += g["bytes"]
        self.staging = max(self.nbytes, 4 * (self.num_partials + 1), off, 4)

    def run(self, step: int, read_metrics: bool, histograms: bool = False) -> bytes | None:
        rt, spec, world = self.runtime, self.spec, self.world
        t = [time.perf_counter()]
        rt.run(spec["grads_program"], histograms=histograms)
        rt.sync()
        t.append(time.perf_counter())
        fused = self.read_fused(step)
        self.reduce_amax()
        t.append(time.perf_counter())
        mine = world.reduce_scatter_sum(np.ascontiguousarray(fused[self.grad_index]), self.counts)
        t.append(time.perf_counter())
        for buffer, start, n in self.own_grads:
            rt.write(buffer, mine[start : start + n].tobytes())
        t.append(time.perf_counter())
        rt.run(self.zero["stats_program"])
        t.append(time.perf_counter())
        small = self.read_stats(fused)
        t.append(time.perf_counter())
        summed = world.allreduce_sum(small)
        t.append(time.perf_counter())
        P, loss = self.num_partials, spec["loss"]
        rt.write("norm_partials", summed[:P].tobytes())
        rt.write(loss["all"], summed[P : P + loss["rows"]].tobytes())
        self.write_flags(summed[P + loss["rows"] :])
        t.append(time.perf_counter())
        raw = rt.run(spec["update_program"], read_metrics=read_metrics, histograms=histograms)
        t.append(time.perf_counter())
        self.all_gather()
        t.append(time.perf_counter())
        # d: grads, fused read, reduce-scatter, grads' writes, stats, stats' read, all-reduce,
        # writes, update, all-gather (its read and writes counted as communication)
        d = np.diff(t)
        self.record(t[-1] - t[0], d[0], d[1] + d[5], d[2] + d[6] + d[9], d[3] + d[7], d[4] + d[8])
        return raw

    def read_stats(self, fused: np.ndarray) -> np.ndarray:
        """(this rank's norm partials, the others' places 0; the fused buffer's loss rows; the flag
        bits of the flags word now, or of the fused buffer's, set by the hook) to sum."""
        P, spec = self.num_partials, self.spec
        raw = self.runtime.read_gathered([("norm_partials", 0, 4 * P), ("flags", 4 * P, 4)], self.staging)
        partials = np.frombuffer(raw, np.float32)[:P]
        word = int(np.frombuffer(raw, np.uint32)[P])
        flags, loss = spec["flags"], spec["loss"]
        bits = [float((word >> k) & 1) for k in range(flags["bits"])]
        bits = np.maximum(bits, fused[flags["offset"] : flags["offset"] + flags["bits"]])
        rows = fused[loss["all_offset"] : loss["all_offset"] + loss["rows"]]
        return np.concatenate([np.where(self.own_partials, partials, 0), rows, bits]).astype(np.float32)

    def all_gather(self) -> None:
        """The owners' updated working copies (and masters the passes read) onto every rank."""
        rt, zero, rank = self.runtime, self.zero, self.world.rank
        n = self.gather_sizes[rank]
        mine = rt.read_gathered(self.own_gather, self.staging)[:n] if n else b""
        joined = self.world.allgather_bytes(mine, self.gather_sizes)
        at = dict.fromkeys(range(self.world.size), 0)
        base = [sum(self.gather_sizes[:r]) for r in range(self.world.size)]
        for g in zero["gather"]:
            owner = g["owner"]
            if owner != rank:
                start = base[owner] + at[owner]
                rt.write(g["buffer"], joined[start : start + g["bytes"]])
            at[owner] += g["bytes"]

    def summary(self) -> dict[str, Any]:
        return {
            **super().summary(),
            "zero": 1,
            "optimizer_bytes": self.zero["optimizer_bytes"],
            "optimizer_bytes_unsharded": self.zero["optimizer_bytes_unsharded"],
        }
