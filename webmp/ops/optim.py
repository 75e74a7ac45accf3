"""The step's end (shaders/optim/): the overflow check and gradient norm partials (grad_stats), the
gradient-range lens (grad_hist), the loss scaler's verdict (scaler_step) and AdamW."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..engine.plan import PlanBuilder, h_bytes
from .common import cdiv, grid

GRAD_STATS_WG = 256  # grad_stats.wgsl's workgroup size
GRAD_STATS_MAX_WG = 16


def grad_stats_workgroups(n: int) -> int:
    """Workgroups (and so norm partial sums) grad_stats uses for a tensor of n values."""
    return min(GRAD_STATS_MAX_WG, cdiv(n, GRAD_STATS_WG))


def grad_stats(
    pb: PlanBuilder,
    program: str,
    *,
    G: str,
    partials: str,
    N: int,
    BASE: int,
    state: str = "state",
    flags: str = "flags",
) -> None:
    """Overflow bits of G and its unscaled sum of squares into partials[BASE : BASE + workgroups].

    The kernel has no size constants (one pipeline for every tensor): it reads N as G's length,
    so G must hold exactly N values, and BASE from a one-word u32 buffer this launcher adds to
    the plan (grad_stats_base_<BASE>, shared by the dispatches with that BASE)."""
    nwg = grad_stats_workgroups(N)
    base = f"grad_stats_base_{BASE}"
    if base not in pb.buffers:
        pb.u32(base, (1,), "other", [BASE])
    pb.require_bytes("grad_stats", G, 4 * N, f"N = {N} f32 values")
    pb.dispatch(
        program,
        ["reduce.wgsl", "grad_stats.wgsl"],
        "grad_stats",
        {},
        {"G": G, "state": state, "partials": partials, "flags": flags, "base": base},
        [nwg],
    )


# The gradient-range lens (grad_hist.wgsl): floor(log2 |x|) of stored activation gradients in
# buckets of their own from 2^E_MIN to 2^E_MAX (f16 values lie in 2^-24 .. 2^15; fp32 ones anywhere),
# plus zero, below, above and overflow (webmp.engine.plan.HistogramSpec).
GRAD_HIST_E_MIN, GRAD_HIST_E_MAX = -48, 20
GRAD_HIST_WG = 256  # grad_hist.wgsl's workgroup size
GRAD_HIST_MAX_WG = 64
GRAD_HIST_MAX_BUCKETS = 128  # grad_hist.wgsl's MAX_BUCKETS


def grad_hist_buckets(e_min: int = GRAD_HIST_E_MIN, e_max: int = GRAD_HIST_E_MAX) -> int:
    """Counters per matrix: zero, below, one per exponent e_min..e_max, above, overflow."""
    return e_max - e_min + 5


def grad_hist_clear(pb: PlanBuilder, program: str, *, counts: str, N: int) -> None:
    """counts[0 : N] = 0 (u32): the lens program's first dispatch."""
    pb.dispatch(program, ["grad_hist_clear.wgsl"], "grad_hist_clear", {"N": N}, {"counts": counts}, grid(N))


