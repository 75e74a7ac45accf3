"""The elementwise layer kernels (shaders/elementwise/): standalone activations forward and backward
(act.wgsl, common.wgsl's ACT_* functions) and dropout with a counter-based mask (dropout.wgsl), on
[rows, cols] matrices in the activation format."""

from __future__ import annotations

import math

import numpy as np

from ..engine.plan import PlanBuilder, h_bytes
from .common import ACT_CODES, cdiv, grid

U32_LIMIT = 2**32


def _words(launcher: str, rows: int, cols: int) -> int:
    """Words of an h matrix [rows, cols], after checking the sizes (element indices fit in u32)."""
    if rows < 1 or cols < 1:
        raise ValueError(f"{launcher}: rows {rows} and cols {cols} must be positive")
    if rows * cols >= U32_LIMIT:
        raise ValueError(f"{launcher}: rows * cols = {rows * cols} elements, at most {U32_LIMIT - 1}")
    return rows * cdiv(cols, 2)


def _require_h(pb: PlanBuilder, launcher: str, buffers: dict[str, str], rows: int, cols: int) -> None:
    for role, name in buffers.items():
        pb.require_bytes(
            launcher, name, h_bytes(rows, cols, pb.path), f"{role}: an h matrix [{rows}, {cols}]"
        )


def _act_code(launcher: str, act: str) -> int:
    if act not in ACT_CODES or act == "none":
        raise ValueError(f"{launcher}: act {act!r} is not one of {sorted(set(ACT_CODES) - {'none'})}")
    return ACT_CODES[act]


def act_fwd(
    pb: PlanBuilder, program: str, *, X: str, Y: str, rows: int, cols: int, act: str, flags: str = "flags"
) -> None:
    """Y = act(X) on h matrices [rows, cols] (act a name of ACT_CODES but "none": relu, gelu (tanh
    approximation), silu, tanh), in f32 and stored once; a value that does not fit raises the
    overflow flag."""
    words = _words("act_fwd", rows, cols)
    code = _act_code("act_fwd", act)
    _require_h(pb, "act_fwd", {"X": X, "Y": Y}, rows, cols)
    consts = {"WORDS": words, "COLS": cols, "ACT": code}
    # act_fwd_h reads no dY: X is bound there too, so both entry points share one layout
    binds = {"X": X, "dY": X, "Y": Y, "flags": flags}
    pb.dispatch(program, ["act.wgsl"], "act_fwd_h", consts, binds, grid(words))


def act_bwd(
    pb: PlanBuilder,
    program: str,
    *,
    X: str,
    dY: str,
    dX: str,
    rows: int,
    cols: int,
    act: str,
    flags: str = "flags",
) -> None:
    """dX = dY * act'(X) on h matrices [rows, cols], X the activation's input (as act_fwd's act)."""
    words = _words("act_bwd", rows, cols)
    code = _act_code("act_bwd", act)
    _require_h(pb, "act_bwd", {"X": X, "dY": dY, "dX": dX}, rows, cols)
    consts = {"WORDS": words, "COLS": cols, "ACT": code}
    binds = {"X": X, "dY": dY, "Y": dX, "flags": flags}
    pb.dispatch(program, ["act.wgsl"], "act_bwd_h", consts, binds, grid(words))


def dropout_constants(
    launcher: str, rows: int, cols: int, p: float, seed: int, stream: int, micro_elems: int = 0
) -> dict:
    """dropout.wgsl's override constants: sizes, THRESHOLD = ceil(p * 2^32) (exact: p * 2^32 is a
    float64 product by a power of two), SCALE = 1 / (1 - p), SEED and STREAM (u32); MICRO_ELEMS
    with gradient accumulation (left out for 0)."""
    words = _words(launcher, rows, cols)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{launcher}: p = {p!r} must be in [0, 1)")
    threshold = math.ceil(p * U32_LIMIT)
    if threshold >= U32_LIMIT:
        raise ValueError(f"{launcher}: p = {p!r} is too close to 1 (ceil(p * 2^32) must be below 2^32)")
    for what, v in (("seed", seed), ("stream", stream)):
        if not (isinstance(v, (int, np.integer)) and 0 <= v < U32_LIMIT):
            raise ValueError(f"{launcher}: {what} {v!r} must be an integer in [0, 2^32)")
    return {
        "WORDS": words,
        "COLS": cols,
        "THRESHOLD": threshold,
        "SCALE": 1.0 / (1.0 - p),
        "SEED": int(seed),
        "STREAM": int(stream),
        **({"MICRO_ELEMS": micro_elems} if micro_elems else {}),
    }


def dropout_fwd(
    pb: PlanBuilder,
    program: str,
    *,
    X: str,
    Y: str,
    state: str,
    rows: int,
    cols: int,
    p: float,
    seed: int,
    stream: int,
    micro_elems: int = 0,
    flags: str = "flags",
) -> None:
    """Y = X * keep / (1 - p) on h matrices [rows, cols] (training only). Element e = row * cols +
    col is kept iff a hash of (seed, stream, state.iteration, e) is >= p * 2^32 (dropout.wgsl;
    numpy twin webmp.testing.reference.dropout_keep): a new mask each step with no mask buffer
    and no host write; `stream` (a layer's index) makes layers differ. p in [0, 1); p = 0 is the
    identity (callers may skip the dispatch then). With gradient accumulation, micro_elems (the
    elements of one micro-batch's matrix) numbers micro-batch state.micro's elements after the
    earlier micro-batches', as one matrix of the step's rows would."""
    consts = dropout_constants("dropout_fwd", rows, cols, p, seed, stream, micro_elems)
    _require_h(pb, "dropout_fwd", {"X": X, "Y": Y}, rows, cols)
    binds = {"X": X, "Y": Y, "state": state, "flags": flags}
    pb.dispatch(program, ["dropout.wgsl"], "dropout", consts, binds, grid(consts["WORDS"]))


def dropout_bwd(
    pb: PlanBuilder,
    program: str,
    *,
    dY: str,
    dX: str,
    state: str,
    rows: int,
    cols: int,
    p: float,
    seed: int,
    stream: int,
    micro_elems: int = 0,
    flags: str = "flags",
) -> None:
    """dX = dY * keep / (1 - p): the forward's kernel and mask (the same p, seed, stream, step and
    micro-batch)."""
    consts = dropout_constants("dropout_bwd", rows, cols, p, seed, stream, micro_elems)
    _require_h(pb, "dropout_bwd", {"dY": dY, "dX": dX}, rows, cols)
    binds = {"X": dY, "Y": dX, "state": state, "flags": flags}
    pb.dispatch(program, ["dropout.wgsl"], "dropout", consts, binds, grid(consts["WORDS"]))
