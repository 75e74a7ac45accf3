"""Text for the character-level GPT: the user's UTF-8 file, or the running Python's standard library.

A corpus is a sequence of characters (Unicode code points); its vocabulary is the set of characters
that occur in it, sorted by code point, and a token is a character's index in the vocabulary. The
split is contiguous: the last 10 % of the characters are the validation split, so no context window
straddles train and validation except at that one boundary.

The default corpus (no `--data`) exists wherever Python runs: the `*.py` sources of the running
interpreter's standard library (`sysconfig.get_paths()["stdlib"]`), its packages descended into
but not its test suites (`test/`, `tests/`, `idle_test/`, `test_*.py`) nor anything that is not a
package name (`site-packages`, `lib-dynload`, `config-3.x-...`). Files are taken whole, in a fixed
shuffle (sorted by the SHA-256 of their relative path, so every part of the library, not its first
letters, is in both splits), each after a separator line naming it, until the next would pass the
size cap:

DEFAULT_CORPUS_BYTES = 4 MiB, because the GPT trains for minutes on a CPU adapter: at a few
thousand tokens a step, a few thousand steps see about one epoch of 4 MiB; its 10 % validation
split (~400 K characters) gives a steady loss estimate; and its token ids (4 bytes each, 16 MiB)
fit in one storage buffer far below WebGPU's default 128 MiB binding limit. The same Python gives
the same corpus, byte for byte (`TextCorpus.sha256`).
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import TrainConfig
from .tables import (
    MAX_FILE_BYTES,
    TABLE_SUFFIXES,
    DataError,
    Dataset,
    decode_utf8,
    load_mlp_data,
    read_data_file,
)

VAL_SHARE = 10  # the last 1/10 of the characters (at least one) are the validation split
DEFAULT_CORPUS_BYTES = 4 << 20  # see the module docstring
TEST_SUITE_DIRS = frozenset({"test", "tests", "idle_test"})


@dataclass
class TextCorpus:
    name: str
    vocab: list[str]  # the characters that occur, sorted by code point; token id = index
    train: np.ndarray  # uint32 token ids, the first 90 % of the characters
    val: np.ndarray  # uint32 token ids, the last 10 %
    source: str  # where the text came from, in words
    sha256: str  # of the text's bytes: the file's, or the default corpus's UTF-8

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in np.asarray(ids).ravel())


def tokenize(text: str, name: str, source: str, sha256: str) -> TextCorpus:
    """The corpus of a text: character vocabulary and the contiguous 90/10 split."""
    if not text:
        raise DataError(f"{name}: empty text")
    points = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    present = np.unique(points)
    if len(present) < 2:
        raise DataError(f"{name}: only one distinct character ({text[0]!r}); a model needs at least 2")
    lookup = np.zeros(int(present[-1]) + 1, np.uint32)
    lookup[present] = np.arange(len(present), dtype=np.uint32)
    ids = lookup[points]
    n_val = max(1, len(ids) // VAL_SHARE)
    return TextCorpus(
        name=name,
        vocab=[chr(c) for c in present],
        train=ids[:-n_val].copy(),
        val=ids[-n_val:].copy(),
        source=source,
        sha256=sha256,
    )


def load_text(path: str | os.PathLike[str] | None = None, max_bytes: int | None = None) -> TextCorpus:
    """The corpus of a UTF-8 text file, or with path None the default corpus (the module docstring).

    max_bytes: a file larger is refused (default MAX_FILE_BYTES, 1 GiB); the default corpus stops
    before the first source file that would take it past max_bytes (default DEFAULT_CORPUS_BYTES).
    A leading byte-order mark is dropped. Raises DataError, one line naming the file: missing,
    too large, not UTF-8 (the offset of the first invalid byte), empty, fewer than 2 characters."""
    if path is None:
        return default_corpus(DEFAULT_CORPUS_BYTES if max_bytes is None else max_bytes)
    p = Path(path)
    if p.suffix.lower() in TABLE_SUFFIXES:
        raise DataError(f"{p}: a {p.suffix} table trains the MLPs (--model mlp); the GPT trains on text")
    raw = read_data_file(p, MAX_FILE_BYTES if max_bytes is None else max_bytes)
    if not raw:
        raise DataError(f"{p}: empty file")
    text = decode_utf8(raw, str(p))
    return tokenize(text, str(p), str(p.resolve()), hashlib.sha256(raw).hexdigest())


def load_training_data(cfg: TrainConfig) -> Dataset | TextCorpus:
    """What `cfg.model` trains on: the GPT and a network with a token input a text corpus (cfg.data
    or the default corpus), the MLPs and the other networks a Dataset
    (webmp.data.tables.load_mlp_data)."""
    return load_text(cfg.data) if cfg.trains_on_text else load_mlp_data(cfg)


def checkpoint_facts(data: Dataset | TextCorpus) -> dict[str, Any]:
    """What a checkpoint records about its training data, native and browser runs alike: the data's
    sha256 (None for a built-in MLP dataset; resuming refuses data that changed) and, for text, the
    vocabulary (token id -> character, for `webmp sample`)."""
    facts: dict[str, Any] = {"data_sha256": data.sha256}
    if isinstance(data, TextCorpus):
        facts["vocab"] = list(data.vocab)
    return facts


def describe_data(data: Dataset | TextCorpus) -> str:
    """One line on what a run trains on, for logs."""
    if isinstance(data, TextCorpus):
        return (
            f"{data.source}: {len(data.train)} train / {len(data.val)} validation characters, "
            f"vocabulary {data.vocab_size}"
        )
    return (
        f"{data.source}: {len(data.train_x)} train / {len(data.test_x)} test rows, {data.features} "
        f"features, {data.classes} classes"
    )


def stdlib_sources(root: str | os.PathLike[str] | None = None) -> list[tuple[str, Path]]:
    """(relative path, path) of the standard library's .py files, test suites left out, sorted."""
    base = Path(sysconfig.get_paths()["stdlib"] if root is None else root)
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        # descend only into packages (identifier names: not site-packages or lib-dynload), not tests
        dirnames[:] = sorted(d for d in dirnames if d.isidentifier() and d not in TEST_SUITE_DIRS)
        for f in filenames:
            if f.endswith(".py") and not f.startswith("test_"):
                full = Path(dirpath, f)
                found.append((full.relative_to(base).as_posix(), full))
    found.sort()
    return found


