"""Datasets: the built-in digits, the user's own tables (`--data file.npz|file.csv`), the data order.

Every dataset of the MLP goes through `split_standardise`: a deterministic 80/20 train/test split
(SPLIT_SEED, independent of the training seed) and features standardised with the train split's
mean and standard deviation, times `input_scale`. A file that cannot be used raises `DataError`, a
ValueError whose message is one line naming the file and what is wrong (row and column 1-based, as
a spreadsheet shows them). Text files are read by webmp/data/text.py (the coming character GPT).

The training order is computed on the GPU (common.wgsl's seeded_permute, used by gather.wgsl for
dataset rows and windows.wgsl for token windows); `permute` here is its numpy twin, used by tests
and by references that need the same batches (`batch_rows`, `window_starts`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..config import TrainConfig

SPLIT_SEED = 0  # the train/test split is fixed, independent of the training seed
TRAIN_FRACTION = 0.8
MAX_FILE_BYTES = 1 << 30  # 1 GiB: no data file larger is read
TABLE_SUFFIXES = (".npz", ".csv")
TEXT_FOR_GPT = "text data trains the GPT (--model gpt)"
MLP_FORMATS = (
    ".npz (arrays x [rows, features] or images [rows, C, H, W], and y [rows]) or .csv (the last column "
    "the label)"
)
NOT_TEXT_SUFFIXES = (".npy", ".json", ".jsonl", ".tsv", ".parquet", ".xlsx", ".xls")  # tables, not prose
MAX_CLASSES = 1 << 16  # one output unit per class: a larger label is a mistake (say a regression target)


class DataError(ValueError):
    """A data file that cannot be used; the message is one line naming the file."""


@dataclass
class Dataset:
    name: str
    train_x: np.ndarray  # float32 [n, features]
    train_y: np.ndarray  # uint32 [n]
    test_x: np.ndarray
    test_y: np.ndarray
    classes: int
    source: str = ""  # where the data came from: "scikit-learn digits", a file's absolute path
    sha256: str | None = None  # of the file's bytes; None for a built-in dataset
    image: tuple[int, int, int] | None = None  # (C, H, W) when each row is an image, in (c, h, w) order

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


def make_dataset(
    name: str,
    train_x,
    train_y,
    test_x,
    test_y,
    classes: int,
    source: str = "",
    sha256: str | None = None,
    image: tuple[int, int, int] | None = None,
) -> Dataset:
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
        source,
        sha256,
        image,
    )


def split_standardise(
    name: str,
    x: np.ndarray,
    y: np.ndarray,
    classes: int,
    input_scale: float = 1.0,
    source: str = "",
    sha256: str | None = None,
    image: tuple[int, int, int] | None = None,
) -> Dataset:
    """The MLP's dataset from all rows (x float64 [n, f], y integer [n], n >= 2): a deterministic
    80/20 split by SPLIT_SEED (at least one row on each side), features standardised on the train
    split (a constant feature stays 0), then multiplied by input_scale."""
    order = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    n_train = min(max(int(round(TRAIN_FRACTION * len(x))), 1), len(x) - 1)
    tr, te = order[:n_train], order[n_train:]
    mean = x[tr].mean(0)
    std = x[tr].std(0)
    std[std < 1e-6] = 1.0  # constant features (digits' border pixels, always 0) stay 0
    norm = (x - mean) / std * input_scale
    return make_dataset(name, norm[tr], y[tr], norm[te], y[te], classes, source, sha256, image)


def load_digits(input_scale: float = 1.0) -> Dataset:
    """sklearn's 8x8 digits: deterministic 80/20 split, features standardised on the train split;
    each row a [1, 8, 8] image too."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    x, y = d.data.astype(np.float64), d.target.astype(np.int64)
    return split_standardise("digits", x, y, 10, input_scale, source="scikit-learn digits", image=(1, 8, 8))


def load_dataset(name: str, input_scale: float = 1.0) -> Dataset:
    """A built-in dataset by name (TrainConfig.dataset)."""
    if name == "digits":
        return load_digits(input_scale)
    raise ValueError(f"unknown dataset {name!r}")


def load_mlp_data(cfg: TrainConfig) -> Dataset:
    """The MLP's data for a config: the file `cfg.data` when set, else the built-in `cfg.dataset`."""
    if cfg.data is None:
        return load_dataset(cfg.dataset, cfg.input_scale)
    return load_table(cfg.data, cfg.input_scale)


