"""float64 references of the image kernels (webmp/ops/conv.py): im2col and col2im, max pooling
(values and argmax) and average pooling, forward and backward, on the pixel-row layout the kernels
use (an image batch [B, C, H, W] as [B*H*W, C], row (b*H + h)*W + w). The pools take a square
window (K, S, P). Error bounds: the test's (an f32 sum over the terms, then one store)."""

from __future__ import annotations

import numpy as np


def conv_out(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def window_rows(B: int, H: int, W: int, KH: int, KW: int, SH: int, SW: int, PH: int, PW: int) -> np.ndarray:
    """[B*OH*OW, KH*KW]: for each output pixel and tap kh*KW + kw, the input pixel row
    (b*H + ih)*W + iw with ih = oh*SH - PH + kh, iw = ow*SW - PW + kw, or -1 in the padding."""
    OH, OW = conv_out(H, KH, SH, PH), conv_out(W, KW, SW, PW)
    b, oh, ow, kh, kw = np.meshgrid(
        np.arange(B), np.arange(OH), np.arange(OW), np.arange(KH), np.arange(KW), indexing="ij"
    )
    ih, iw = oh * SH - PH + kh, ow * SW - PW + kw
    inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    return np.where(inside, (b * H + ih) * W + iw, -1).reshape(B * OH * OW, KH * KW)


def _padded(X) -> np.ndarray:
    """X with a zero row appended: row -1 is the padding."""
    X = np.asarray(X, np.float64)
    return np.vstack([X, np.zeros((1, X.shape[1]))])


def im2col(X, B: int, C: int, H: int, W: int, KH: int, KW: int, SH: int, SW: int, PH: int, PW: int):
    """P [B*OH*OW, KH*KW*C], P[r, (kh*KW + kw)*C + c] = X[window row, c], zero in the padding."""
    rows = window_rows(B, H, W, KH, KW, SH, SW, PH, PW)
    return _padded(X)[rows].reshape(len(rows), KH * KW * C)


def col2im(dP, B: int, C: int, H: int, W: int, KH: int, KW: int, SH: int, SW: int, PH: int, PW: int):
    """im2col's adjoint: dX [B*H*W, C], each element the sum of the dP entries it was copied to."""
    rows = window_rows(B, H, W, KH, KW, SH, SW, PH, PW)
    dX = np.zeros((B * H * W + 1, C))
    np.add.at(dX, rows.ravel(), np.asarray(dP, np.float64).reshape(-1, C))
    return dX[:-1]


def maxpool_fwd(X, B: int, C: int, H: int, W: int, K: int, S: int, P: int):
    """(Y [B*OH*OW, C], argmax [B*OH*OW, C]): each window's maximum (padding -inf) and the pixel row
    of the first maximum in row-major window order."""
    rows = window_rows(B, H, W, K, K, S, S, P, P)
    vals = np.where(rows[:, :, None] >= 0, _padded(X)[rows], -np.inf)  # [out, K*K, C]
    first = np.argmax(vals, axis=1)  # numpy's argmax: the first of equal maxima
    Y = np.take_along_axis(vals, first[:, None, :], axis=1)[:, 0]
    return Y, np.take_along_axis(rows, first, axis=1)


def maxpool_bwd(dY, argmax, B: int, C: int, H: int, W: int):
    """dX [B*H*W, C]: each window's gradient added to its argmax pixel, channel by channel."""
    argmax = np.asarray(argmax).reshape(-1, C)
    dX = np.zeros((B * H * W, C))
    np.add.at(dX, (argmax, np.broadcast_to(np.arange(C), argmax.shape)), np.asarray(dY, np.float64))
    return dX


def avgpool_fwd(X, B: int, C: int, H: int, W: int, K: int, S: int, P: int):
    """Y [B*OH*OW, C]: each window's sum / (K*K), padding counted as zeros (count_include_pad)."""
    rows = window_rows(B, H, W, K, K, S, S, P, P)
    return _padded(X)[rows].sum(axis=1) / (K * K)


def avgpool_bwd(dY, B: int, C: int, H: int, W: int, K: int, S: int, P: int):
    """dX [B*H*W, C]: each window's gradient / (K*K) added to every pixel of the window."""
    rows = window_rows(B, H, W, K, K, S, S, P, P)
    dY = np.asarray(dY, np.float64) / (K * K)
    dX = np.zeros((B * H * W + 1, C))
    np.add.at(dX, rows.ravel(), np.repeat(dY, K * K, axis=0))
    return dX[:-1]
