"""float64 references for the token models' kernels: the training and evaluation windows, the
embedding and its gradient, and sampling (the window of the last tokens, the uniform draw, the
probabilities and the token drawn, with the bound on the kernel's comparison)."""

from __future__ import annotations

import math

import numpy as np

from ...data.tables import pcg_hash, window_starts
from .kernels import NO_LABEL, U32, dot_error


def gather_windows(tokens, data_pos: int, batch: int, T: int, seed: int):
    """(idx, targets) [batch * T] of gather_windows at window number data_pos (in windows)."""
    tokens = np.asarray(tokens, np.uint32)
    starts = window_starts(data_pos, batch, len(tokens) - T, seed)
    rows = (starts[:, None] + np.arange(T)[None, :]).ravel()
    return tokens[rows], tokens[rows + 1]


def gather_windows_eval(tokens, batch: int, T: int, offset: int):
    """(idx, targets) of gather_windows_eval: windows offset .. offset + batch - 1, consecutive;
    rows without a next token hold token 0 and NO_LABEL."""
    tokens = np.asarray(tokens, np.uint32)
    p = offset * T + np.arange(batch * T)
    valid = p + 1 < len(tokens)
    idx = np.where(valid, tokens[np.minimum(p, len(tokens) - 1)], 0).astype(np.uint32)
    targets = np.where(valid, tokens[np.minimum(p + 1, len(tokens) - 1)], NO_LABEL).astype(np.uint32)
    return idx, targets


def embed_fwd(idx, wte, wpe) -> np.ndarray:
    """X before the store: wte[idx[r]] + wpe[r % T]."""
    wpe = np.asarray(wpe, np.float64)
    idx = np.asarray(idx, np.int64)
    return np.asarray(wte, np.float64)[idx] + wpe[np.arange(len(idx)) % len(wpe)]


def token_rows(idx, V: int):
    """(spans [V, 2] = (start, count), order [R]) of the stable counting sort of idx by token."""
    idx = np.asarray(idx, np.int64)
    counts = np.bincount(idx, minlength=V)[:V]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return np.stack([starts, counts], 1).astype(np.uint32), np.argsort(idx, kind="stable").astype(np.uint32)


def embed_wgrad(idx, dX, V: int, T: int, dwte0=None):
    """(dwte, dwpe) exactly: dwte[v] = dwte0[v] (if accumulating) + sum of dX[r] over rows of token
    v, dwpe[t] = sum of dX[r] over rows r % T == t; and (abs_dwte, abs_dwpe), the same sums of
    |terms| (what the f32 error bounds scale with)."""
    idx = np.asarray(idx, np.int64)
    dX = np.asarray(dX, np.float64)
    D = dX.shape[1]
    dwte, abs_te = np.zeros((V, D)), np.zeros((V, D))
    np.add.at(dwte, idx, dX)
    np.add.at(abs_te, idx, np.abs(dX))
    if dwte0 is not None:
        dwte += np.asarray(dwte0, np.float64)
        abs_te += np.abs(np.asarray(dwte0, np.float64))
    dwpe = dX.reshape(-1, T, D).sum(0)
    abs_pe = np.abs(dX).reshape(-1, T, D).sum(0)
    return dwte, dwpe, abs_te, abs_pe


def embed_wgrad_f32(idx, dX, V: int, T: int, dwte0=None):
    """(dwte, dwpe) as float32 sums in row order, each started at 0 (dwte0 added last): what the
    kernel computes when every f32 addition rounds to nearest, bit for bit."""
    idx = np.asarray(idx, np.int64)
    dX = np.asarray(dX, np.float32)
    D = dX.shape[1]
    dwte, dwpe = np.zeros((V, D), np.float32), np.zeros((T, D), np.float32)
    for r in range(len(idx)):
        dwte[idx[r]] += dX[r]
        dwpe[r % T] += dX[r]
    if dwte0 is not None:
        dwte += np.asarray(dwte0, np.float32)
    return dwte, dwpe


