"""Datasets and the seeded data order.

The training order is computed on the GPU (common.wgsl's seeded_permute, used by gather.wgsl for
dataset rows and windows.wgsl for token windows); `permute` here is its numpy twin, used by tests
and by references that need the same batches (`batch_rows`, `window_starts`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPLIT_SEED = 0  # the train/test split is fixed, independent of the training seed


@dataclass
class Dataset:
    name: str
    train_x: np.ndarray  # float32 [n, features]
    train_y: np.ndarray  # uint32 [n]
    test_x: np.ndarray
    test_y: np.ndarray
    classes: int

    @property
    def features(self) -> int:
        return self.train_x.shape[1]


def check_arrays(x: np.ndarray, y: np.ndarray, classes: int, what: str) -> None:
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y) or len(x) == 0:
        raise ValueError(f"{what}: expected x [n, f] and y [n] with n > 0, got {x.shape} and {y.shape}")
    bad = ~np.isfinite(x)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(
            f"{what}: input data holds {int(bad.sum())} NaN/Inf values (first at row {r}, column {c})"
        )
    if (y >= classes).any():
        raise ValueError(f"{what}: label {int(y.max())} out of range for {classes} classes")


def make_dataset(name: str, train_x, train_y, test_x, test_y, classes: int) -> Dataset:
    train_x, test_x = np.asarray(train_x, np.float64), np.asarray(test_x, np.float64)
    train_y, test_y = np.asarray(train_y), np.asarray(test_y)
    check_arrays(train_x, train_y, classes, f"{name} train split")
    check_arrays(test_x, test_y, classes, f"{name} test split")
    return Dataset(
        name,
        train_x.astype(np.float32),
        train_y.astype(np.uint32),
        test_x.astype(np.float32),
        test_y.astype(np.uint32),
        classes,
    )


def load_digits(input_scale: float = 1.0) -> Dataset:
    """sklearn's 8x8 digits: deterministic 80/20 split, features standardised on the train split."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    x, y = d.data.astype(np.float64), d.target.astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    n_train = int(round(0.8 * len(x)))
    tr, te = order[:n_train], order[n_train:]
    mean = x[tr].mean(0)
    std = x[tr].std(0)
    std[std < 1e-6] = 1.0  # constant pixels (always 0 at the border) stay 0
    norm = (x - mean) / std * input_scale
    return make_dataset("digits", norm[tr], y[tr], norm[te], y[te], classes=10)


def load_dataset(name: str, input_scale: float = 1.0) -> Dataset:
    if name == "digits":
        return load_digits(input_scale)
    raise ValueError(f"unknown dataset {name!r}")


# --- the data order, bit for bit as gather.wgsl computes it -------------------------------------

M32 = 0xFFFFFFFF


def perm_bits(n: int) -> int:
    return max(1, int(n - 1).bit_length())


def pcg_hash(x):
    x = np.asarray(x, dtype=np.uint64) & M32
    s = (x * 747796405 + 2891336453) & M32
    w = (((s >> ((s >> 28) + 4)) ^ s) * 277803737) & M32
    return (w >> 22) ^ w


def permute(j, epoch: int, n: int, seed: int):
    """Row index of stream position j (0 <= j < n) in the given epoch."""
    bits = perm_bits(n)
    mask = (1 << bits) - 1
    shift = (bits + 1) // 2
    keys = [int(pcg_hash(seed ^ int(pcg_hash(epoch * 4 + r)))) for r in range(4)]
    x = np.asarray(j, dtype=np.uint64).copy()
    todo = np.ones(x.shape, bool)
    out = x.copy()
    while todo.any():
        v = out[todo]
        for k in keys:
            v = (v * (k | 1)) & mask
            v = v ^ (v >> shift)
            v = (v + (k >> 7)) & mask
        out[todo] = v
        todo[todo] = v >= n
    return out


def batch_rows(data_pos: int, batch: int, n: int, seed: int) -> np.ndarray:
    pos = np.arange(data_pos, data_pos + batch, dtype=np.int64)
    out = np.empty(batch, np.int64)
    for epoch in np.unique(pos // n):
        sel = pos // n == epoch
        out[sel] = permute(pos[sel] % n, int(epoch), n, seed)
    return out


# --- token streams (character-level language models), as windows.wgsl reads them ------------------


def check_tokens(tokens: np.ndarray, vocab: int, context: int, what: str) -> np.ndarray:
    """The stream as uint32, after checking every id is below `vocab` (embed.wgsl reads wte rows by
    id unchecked) and that it holds at least one window of `context` tokens plus a target."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or len(tokens) <= context:
        raise ValueError(f"{what}: expected a 1-D stream of more than {context} tokens, got {tokens.shape}")
    if tokens.min() < 0 or tokens.max() >= vocab:
        raise ValueError(
            f"{what}: token ids must lie in 0 .. {vocab - 1}, got {tokens.min()} .. {tokens.max()}"
        )
    return tokens.astype(np.uint32)


def window_starts(data_pos: int, batch: int, n_positions: int, seed: int) -> np.ndarray:
    """First token of each of the `batch` training windows from window number data_pos on: the seeded
    per-epoch order over the n_positions = n_tokens - context start positions, the same order as
    the rows of a dataset (batch_rows). data_pos counts windows (the GPU's state.data_pos divided
    by the launcher's pos_per_window)."""
    return batch_rows(data_pos, batch, n_positions, seed)


def eval_windows(n_tokens: int, context: int) -> int:
    """Consecutive evaluation windows covering a stream: each token but the first is a target once."""
    return -(-(n_tokens - 1) // context)
