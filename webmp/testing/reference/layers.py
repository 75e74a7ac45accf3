"""float64 references for the kernels of the layer library's RMSNorm (shaders/rows/rmsnorm_*.wgsl)
and dropout (shaders/elementwise/dropout.wgsl): RMSNorm forward, backward and weight gradient
before the final store (as kernels.py's references), and dropout's keep mask bit for bit (uint32
arithmetic, the kernel's hash) with its output."""

from __future__ import annotations

import math

import numpy as np

RMSNORM_EPS = 2.0**-23  # torch.finfo(torch.float32).eps: nn.RMSNorm's default (webmp.ops.rows)


# --- RMSNorm -----------------------------------------------------------------------------------


def rmsnorm_fwd(X, gamma, eps: float = RMSNORM_EPS):
    """(Y before the store, rstd [M]): rstd = 1 / sqrt(mean(X^2) + eps), Y = X * rstd * gamma."""
    x = np.asarray(X, np.float64)
    rstd = 1.0 / np.sqrt((x * x).mean(1) + eps)
    return x * rstd[:, None] * np.asarray(gamma, np.float64), rstd


def rmsnorm_bwd(dY, X, rstd, gamma) -> np.ndarray:
    """dX before the store: rstd * (g - xhat * mean(g * xhat)), g = dY * gamma, xhat = X * rstd."""
    r = np.asarray(rstd, np.float64)[:, None]
    xhat = np.asarray(X, np.float64) * r
    g = np.asarray(dY, np.float64) * np.asarray(gamma, np.float64)
    return r * (g - xhat * (g * xhat).mean(1, keepdims=True))


def rmsnorm_wgrad(dY, X, rstd) -> np.ndarray:
    """dgamma = sum_r dY * X * rstd."""
    xhat = np.asarray(X, np.float64) * np.asarray(rstd, np.float64)[:, None]
    return (np.asarray(dY, np.float64) * xhat).sum(0)


# --- dropout -----------------------------------------------------------------------------------

_SALT = np.uint32(0x9E3779B9)  # dropout.wgsl's DROPOUT_SALT


def lowbias32(x) -> np.ndarray:
    """dropout.wgsl's lowbias32 (Chris Wellons' hash) on uint32 arrays, wrapping as u32 does."""
    x = np.asarray(x, np.uint32).copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
    return x


def dropout_threshold(p: float) -> int:
    """ceil(p * 2^32): an element is kept iff its hash is at least this (p * 2^32 is exact)."""
    return math.ceil(p * 2**32)


def dropout_bits(rows: int, cols: int, seed: int, stream: int, iteration: int) -> np.ndarray:
    """The kernel's u32 hash of every element e = row * cols + col of a [rows, cols] matrix."""
    u = np.uint32
    key = lowbias32(lowbias32(lowbias32(u(seed) ^ _SALT) ^ u(stream)) ^ u(iteration))
    e = np.arange(rows * cols, dtype=np.uint32).reshape(rows, cols)
    with np.errstate(over="ignore"):
        return lowbias32(lowbias32(e ^ key) + key + _SALT)


def dropout_keep(rows: int, cols: int, p: float, seed: int, stream: int, iteration: int) -> np.ndarray:
    """The keep mask (bool [rows, cols]) dropout.wgsl draws at this state.iteration."""
    return dropout_bits(rows, cols, seed, stream, iteration) >= dropout_threshold(p)


def dropout(X, keep, p: float) -> np.ndarray:
    """The kernel's output before the store: X / (1 - p) where kept, else 0."""
    return np.where(keep, np.asarray(X, np.float64) / (1.0 - p), 0.0)
