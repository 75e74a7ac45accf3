"""The token model's elementwise kernels (shaders/embed/): the embedding and its gradient (after
token_rows' sort), residual adds and transposes of h matrices, and round_h (an inspection kernel
no model dispatches)."""

from __future__ import annotations

from ..engine.plan import PlanBuilder, h_bytes
from .common import cdiv, grid


def embed_fwd(
    pb: PlanBuilder,
    program: str,
    *,
    idx: str,
    wte: str,
    wpe: str,
    X: str,
    R: int,
    T: int,
    D: int,
    flags: str = "flags",
) -> None:
    """X [R, D] (h) = wte[idx] + wpe[row % T], in f32 from the f32 tables; a thread a stored word."""
    pb.dispatch(
        program,
        ["embed.wgsl"],
        "embed_fwd",
        {"R": R, "T": T, "D": D},
        {"idx": idx, "wte": wte, "wpe": wpe, "X": X, "flags": flags},
        grid(R * cdiv(D, 2)),
    )


def token_rows(pb: PlanBuilder, program: str, *, idx: str, spans: str, order: str, R: int, V: int) -> None:
    """Each token's rows in row order (a stable counting sort of idx [R]): order [R] lists them
    token by token, spans [V, 2] gives each token's (start, count); a workgroup a token."""
    pb.dispatch(
        program,
        ["token_rows.wgsl"],
        "token_rows",
        {"R": R, "V": V},
        {"idx": idx, "spans": spans, "order": order},
        [V],
    )


def embed_wgrad(
    pb: PlanBuilder,
    program: str,
    *,
    spans: str,
    order: str,
    dX: str,
    dwte: str,
    dwpe: str,
    R: int,
    T: int,
    V: int,
    D: int,
    accumulate: bool = False,
) -> None:
    """dwte [V, D] and dwpe [T, D] (f32) from dX [R, D] (h), summed in row order (after token_rows
    on the same idx); accumulate=True adds into dwte (a tied head's gradient) instead of writing."""
    if R % T:
        raise ValueError(f"rows {R} are not whole windows of {T}")
    pb.dispatch(
        program,
        ["embed_wgrad.wgsl"],
        "embed_wgrad",
        {"R": R, "T": T, "V": V, "D": D, "ACCUMULATE": int(accumulate)},
        {"spans": spans, "order": order, "dX": dX, "dwte": dwte, "dwpe": dwpe},
        grid((V + T) * cdiv(D, 2)),
    )


def add_h(pb: PlanBuilder, program: str, *, A: str, Y: str, M: int, N: int, flags: str = "flags") -> None:
    """Y += A on [M, N] matrices in the activation format (residual connections, both directions)."""
    words = M * cdiv(N, 2)
    pb.dispatch(
        program, ["add.wgsl"], "add_h", {"WORDS": words}, {"A": A, "Y": Y, "flags": flags}, grid(words)
    )


def transpose_h(pb: PlanBuilder, program: str, *, X: str, Y: str, rows: int, cols: int) -> None:
    """Y = X^T: X an h matrix [rows, cols], Y [cols, rows], the bits moved unchanged (a weight's
    working copy laid out for the products that read it transposed: GPT's backward pass)."""
    pb.require_bytes("transpose_h", X, h_bytes(rows, cols, pb.path), f"an h matrix [{rows}, {cols}]")
    pb.require_bytes("transpose_h", Y, h_bytes(cols, rows, pb.path), f"an h matrix [{cols}, {rows}]")
    blocks = cdiv(rows, 2) * cdiv(cols, 2)
    sizes = {"ROWS": rows, "COLS": cols}
    pb.dispatch(program, ["transpose_h.wgsl"], "transpose_h", sizes, {"X": X, "Y": Y}, grid(blocks))


def round_h(pb: PlanBuilder, program: str, *, x: str, out: str, N: int) -> None:
    """out = h_round(x) for N f32 values: the prelude's rounding to the activation format (f16,
    ties to even, via common.wgsl's f16_round on both f16 paths; none in fp32), as matmul
    operands get it with A_ACT. For tests and webmp.testing.probe; no model dispatches it."""
    pb.dispatch(program, ["round_h.wgsl"], "round_h", {"N": N}, {"x": x, "out": out}, grid(N))


def embed_row(
    pb: PlanBuilder,
    program: str,
    *,
    seq: str,
    seq_len: str,
    wte: str,
    wpe: str,
    X: str,
    T: int,
    D: int,
    capacity: int,
    flags: str = "flags",
) -> None:
    """X [1, D] (h) = the newest token's embedding, row min(n, T) - 1 of what sample_window then
    embed_fwd compute (n = seq_len[0]): the bits of embed_fwd and sample_row_take in one dispatch."""
    if min(T, D, capacity) < 1:
        raise ValueError(f"embed_row: T {T}, D {D} and capacity {capacity} must be positive")
    pb.dispatch(
        program,
        ["embed_row.wgsl"],
        "embed_row",
        {"T": T, "D": D, "CAPACITY": capacity},
        {"seq": seq, "seq_len": seq_len, "wte": wte, "wpe": wpe, "X": X, "flags": flags},
        grid(cdiv(D, 2)),
    )
