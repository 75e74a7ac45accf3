"""The data order on the GPU (shaders/data/): the next batch of rows (gather_train, gather_eval) or
of token windows (gather_windows, gather_windows_eval), in the seeded per-epoch order."""

from __future__ import annotations

from ..engine.plan import PlanBuilder
from .common import cdiv, grid


def gather_train(
    pb: PlanBuilder,
    program: str,
    *,
    xs: str,
    ys: str,
    X: str,
    y: str,
    n_rows: int,
    features: int,
    batch: int,
    seed: int,
    perm_bits: int,
    shard: int = 0,
    micro: int = 0,
    state: str = "state",
) -> None:
    """The next batch of the seeded per-epoch permutation (at state.data_pos) into X (h) and y;
    a data-parallel rank's `batch` rows start `shard` rows into the global batch (the constant is
    left out for 0, as before it existed); with gradient accumulation, micro-batch state.micro's
    rows start state.micro * `micro` rows into the step's (`micro`: a micro-batch's rows over all
    ranks; 0 without accumulation)."""
    consts = {"N_ROWS": n_rows, "F": features, "B": batch, "SEED": seed, "PERM_BITS": perm_bits}
    if shard:
        consts["SHARD"] = shard
    if micro:
        consts["MICRO"] = micro
    pb.dispatch(
        program,
        ["gather_rows.wgsl", "gather.wgsl"],
        "gather_train",
        consts,
        {"xs": xs, "ys": ys, "state": state, "X": X, "y": y},
        grid(batch * cdiv(features, 2)),
    )


def gather_eval(
    pb: PlanBuilder,
    program: str,
    *,
    xs: str,
    ys: str,
    chunk: str,
    X: str,
    y: str,
    n_rows: int,
    features: int,
    batch: int,
) -> None:
    """Rows c * batch .. c * batch + batch - 1 in order, c = chunk[0] (the evaluation's chunk
    counter: eval_reset, eval_next_chunk); rows past the end get the label NO_LABEL."""
    pb.dispatch(
        program,
        ["gather_rows.wgsl", "gather_eval.wgsl"],
        "gather_eval",
        {"N_ROWS": n_rows, "F": features, "B": batch},
        {"xs": xs, "ys": ys, "chunk": chunk, "X": X, "y": y},
        grid(batch * cdiv(features, 2)),
    )


def gather_windows(
    pb: PlanBuilder,
    program: str,
    *,
    tokens: str,
    idx: str,
    targets: str,
    n_tokens: int,
    T: int,
    batch: int,
    seed: int,
    perm_bits: int,
    pos_per_window: int,
    shard: int = 0,
    micro: int = 0,
    state: str = "state",
) -> None:
    """The next `batch` training windows of T tokens: idx [batch * T] the inputs, targets the next
    tokens. Window b starts at window_starts' position (webmp.data.tables) for window number
    state.data_pos / pos_per_window + b, in the seeded per-epoch order over the n_tokens - T start
    positions (perm_bits = webmp.data.tables.perm_bits(n_tokens - T)). The scaler advances data_pos by
    its B, the number of loss rows: with batch * T loss rows, pass pos_per_window = T. A
    data-parallel rank's `batch` windows start `shard` windows into the global batch, and micro-batch
    state.micro's (gradient accumulation) state.micro * `micro` windows into the step's."""
    if n_tokens <= T:
        raise ValueError(f"a stream of {n_tokens} tokens has no window of {T} tokens plus a target")
    consts = {
        "N_TOKENS": n_tokens,
        "T": T,
        "B": batch,
        "SEED": seed,
        "PERM_BITS": perm_bits,
        "POS_PER_WINDOW": pos_per_window,
    }
    if shard:
        consts["SHARD"] = shard
    if micro:
        consts["MICRO"] = micro
    pb.dispatch(
        program,
        ["windows.wgsl"],
        "gather_windows",
        consts,
        {"tokens": tokens, "state": state, "idx": idx, "targets": targets},
        grid(batch * T),
    )


def gather_windows_eval(
    pb: PlanBuilder,
    program: str,
    *,
    tokens: str,
    chunk: str,
    idx: str,
    targets: str,
    n_tokens: int,
    T: int,
    batch: int,
) -> None:
    """Windows c * batch .. c * batch + batch - 1 of the consecutive, non-overlapping windows
    (window w starts at token w * T), c = chunk[0] (the evaluation's chunk counter); rows without a
    next token get token 0 and the label NO_LABEL (webmp.data.tables.eval_windows counts the
    windows)."""
    pb.dispatch(
        program,
        ["windows_eval.wgsl"],
        "gather_windows_eval",
        {"N_TOKENS": n_tokens, "T": T, "B": batch},
        {"tokens": tokens, "chunk": chunk, "idx": idx, "targets": targets},
        grid(batch * T),
    )