def separator(rel: str) -> str:
    """The line before each file of the default corpus."""
    return f"# ======== {rel} ========\n"


def default_corpus(max_bytes: int = DEFAULT_CORPUS_BYTES) -> TextCorpus:
    """The running Python's standard library sources, whole files in path order, up to max_bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib_sources(root), key=lambda f: hashlib.sha256(f[0].encode()).digest())
    parts: list[bytes] = []
    total = taken = undecodable = 0
    for rel, path in files:
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            undecodable += 1  # (none in CPython's stdlib outside its tests) skipped, deterministically
            continue
        block = (separator(rel) + text + ("" if text.endswith("\n") else "\n")).encode()
        if total + len(block) > max_bytes:
            break
        parts.append(block)
        total += len(block)
        taken += 1
    if not taken:
        raise DataError(
            f"no Python sources of at most {max_bytes} bytes under {root}; pass --data with a text file"
        )
    raw = b"".join(parts)
    version = ".".join(map(str, sys.version_info[:3]))
    skipped = f", {undecodable} not UTF-8 skipped" if undecodable else ""
    source = (
        f"the Python {version} standard library at {root}: {taken} of {len(files)} source files "
        f"(test suites left out{skipped}), {total} bytes, cap {max_bytes}"
    )
    return tokenize(raw.decode("utf-8"), "python-stdlib", source, hashlib.sha256(raw).hexdigest())


def run_baseline_bits(cfg: TrainConfig, data: Dataset | TextCorpus) -> float | None:
    """The unigram baseline a run reports beside its validation loss (the characters its eval
    program scores); None for the MLPs' datasets. Native and browser runs both call this."""
    return unigram_bits_per_char(data, cfg.val_tokens) if isinstance(data, TextCorpus) else None


def unigram_bits_per_char(corpus: TextCorpus, val_tokens: int = 0) -> float:
    """The unigram baseline in bits per character: the cross-entropy of the validation characters
    the GPT's eval program predicts under the train split's character frequencies,
    -mean(log2 p(c)). Those are the targets of the first `val_tokens` characters of the split
    (0: all of it), every one but the first (which has no context); a one-character split scores
    that character.

    p is add-one (Laplace) smoothed over the whole vocabulary, p(c) = (count_train(c) + 1) /
    (n_train + V), so a character that occurs only in the validation split has probability
    1 / (n_train + V) instead of 0 (an infinite loss)."""
    counts = np.bincount(corpus.train, minlength=corpus.vocab_size).astype(np.float64)
    p = (counts + 1) / (len(corpus.train) + corpus.vocab_size)
    scored = corpus.val[: val_tokens or len(corpus.val)]
    return float(-np.log2(p)[scored[1:] if len(scored) > 1 else scored].mean())
