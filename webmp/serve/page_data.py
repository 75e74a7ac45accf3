"""What browser runs train on: the built-in data (the digits; the default corpus for the models that
train on text, the GPT and a network with a token input), or a file a page uploaded (PUT /api/data),
stored in the runs directory under its SHA-256 and named in the config by it (data "sha256:<hex>").
A page never names a server path (check_browser_config refuses one): the plan's blob, training data
included, goes to whichever client asks for it.

An upload is checked by the loaders `webmp train --data` uses (webmp.data.tables.load_table for
.npz and .csv, webmp.data.text.load_text for any other name: UTF-8 text), so it is refused in their
words; it is stored as uploads/<sha256>.npz, .csv or .txt, and a config's hash names the text for
a model that trains on text, the table for the others. Each file is loaded once per server
process: a stored file is never rewritten (its name is its content).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..data.tables import TABLE_SUFFIXES, DataError, Dataset, load_dataset, load_table
from ..data.text import TextCorpus, load_text
from ..models.net import check_data_fits
from ..models.net_seq import check_corpus_fits
from .errors import InvalidConfig, InvalidData, TooLarge
from .form import check_browser_config

DEFAULT_CORPUS = "the default corpus (the server's Python standard library sources)"
UPLOADS = "uploads"  # the runs directory's folder of uploaded data (no config.json: not a run)
TEXT_SUFFIX = ".txt"
# One upload is at most security.MAX_UPLOAD_BYTES; all of them together are bounded too: a client
# (with the token, where one is set) could otherwise fill the server's disk.
MAX_UPLOADS_BYTES = 1 << 30


@lru_cache(maxsize=4)
def _dataset(name: str, input_scale: float) -> Dataset:
    return load_dataset(name, input_scale)


@lru_cache(maxsize=1)
def _default_corpus() -> TextCorpus:
    return load_text(None)  # what native `webmp train --model gpt` reads without --data


@lru_cache(maxsize=4)
def _table(path: str, input_scale: float) -> Dataset:
    return load_table(path, input_scale)


@lru_cache(maxsize=2)
def _text(path: str) -> TextCorpus:
    return load_text(path)


def training_data(cfg: TrainConfig) -> Dataset | TextCorpus:
    """The built-in data of a config without data (a server with no uploads: PageData.load)."""
    return PageData(None).load(cfg)


def describe(data: Dataset | TextCorpus) -> str:
    """An upload's contents in one line (without the server's path of it)."""
    if isinstance(data, TextCorpus):
        n = len(data.train) + len(data.val)
        return (
            f"{n} characters ({len(data.train)} train / {len(data.val)} validation), "
            f"vocabulary {data.vocab_size}"
        )
    n = len(data.train_x) + len(data.test_x)
    return (
        f"{n} rows ({len(data.train_x)} train / {len(data.test_x)} test), {data.features} features, "
        f"{data.classes} classes"
    )


class PageData:
    """The data of one runs directory's browser runs (`runs_root` None: the built-in data only)."""

    def __init__(self, runs_root: str | Path | None):
        self.dir = None if runs_root is None else Path(runs_root) / UPLOADS

    def stored(self, cfg: TrainConfig) -> Path:
        """The stored upload cfg.data names: text for a model that trains on text, a table for the
        others; InvalidConfig (naming the field) when this server holds none."""
        assert cfg.data is not None
        sha = cfg.data.removeprefix("sha256:")
        suffixes = (TEXT_SUFFIX,) if cfg.trains_on_text else TABLE_SUFFIXES
        for suffix in suffixes:
            if self.dir is not None and (self.dir / f"{sha}{suffix}").is_file():
                return self.dir / f"{sha}{suffix}"
        text = "UTF-8 text (what a gpt and a token network train on)"
        kind = text if cfg.trains_on_text else "table (.npz or .csv)"
        raise InvalidConfig(f"invalid data: this server holds no uploaded {kind} {cfg.data}; upload the file")

    def load(self, cfg: TrainConfig) -> Dataset | TextCorpus:
        """What a browser run trains on (check_browser_config first), loaded once per process."""
        check_browser_config(cfg)
        if cfg.data is not None:
            path = str(self.stored(cfg))
            if cfg.trains_on_text:
                return _text(path)
            return dataclasses.replace(_table(path, cfg.input_scale), name=cfg.data)  # not the file's name
        return _default_corpus() if cfg.trains_on_text else _dataset(cfg.dataset, cfg.input_scale)

    @staticmethod
    def name(cfg: TrainConfig) -> str:
        """The training data of a browser run, in words (a refused resume names it)."""
        if cfg.data is not None:
            return f"the uploaded {cfg.data}"
        return DEFAULT_CORPUS if cfg.trains_on_text else f"the {cfg.dataset} dataset"

    def upload(self, raw: bytes, name: str) -> dict[str, Any]:
        """Check and store an upload named `name` (only its suffix and the messages read it): what the
        page sets its data field to, and what the file holds. InvalidData in the loaders' words,
        TooLarge when the uploads would pass MAX_UPLOADS_BYTES. Runs in a worker thread."""
        if self.dir is None:
            raise InvalidData("this server keeps no uploads")
        suffix = Path(name).suffix.lower()
        suffix = suffix if suffix in TABLE_SUFFIXES else TEXT_SUFFIX
        sha = hashlib.sha256(raw).hexdigest()
        final = self.dir / f"{sha}{suffix}"
        if final.is_file():
            data = self._check(final, name)
        else:
            self.dir.mkdir(parents=True, exist_ok=True)
            held = sum(p.stat().st_size for p in self.dir.iterdir() if p.is_file())
            if held + len(raw) > MAX_UPLOADS_BYTES:
                raise TooLarge(
                    f"the server holds {held} bytes of uploaded data and keeps at most {MAX_UPLOADS_BYTES}"
                )
            part = self.dir / f".{sha}-{uuid.uuid4().hex}{suffix}"  # the loaders read the suffix
            try:
                part.write_bytes(raw)
                data = self._check(part, name)
                os.replace(part, final)  # at once: a reader sees the whole file or none
            finally:
                part.unlink(missing_ok=True)
        kind = {".npz": "npz", ".csv": "csv", TEXT_SUFFIX: "text"}[suffix]
        return {
            "data": f"sha256:{sha}",
            "name": name,
            "format": kind,
            "bytes": len(raw),
            "description": describe(data),
        }

    @staticmethod
    def _check(path: Path, name: str) -> Dataset | TextCorpus:
        try:
            return load_text(path) if path.suffix == TEXT_SUFFIX else load_table(path)
        except DataError as e:
            raise InvalidData(str(e).replace(str(path), name)) from None


def check_network_data(cfg: TrainConfig, data: Dataset | TextCorpus) -> None:
    """InvalidConfig naming model_spec when the network's input or classes are not the data's (a
    token network's vocabulary not the text's)."""
    if cfg.model_spec is None:
        return
    try:
        if isinstance(data, Dataset):
            check_data_fits(cfg.model_spec, data)
        else:
            check_corpus_fits(cfg.model_spec, data)
    except ValueError as e:
        raise InvalidConfig(f"invalid model_spec: {e}") from None
