"""What browser runs train on: the built-in data (the MLPs' datasets, the GPT's default corpus), each
loaded once per server process. A page never names a data file (webmp/serve/form.py refuses one):
the plan's blob, training data included, goes to whichever client asks for it.
"""

from __future__ import annotations

from functools import lru_cache

from ..config import TrainConfig
from ..data.tables import Dataset, load_dataset
from ..data.text import TextCorpus, load_text
from .form import check_browser_config

DEFAULT_CORPUS = "the default corpus (the server's Python standard library sources)"


@lru_cache(maxsize=4)
def _dataset(name: str, input_scale: float) -> Dataset:
    return load_dataset(name, input_scale)


@lru_cache(maxsize=1)
def _default_corpus() -> TextCorpus:
    return load_text(None)  # what native `webmp train --model gpt` reads without --data


def training_data(cfg: TrainConfig) -> Dataset | TextCorpus:
    """What a browser run trains on: webmp.data.text.load_training_data for a config without data
    (check_browser_config), loaded once per server process."""
    check_browser_config(cfg)
    return _default_corpus() if cfg.model == "gpt" else _dataset(cfg.dataset, cfg.input_scale)


def data_name(cfg: TrainConfig) -> str:
    """The training data of a browser run, in words (a refused resume names it)."""
    return DEFAULT_CORPUS if cfg.model == "gpt" else f"the {cfg.dataset} dataset"
