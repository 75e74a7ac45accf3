"""Data-parallel training over MPI (mpi4py): which rank this process is (`detect_world`), one
training step of a data-parallel plan (`DataParallelStep`), and failing fast when a rank fails.

A step on every rank: submit `grads_program` (this rank's shard of the global batch: gather,
forward, backward, losses normalised by the global batch), copy the gradients, this rank's loss
rows and the overflow flags into one staging buffer and map it (one readback), sum that fused
f32 buffer over the ranks with one `Allreduce`, write the sums back, submit `update_program`
(overflow check, loss scaler, AdamW). Every rank applies the same update to the same sums, so the
weights stay bit-identical without being broadcast; the flags travel as one 0/1 float per bit, so
the sum is non-zero exactly when some rank set the bit, and an overflow on one rank skips the step
on all of them. The plan's `data_parallel` key (webmp.models.common) gives the buffer's layout.

mpi4py is imported only when an MPI launcher says it started more than one process, so a single
process never initialises MPI and trains exactly as before (one program, one submit, no readback).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine.plan import DataParallelSpec
from ..engine.runtime import Runtime

LAUNCHER_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")  # Open MPI's mpirun; MPICH's hydra
MPI_MISSING = (
    "webmp runs under an MPI launcher ({n} processes) but mpi4py is not installed: "
    "pip install 'webmp[mpi]' (needs an MPI library: Debian openmpi-bin libopenmpi-dev)"
)


class World:
    """This process's place among the ranks: rank 0 of 1 without MPI, else MPI.COMM_WORLD's."""

    def __init__(self, comm: Any = None):
        self.comm = comm
        self.rank = int(comm.Get_rank()) if comm is not None else 0
        self.size = int(comm.Get_size()) if comm is not None else 1

    def allreduce_sum(self, send: np.ndarray) -> np.ndarray:
        """The elementwise sum over the ranks of each rank's `send` (f32), on every rank: the
        blocks of reduce_scatter_sum (even blocks) gathered, so every element is added in rank
        order as there (a sharded run's sums are the same bits, on any number of ranks)."""
        if self.comm is None:
            return send.copy()
        counts = even_blocks(send.size, self.size)
        mine = self.reduce_scatter_sum(send.ravel(), counts)
        recv = np.empty(send.size, np.float32)
        self.comm.Allgatherv(mine, [recv, counts, offsets(counts), None])
        return recv.reshape(send.shape)

    def reduce_scatter_sum(self, send: np.ndarray, counts: list[int]) -> np.ndarray:
        """This rank's block of the elementwise sum over the ranks of `send` (f32), whose blocks are
        `counts` floats long, rank 0's first. Each rank's block travels to its rank (Alltoallv),
        which adds them in rank order, ((x0 + x1) + x2) + ...: the bits do not depend on the MPI
        library's reduction algorithm, which on more than 2 ranks groups the terms its own way
        and differently in Allreduce and Reduce_scatter."""
        if self.comm is None:
            return send.copy()
        send = np.ascontiguousarray(send, np.float32)
        n = counts[self.rank]
        recv = np.empty(self.size * n, np.float32)
        self.comm.Alltoallv(
            [send, counts, offsets(counts), None], [recv, [n] * self.size, offsets([n] * self.size), None]
        )
        blocks = recv.reshape(self.size, n)
        total = blocks[0].copy()
        for block in blocks[1:]:
            total += block
        return total

    def allreduce_max(self, send: np.ndarray) -> np.ndarray:
        """The elementwise max over the ranks of `send` (u32: exact, in any order), on every rank."""
        if self.comm is None:
            return send.copy()
        from mpi4py import MPI

        recv = np.empty_like(send)
        self.comm.Allreduce(np.ascontiguousarray(send), recv, op=MPI.MAX)
        return recv

    def allgather_bytes(self, mine: bytes, sizes: list[int]) -> bytes:
        """Every rank's `mine` (rank r's `sizes[r]` bytes long) joined in rank order, on every rank."""
        if self.comm is None:
            return mine
        recv = np.empty(sum(sizes), np.uint8)
        displs = [sum(sizes[:r]) for r in range(len(sizes))]
        self.comm.Allgatherv(np.frombuffer(mine, np.uint8), [recv, sizes, displs, None])
        return recv.tobytes()

    def gather(self, value: Any) -> list[Any] | None:
        """Every rank's `value` in rank order on rank 0 (None on the others)."""
        return [value] if self.comm is None else self.comm.gather(value, root=0)

    def allgather(self, value: Any) -> list[Any]:
        """Every rank's `value` in rank order, on every rank."""
        return [value] if self.comm is None else self.comm.allgather(value)

    def bcast(self, value: Any) -> Any:
        """Rank 0's `value` on every rank."""
        return value if self.comm is None else self.comm.bcast(value, root=0)

    def check_same(self, what: str, digest: str) -> None:
        """RuntimeError on every rank unless every rank passes the same `digest` of `what`."""
        if self.comm is None:
            return
        digests = self.comm.allgather(digest)
        if len(set(digests)) > 1:
            differ = [r for r, d in enumerate(digests) if d != digests[0]]
            raise RuntimeError(f"{what} differ between the ranks (rank 0 vs ranks {differ})")

    def abort(self, code: int) -> None:
        """Ends every rank at once (MPI_Abort; returns only without MPI). A rank that fails must
        not simply exit: MPI_Finalize at exit would wait for ranks blocked in the next Allreduce."""
        if self.comm is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)