# --- files ---------------------------------------------------------------------------------------


def read_data_file(path: str | os.PathLike[str], max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """A data file's bytes; DataError (one line naming the path) when it is missing, not a file,
    unreadable, or larger than max_bytes."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise DataError(f"{p}: no such file") from None
    except OSError as e:
        raise DataError(f"{p}: cannot read it ({e.strerror or e})") from None
    if not p.is_file():
        raise DataError(f"{p}: not a file")
    if size > max_bytes:
        raise DataError(f"{p}: {size} bytes is more than the {max_bytes} bytes a data file may have")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise DataError(f"{p}: cannot read it ({e.strerror or e})") from None
    if len(raw) > max_bytes:  # it grew since stat
        raise DataError(f"{p}: more than the {max_bytes} bytes a data file may have")
    return raw


def decode_utf8(raw: bytes, what: str) -> str:
    """UTF-8 text without a leading byte-order mark; DataError naming the first invalid byte's offset."""
    skip = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
    try:
        return raw[skip:].decode("utf-8")
    except UnicodeDecodeError as e:
        at = skip + e.start  # offset in the file, 0-based
        raise DataError(
            f"{what}: not UTF-8 text: byte {at} (0x{raw[at]:02x}) is invalid ({e.reason})"
        ) from None


def looks_like_text(raw: bytes) -> bool:
    """Whether the start of a file is UTF-8 text (no NUL bytes; a character cut at the end is fine)."""
    head = raw[: 1 << 16]
    if b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(head) - 3 and e.reason == "unexpected end of data"
    return True


def load_table(path: str | os.PathLike[str], input_scale: float = 1.0) -> Dataset:
    """A table for the MLP: .npz (arrays x, y; optional scalar classes) or .csv (last column the label).

    Labels are integers 0..C-1, C = the largest label + 1 (or the npz's `classes`); split and
    standardised as digits are (split_standardise). Raises DataError, one line naming what is wrong."""
    p = Path(path)
    suffix = p.suffix.lower()
    raw = read_data_file(p)
    if suffix not in TABLE_SUFFIXES:
        if looks_like_text(raw) and suffix not in NOT_TEXT_SUFFIXES:
            raise DataError(f"{p}: {TEXT_FOR_GPT}; the MLP trains on {MLP_FORMATS}")
        raise DataError(
            f"{p}: unknown data format {suffix or '(no extension)'!r}; the MLP trains on {MLP_FORMATS}"
        )
    image = None
    if suffix == ".npz":
        x, y, classes = _npz_arrays(raw, p)
        if x.ndim == 4:
            image = x.shape[1:]
            x = x.reshape(len(x), -1)
    else:
        x, y = _csv_arrays(decode_utf8(raw, str(p)), p)
        classes = None
    if len(x) < 2:
        raise DataError(f"{p}: {len(x)} row(s); at least 2 are needed (one to train on, one to test)")
    largest = int(y.max())
    if classes is None:
        classes = largest + 1
    elif classes <= largest:
        raise DataError(f"{p}: label {largest} is out of range for classes = {classes}")
    if classes > MAX_CLASSES:
        raise DataError(f"{p}: classes = {classes}; at most {MAX_CLASSES} (one output unit per class)")
    if classes < 2:
        raise DataError(f"{p}: every label is 0; a classifier needs at least 2 classes")
    digest = hashlib.sha256(raw).hexdigest()
    return split_standardise(
        p.name, x, y, classes, input_scale, source=str(p.resolve()), sha256=digest, image=image
    )


def _npz_arrays(raw: bytes, p: Path) -> tuple[np.ndarray, np.ndarray, int | None]:
    if not raw.startswith(b"PK"):
        raise DataError(f"{p}: not an .npz archive (numpy.savez writes one)")
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise DataError(f"{p}: not a readable .npz archive of numeric arrays ({why})") from None
    for key in ("x", "y"):
        if key not in arrays:
            have = ", ".join(sorted(arrays)) or "none"
            raise DataError(f"{p}: no array {key!r} in the .npz (it holds: {have}); save x and y")
    x, y = arrays["x"], arrays["y"]
    if x.ndim not in (2, 4):
        raise DataError(f"{p}: x must be [rows, features] or images [rows, C, H, W], got shape {x.shape}")
    if y.ndim != 1:
        raise DataError(f"{p}: y must be 1-D [rows], got shape {y.shape}")
    if len(x) != len(y):
        raise DataError(f"{p}: x has {len(x)} rows but y has {len(y)}")
    if 0 in x.shape[1:]:
        raise DataError(f"{p}: x has no features (shape {x.shape})")
    for key, a in (("x", x), ("y", y)):
        if a.dtype.kind not in "biuf":
            raise DataError(f"{p}: {key} must hold real numbers, got dtype {a.dtype}")
    xf = x.astype(np.float64)
    bad = ~np.isfinite(xf)
    if bad.any():
        first = ", ".join(str(int(i)) for i in np.argwhere(bad)[0])
        raise DataError(f"{p}: x holds {int(bad.sum())} NaN/Inf value(s), the first at x[{first}]")
    labels = _labels(y.astype(np.float64), lambda i: f"{p}: y[{i}]")
    classes = None
    if "classes" in arrays:
        c = arrays["classes"]
        if c.ndim != 0 or c.dtype.kind not in "iu":
            raise DataError(f"{p}: classes must be an integer scalar, got {c.dtype} shape {c.shape}")
        classes = int(c)
    return xf, labels, classes


def _labels(y: np.ndarray, where) -> np.ndarray:
    """Integer labels >= 0 from float64 values; DataError at the first bad one (`where(i)` names it)."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(y) | (y < 0) | (y != np.round(y)) | (y >= MAX_CLASSES)
    if bad.any():
        i = int(np.argmax(bad))
        v = y[i]
        if not np.isfinite(v):
            why = "is not a finite number"
        elif v < 0:
            why = "is negative"
        elif v != round(v):
            why = "is not an integer"
        else:
            why = f"is too large (one output unit per class, at most {MAX_CLASSES} classes)"
        raise DataError(f"{where(i)}: label {v:g} {why}; labels are integers 0..C-1")
    return y.astype(np.int64)


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _csv_arrays(text: str, p: Path) -> tuple[np.ndarray, np.ndarray]:
    """(x float64, y int64) of comma-separated text; a first row without any number is a header."""
    reader = csv.reader(io.StringIO(text))
    rows: list[list[str]] = []
    lines: list[int] = []  # each row's line number, 1-based
    header: list[str] | None = None
    try:
        for row in reader:
            if not row or all(not c.strip() for c in row):
                continue  # blank line
            if header is None and not rows and all(_number(c) is None for c in row):
                header = row
                continue
            rows.append(row)
            lines.append(reader.line_num)
    except csv.Error as e:
        raise DataError(f"{p}: row {reader.line_num}: not valid CSV ({e})") from None
    if not rows:
        raise DataError(f"{p}: no data rows" + (" (only a header)" if header else ""))
    width = len(header) if header is not None else len(rows[0])
    for row, line in zip(rows, lines, strict=True):
        if len(row) != width:
            first = "the header" if header is not None else f"row {lines[0]}"
            raise DataError(f"{p}: row {line} has {len(row)} columns, {first} has {width}")
    if width < 2:
        raise DataError(f"{p}: one column; a CSV needs features and then the label (comma-separated)")

    def column(c: int) -> str:
        name = f" ({header[c].strip()!r})" if header is not None and header[c].strip() else ""
        return f"column {c + 1}{name}"

    try:
        table = np.array(rows, dtype=np.float64)
    except ValueError:
        for row, line in zip(rows, lines, strict=True):
            for c, cell in enumerate(row):
                if _number(cell) is None:
                    hint = " (cells are separated by commas)" if ";" in cell or "\t" in cell else ""
                    what = "an empty cell" if not cell.strip() else f"{cell.strip()[:40]!r} is not a number"
                    if line == lines[0] and header is None and cell.strip():
                        hint += " (a header row holds no numbers)"
                    raise DataError(f"{p}: row {line}, {column(c)}: {what}{hint}") from None
        raise  # numpy refused a table that float() accepts cell by cell: not expected
    x, yf = table[:, :-1], table[:, -1]
    bad = ~np.isfinite(x)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataError(f"{p}: row {lines[r]}, {column(int(c))}: {x[r, c]} is not a finite number")
    y = _labels(yf, lambda i: f"{p}: row {lines[i]}, {column(width - 1)}")
    return x, y


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
