"""Text generation (shaders/sample/, `webmp sample`): the model's input window, the newest token's
row taken from or put into a window's matrix (the one-position program), and the next token."""

from __future__ import annotations

import struct

from ..engine.plan import PlanBuilder, h_bytes
from .common import cdiv, grid

SAMPLE_CUTOFF = 87.0  # sample_next's weights are 0 where (max - logit) / temperature >= this
F32_TINY = 2.0**-126  # the smallest normal f32


def sample_temperature(temperature: float) -> tuple[float, float]:
    """(TEMPERATURE, CUTOFF) of sample_next.wgsl for a temperature >= 0, both rounded to f32.
    A temperature whose f32 is below the smallest normal f32 (as 0 then on GPUs that flush
    subnormals) is 0: the argmax. CUTOFF = 87 * TEMPERATURE, at most f32's largest finite value."""
    if not 0 <= temperature < float("inf"):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    t32 = float(struct.unpack("f", struct.pack("f", min(temperature, 3.0e38)))[0])
    if t32 < F32_TINY:
        return 0.0, 0.0
    cutoff = float(struct.unpack("f", struct.pack("f", min(SAMPLE_CUTOFF * t32, 3.0e38)))[0])
    return t32, cutoff


def sample_window(
    pb: PlanBuilder, program: str, *, seq: str, seq_len: str, idx: str, T: int, capacity: int
) -> None:
    """idx [T] = the last min(n, T) tokens of seq [capacity] (n = seq_len[0]), then token 0."""
    if capacity < 1 or T < 1:
        raise ValueError(f"sample_window: T {T} and capacity {capacity} must be positive")
    pb.dispatch(
        program,
        ["sample_window.wgsl"],
        "sample_window",
        {"T": T, "CAPACITY": capacity},
        {"seq": seq, "seq_len": seq_len, "idx": idx},
        grid(T),
    )


def _sample_row(pb: PlanBuilder, program: str, entry: str, binds: dict, T: int, cols: int) -> None:
    if T < 1 or cols < 1:
        raise ValueError(f"{entry}: T {T} and cols {cols} must be positive")
    window, row = (binds["X"], binds["Y"]) if entry == "sample_row_take" else (binds["Y"], binds["X"])
    pb.require_bytes(entry, window, h_bytes(T, cols, pb.path), f"an h matrix [{T}, {cols}]")
    pb.require_bytes(entry, row, h_bytes(1, cols, pb.path), f"an h matrix [1, {cols}]")
    words = cdiv(cols, 2)
    pb.dispatch(program, ["sample_rows.wgsl"], entry, {"T": T, "WORDS": words}, binds, grid(words))


def sample_row_take(
    pb: PlanBuilder, program: str, *, seq_len: str, X: str, Y: str, T: int, cols: int
) -> None:
    """Y [1, cols] (h) = row min(n, T) - 1 of X [T, cols] (h), n = seq_len[0]: the newest token's row
    of a window's values, copied word for word."""
    _sample_row(pb, program, "sample_row_take", {"seq_len": seq_len, "X": X, "Y": Y}, T, cols)


def sample_row_put(pb: PlanBuilder, program: str, *, seq_len: str, X: str, Y: str, T: int, cols: int) -> None:
    """Row min(n, T) - 1 of Y [T, cols] (h) = X [1, cols] (h), n = seq_len[0], the other rows kept:
    the newest token's q, k, v into an attention layer's cache."""
    _sample_row(pb, program, "sample_row_put", {"seq_len": seq_len, "X": X, "Y": Y}, T, cols)


def sample_next(
    pb: PlanBuilder,
    program: str,
    *,
    logits: str,
    seq: str,
    seq_len: str,
    V: int,
    T: int,
    capacity: int,
    temperature: float,
    seed: int,
) -> None:
    """The next token from row min(n, T) - 1 of logits [T, V] (n = seq_len[0]) appended to seq
    [capacity], seq_len incremented: the argmax at temperature 0 (ties to the lowest id), else a
    draw from softmax(logits / temperature) with the counter-based RNG of SEED and the position n
    (sample_next.wgsl); one workgroup."""
    t32, cutoff = sample_temperature(temperature)
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must fit in 32 bits, got {seed}")
    if min(V, T, capacity) < 1:
        raise ValueError(f"sample_next: V {V}, T {T} and capacity {capacity} must be positive")
    pb.dispatch(
        program,
        ["sample_next.wgsl"],
        "sample_next",
        {"V": V, "T": T, "CAPACITY": capacity, "TEMPERATURE": t32, "CUTOFF": cutoff, "SEED": seed},
        {"logits": logits, "seq": seq, "seq_len": seq_len},
        [1],
    )