def grad_hist(
    pb: PlanBuilder,
    program: str,
    *,
    X: str,
    counts: str,
    ROWS: int,
    COLS: int,
    BASE: int,
    E_MIN: int = GRAD_HIST_E_MIN,
    E_MAX: int = GRAD_HIST_E_MAX,
) -> None:
    """Adds the log2 histogram of |X| (an h matrix [ROWS, COLS]) to counts[BASE : BASE + buckets]
    (u32, grad_hist_buckets(E_MIN, E_MAX) counters; see grad_hist.wgsl)."""
    if not E_MIN <= E_MAX or grad_hist_buckets(E_MIN, E_MAX) > GRAD_HIST_MAX_BUCKETS:
        raise ValueError(f"grad_hist: exponents {E_MIN}..{E_MAX} need 1..{GRAD_HIST_MAX_BUCKETS - 4} buckets")
    nwg = min(GRAD_HIST_MAX_WG, cdiv(ROWS * ((COLS + 1) // 2), GRAD_HIST_WG))
    dims = f"grad_hist_dims_{ROWS}x{COLS}_at_{BASE}"  # the kernel's `dims` uniform: one pipeline for all
    if dims not in pb.buffers:
        pb.u32(dims, (4,), "other", init=[ROWS, COLS, BASE, nwg])
    pb.dispatch(
        program,
        ["grad_hist.wgsl"],
        "grad_hist",
        {"E_MIN": E_MIN, "E_MAX": E_MAX},
        {"X": X, "counts": counts, "dims": dims},
        [nwg],
    )


ADAM_LOG_BETA_ZERO = -128.0  # adam_log_beta(0): any x = t * this is below scaler.wgsl's cutoff (-18)


def adam_log_beta(beta: float) -> float:
    """scaler.wgsl's LOG_BETA1 / LOG_BETA2: ln of the f32 beta (the value adamw.wgsl's BETA holds),
    computed in float64 and rounded to f32; ADAM_LOG_BETA_ZERO for beta 0. The kernel's bias
    correction 1 - beta^t is then consistent with the moments it divides."""
    b32 = float(np.float32(beta))
    if not 0.0 <= b32 < 1.0:
        raise ValueError(f"Adam's beta must round to an f32 in [0, 1), got {beta} (f32 {b32})")
    if b32 == 0.0:
        return ADAM_LOG_BETA_ZERO
    return float(np.float32(math.log(b32)))


def scaler_step(
    pb: PlanBuilder,
    program: str,
    constants: dict[str, Any],
    *,
    partials: str,
    loss_rows: str,
    metrics: str,
    state: str = "state",
    flags: str = "flags",
) -> None:
    """The step's verdict, loss scale update, Adam's bias corrections and metrics record (one
    workgroup); `constants` are scaler.wgsl's overrides (NUM_PARTIALS, B, SCALING, GROWTH, ...,
    LOG_BETA1, LOG_BETA2 from adam_log_beta, RING)."""
    pb.dispatch(
        program,
        ["reduce.wgsl", "scaler.wgsl"],
        "scaler_step",
        constants,
        {"state": state, "flags": flags, "partials": partials, "loss_rows": loss_rows, "metrics": metrics},
        [1],
    )


def adamw(
    pb: PlanBuilder,
    program: str,
    *,
    P: str,
    G: str,
    Mo: str,
    V: str,
    N: int,
    WD: float,
    BETA1: float,
    BETA2: float,
    EPS: float,
    state: str = "state",
) -> None:
    """AdamW on N f32 master values (skipped when state.apply is 0). The kernel reads N as P's
    length, so P, G, Mo and V must each hold exactly N values."""
    for buf in (P, G, Mo, V):
        pb.require_bytes("adamw", buf, 4 * N, f"N = {N} f32 values")
    pb.dispatch(
        program,
        ["adamw.wgsl"],
        "adamw",
        {"WD": WD, "BETA1": BETA1, "BETA2": BETA2, "EPS": EPS},
        {"state": state, "P": P, "G": G, "Mo": Mo, "V": V},
        grid(N),
    )


def adamw_copy(
    pb: PlanBuilder,
    program: str,
    *,
    P: str,
    G: str,
    Mo: str,
    V: str,
    Wh: str,
    ROWS: int,
    COLS: int,
    WD: float,
    BETA1: float,
    BETA2: float,
    EPS: float,
    state: str = "state",
) -> None:
    """AdamW on a [ROWS, COLS] weight matrix that also writes its working copy Wh (h format).

    The kernel reads the size as Wh's length (P, G, Mo, V must hold exactly ROWS * COLS values, Wh
    exactly the matrix): an even COLS needs no size constant, so all such matrices share one
    pipeline; an odd COLS (a padding half at the end of each row) is the override COLS."""
    for buf in (P, G, Mo, V):
        pb.require_bytes("adamw_copy", buf, 4 * ROWS * COLS, f"ROWS * COLS = {ROWS * COLS} f32 values")
    pb.require_bytes("adamw_copy", Wh, h_bytes(ROWS, COLS, pb.path), f"an h matrix [{ROWS}, {COLS}]")
    odd_cols = {"COLS": COLS} if COLS % 2 else {}
    pb.dispatch(
        program,
        ["adamw.wgsl", "adamw_copy.wgsl"],
        "adamw_copy",
        {"WD": WD, "BETA1": BETA1, "BETA2": BETA2, "EPS": EPS, **odd_cols},
        {"state": state, "P": P, "G": G, "Mo": Mo, "V": V, "Wh": Wh},
        grid(ROWS * cdiv(COLS, 2)),
    )


# Gradient accumulation (--grad-accum N): run at the end of each micro-batch, in this order.
def grad_accum(
    pb: PlanBuilder, program: str, *, G: str, A: str, N: int, state: str = "state", flags: str = "flags"
) -> None:
    """A = G on micro-batch 0 (state.micro), else A + G (N f32 values); G's non-finite values raise
    the master-gradient flag. The kernel reads N as G's length: G and A must hold exactly N."""
    for buf in (G, A):
        pb.require_bytes("grad_accum", buf, 4 * N, f"N = {N} f32 values")
    pb.dispatch(
        program,
        ["grad_accum.wgsl"],
        "grad_accum",
        {},
        {"G": G, "state": state, "A": A, "flags": flags},
        grid(N),
    )


def accum_rows(
    pb: PlanBuilder,
    program: str,
    *,
    src: str,
    dst: str,
    rows: int,
    micro_batches: int,
    stride: int | None = None,
    offset: int = 0,
    state: str = "state",
) -> None:
    """dst[micro * stride + offset + i] = src[i], i < rows (micro = state.micro; stride defaults to
    rows): the micro-batch's loss rows at their place among the step's (a data-parallel rank's:
    stride the global micro-batch's rows, offset its shard's first). The kernel reads `rows` as
    src's length; dst holds micro_batches * stride values."""
    stride = rows if stride is None else stride
    if not 0 <= offset <= stride - rows:
        raise ValueError(f"accum_rows: {rows} rows at offset {offset} do not fit a slot of {stride}")
    pb.require_bytes("accum_rows", src, 4 * rows, f"rows = {rows} f32 values")
    pb.require_bytes("accum_rows", dst, 4 * stride * micro_batches, f"{micro_batches} x {stride} f32 values")
    consts = {"STRIDE": stride, **({"OFFSET": offset} if offset else {})}
    binds = {"src": src, "state": state, "dst": dst}
    pb.dispatch(program, ["accum_rows.wgsl"], "accum_rows", consts, binds, grid(rows))


def micro_next(pb: PlanBuilder, program: str, *, micro_batches: int, state: str = "state") -> None:
    """state.micro = (state.micro + 1) % micro_batches: the next micro-batch (0 after the last)."""
    pb.dispatch(
        program, ["micro_next.wgsl"], "micro_next", {"MICRO_BATCHES": micro_batches}, {"state": state}, [1]
    )