def sample_window(seq, n: int, T: int) -> np.ndarray:
    """idx [T] of sample_window.wgsl: the last min(n, T) of the n tokens seq holds, then zeros."""
    seq = np.asarray(seq, np.uint32)
    n = min(n, len(seq))
    shown = min(n, T)
    idx = np.zeros(T, np.uint32)
    idx[:shown] = seq[n - shown : n]
    return idx


def sample_row_take(X, n: int) -> np.ndarray:
    """sample_row_take.wgsl's Y [1, cols]: row min(n, T) - 1 of X [T, cols] (n >= 1)."""
    X = np.asarray(X)
    return X[min(max(n, 1), len(X)) - 1][None].copy()


def sample_row_put(Y, X, n: int) -> np.ndarray:
    """sample_row_put.wgsl's Y [T, cols] after it: row min(n, T) - 1 replaced by X [1, cols]."""
    Y = np.array(Y)
    Y[min(max(n, 1), len(Y)) - 1] = np.asarray(X).reshape(-1)
    return Y


def sample_uniform(seed: int, pos) -> np.ndarray:
    """sample_next.wgsl's u for the token at position(s) `pos`, bit for bit: the top 24 bits of
    pcg_hash(seed ^ pcg_hash(pos)) times 2^-24 (float64 holding the f32 value exactly)."""
    bits = pcg_hash(np.uint64(seed) ^ pcg_hash(pos)) >> np.uint64(8)
    return bits.astype(np.float64) * 2.0**-24


def sample_probs(row, TEMPERATURE: float, CUTOFF: float) -> np.ndarray:
    """The probabilities sample_next draws from for one logits row (f32 values), exactly in float64:
    e_c = exp((l_c - m) / TEMPERATURE) (m the row maximum), 0 where m - l_c >= CUTOFF, over their
    sum. TEMPERATURE and CUTOFF as the kernel's constants (webmp.ops.sample_temperature)."""
    row = np.asarray(row, np.float64)
    gap = row.max() - row
    e = np.where(gap < CUTOFF, np.exp(-gap / TEMPERATURE), 0.0)
    return e / e.sum()


def sample_draw(p, u: float) -> int:
    """The token sample_next picks in exact arithmetic: the first c with p_0 + ... + p_c > u."""
    cum = np.cumsum(np.asarray(p, np.float64))
    above = np.nonzero(cum > u)[0]
    return int(above[0]) if len(above) else int(np.nonzero(np.asarray(p) > 0)[0][-1])


SAMPLE_WG = 64  # sample_next.wgsl's workgroup size
SAMPLE_CUTOFF = 87.0  # webmp.ops.SAMPLE_CUTOFF: weights at (m - l) / TEMPERATURE >= this are 0


def sample_draw_bound(row, TEMPERATURE: float, CUTOFF: float) -> float:
    """A bound on how far sample_next's f32 comparison "running sum > u * total", divided by the
    total, can stand from the exact "p_0 + ... + p_c > u": when no cumulative probability of
    sample_probs lies within it of u, the kernel picks sample_draw's token.

    Per weight: l - m (< 1 ulp), the division (2.5 ulp), so the argument x errs by < 7 U32 |x|,
    and exp errs by < 3 + 2|x| ulp (WGSL): |e~ - e| < U32 (6 + 11|x|) e. The sums (a thread's
    columns, then the chunks, <= V + WG additions on any path) err by < dot_error(V + WG) of the
    total; u * total by one rounding; weights set to 0 at the cutoff by < exp(-87) each."""
    row = np.asarray(row, np.float64)
    gap = row.max() - row
    x = -gap / TEMPERATURE
    e = np.where(gap < CUTOFF, np.exp(x), 0.0)
    total = e.sum()
    weights = float((U32 * (6 + 11 * np.abs(x)) * e).sum()) + len(row) * math.exp(-SAMPLE_CUTOFF)
    E = weights + dot_error(len(row) + SAMPLE_WG) * total
    return 1.01 * (2 * E + 2 * U32 * total) / total