def even_blocks(n: int, ranks: int) -> list[int]:
    """n elements in `ranks` blocks, as even as they split, the longer first."""
    return [n // ranks + (r < n % ranks) for r in range(ranks)]


def offsets(counts: list[int]) -> list[int]:
    """Where each block of `counts` starts."""
    return [sum(counts[:r]) for r in range(len(counts))]


def launched_ranks() -> int:
    """How many processes an MPI launcher started (1 without one)."""
    for var in LAUNCHER_SIZE_VARS:
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                raise RuntimeError(f"{var}={os.environ[var]!r} is not a number of processes") from None
    return 1


@functools.cache
def detect_world() -> World:
    """The process's World: MPI.COMM_WORLD under an MPI launcher with more than one process (then an
    uncaught exception on any rank aborts every rank: abort_on_uncaught), else one rank."""
    n = launched_ranks()
    if n <= 1:
        return World()
    try:
        from mpi4py import MPI
    except ImportError:
        raise RuntimeError(MPI_MISSING.format(n=n)) from None
    world = World(MPI.COMM_WORLD)
    if world.size != n:
        raise RuntimeError(
            f"the launcher started {n} processes but MPI sees {world.size}: "
            "is mpi4py built against the MPI library of this mpirun?"
        )
    abort_on_uncaught(world)
    return world


def abort_on_uncaught(world: World) -> None:
    """An uncaught exception prints its traceback, names the rank, and aborts every rank."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.write(f"webmp: rank {world.rank} of {world.size} failed; aborting every rank\n")
        world.abort(1)

    sys.excepthook = hook


def digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.hexdigest()


BeforeAllreduce = Callable[[int, np.ndarray], None]
"""A test's hook (step number, this rank's fused f32 buffer before the sum; it may change it)."""


class DataParallelStep:
    """Runs a data-parallel plan's training steps on `runtime` and times their parts."""

    TIMES = ("grads_ms", "readback_ms", "allreduce_ms", "upload_ms", "update_ms")

    def __init__(
        self,
        runtime: Runtime,
        spec: DataParallelSpec,
        world: World,
        before_allreduce: BeforeAllreduce | None = None,
    ):
        if spec["world"] != world.size or spec["rank"] != world.rank:
            raise ValueError(
                f"the plan is rank {spec['rank']} of {spec['world']}'s but this process is rank "
                f"{world.rank} of {world.size}"
            )
        self.runtime, self.spec, self.world = runtime, spec, world
        self.before_allreduce = before_allreduce
        loss, flags = spec["loss"], spec["flags"]
        self.regions = [(g["buffer"], 4 * g["offset"], 4 * g["floats"]) for g in spec["gradients"]]
        self.regions += [
            (loss["buffer"], 4 * loss["offset"], 4 * loss["floats"]),
            (flags["buffer"], 4 * flags["offset"], 4),
        ]
        self.nbytes = 4 * spec["floats"]
        self.staging = self.nbytes  # the staging buffer every read_gathered of this step uses
        self.totals = dict.fromkeys(self.TIMES, 0.0)  # over the steps after this session's first
        self.first_step_ms = 0.0  # the first step compiles the pipelines: kept apart
        self.steps = 0

    def run(self, step: int, read_metrics: bool, histograms: bool = False) -> bytes | None:
        """One training step (`step`: its number, 1 for the first); the metrics ring as
        Runtime.run returns it. With histograms, the gradient-range lens counts this rank's shard's
        activation gradients in the backward pass (its program replaces the grads program) and the
        counts are read with the metrics after the update (Runtime.run)."""
        rt, spec = self.runtime, self.spec
        t0 = time.perf_counter()
        rt.run(spec["grads_program"], histograms=histograms)
        rt.sync()  # (queue.on_submitted_work_done_sync fails in wgpu-py 0.32: a word's read waits)
        t1 = time.perf_counter()
        fused = self.read_fused(step)
        self.reduce_amax()
        t2 = time.perf_counter()
        summed = self.world.allreduce_sum(fused)
        t3 = time.perf_counter()
        for g in spec["gradients"]:
            rt.write(g["buffer"], summed[g["offset"] : g["offset"] + g["floats"]].tobytes())
        loss = spec["loss"]
        rt.write(loss["all"], summed[loss["all_offset"] : loss["all_offset"] + loss["rows"]].tobytes())
        self.write_flags(summed[spec["flags"]["offset"] : spec["flags"]["offset"] + spec["flags"]["bits"]])
        t4 = time.perf_counter()
        raw = rt.run(spec["update_program"], read_metrics=read_metrics, histograms=histograms)
        t5 = time.perf_counter()
        self.record(t5 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
        return raw

    def read_fused(self, step: int) -> np.ndarray:
        """This rank's fused f32 buffer (the flags word as one 0/1 float per bit), after the hook."""
        spec, rt = self.spec, self.runtime
        fused = np.frombuffer(rt.read_gathered(self.regions, self.staging), np.float32)[
            : spec["floats"]
        ].copy()
        loss = spec["loss"]
        # the other ranks' loss rows are 0 (a staging buffer shared with other reads may hold other bytes)
        mine = slice(loss["offset"], loss["offset"] + loss["floats"])
        rows = fused[mine].copy()
        fused[loss["all_offset"] : loss["all_offset"] + loss["rows"]] = 0
        fused[mine] = rows
        flags = spec["flags"]
        word = int(fused[flags["offset"] : flags["offset"] + 1].view(np.uint32)[0])
        if word >> flags["bits"]:
            raise RuntimeError(
                f"overflow flags word {word:#x} has bits the data-parallel step does not carry"
            )
        fused[flags["offset"] : flags["offset"] + flags["bits"]] = [
            (word >> k) & 1 for k in range(flags["bits"])
        ]
        if self.before_allreduce is not None:
            self.before_allreduce(step, fused)
        return fused

    def reduce_amax(self) -> None:
        """fp8: the step's amax (f32 >= 0 as u32 bits, whose order is the values'; atomicMax's
        too) replaced by their max over the ranks, before the update sets the next scales."""
        amax = self.spec.get("amax")
        if amax:
            words = np.frombuffer(self.runtime.read(amax), np.uint32)
            self.runtime.write(amax, self.world.allreduce_max(words).tobytes())

    def write_flags(self, bits: np.ndarray) -> None:
        """The flags word whose bit k is set when bits[k] (a sum over the ranks) is not 0."""
        word = sum(1 << k for k, b in enumerate(bits) if b > 0)
        self.runtime.write(self.spec["flags"]["buffer"], np.array([word], np.uint32).tobytes())

    def record(self, total: float, *parts: float) -> None:
        """A step's seconds (its total, then one per TIMES): the first step's kept apart."""
        if self.steps == 0:
            self.first_step_ms = 1000 * total
        else:
            for key, dt in zip(self.TIMES, parts, strict=True):
                self.totals[key] += 1000 * dt
        self.steps += 1

    def summary(self) -> dict[str, Any]:
        """Milliseconds per step, averaged over the steps after the first (first_step_ms: it
        compiles the pipelines), of each part: grads_ms (this rank's gradients on the GPU, to their
        end), readback_ms (the copy into the staging buffer and its map), allreduce_ms (the sum
        over the ranks, waiting for the slowest included), upload_ms (the host's writes of the
        sums), update_ms (submitting the update, and reading the metrics ring when due), step_ms
        (their sum), comm_share ((readback + all-reduce + upload) / step); the fused buffer's
        bytes and the ranks."""
        n = max(1, self.steps - 1)
        per_step = {k: round(v / n, 3) for k, v in self.totals.items()}
        step_ms = sum(self.totals.values()) / n
        comm = self.totals["readback_ms"] + self.totals["allreduce_ms"] + self.totals["upload_ms"]
        return {
            "ranks": self.world.size,
            "fused_bytes": self.nbytes,
            "steps": self.steps,
            "first_step_ms": round(self.first_step_ms, 3),
            **per_step,
            "step_ms": round(step_ms, 3),
            "comm_share": round(comm / n / step_ms, 4) if step_ms > 0 else None,
        }
