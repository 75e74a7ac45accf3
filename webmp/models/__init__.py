"""Models: each composes the launchers of webmp/ops into a training plan (webmp/engine/plan.py's format)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..data.tables import Dataset
from ..data.text import TextCorpus
from ..engine.plan import BufferSpec, Plan, SamplePlan
from ..engine.tiles import TileTable
from ..nn.gpt import gpt_names, gpt_network
from ..nn.mlp import mlp_names, mlp_network
from ..nn.network import Network
from .gpt import build_gpt_plan, build_gpt_sample_plan, gpt_param_shapes
from .mlp import build_mlp_plan
from .net import build_net_plan
from .net_sample import build_net_sample_plan
from .net_seq import build_token_net_plan


def build_plan(
    cfg: TrainConfig,
    data: Dataset | TextCorpus,
    path: str,
    tiles: TileTable | None = None,
    *,
    rank: int = 0,
    world: int = 1,
    dry: bool = False,
) -> tuple[Plan, bytes]:
    """The plan and its initial-contents blob for training `cfg` on `data` with prelude `path`
    ('native', 'emulated' or 'fp32'); matmul tile shapes from `tiles` (default: DEFAULT_TILES).
    The MLPs and the networks on a table take a Dataset, the GPT and the token networks a
    TextCorpus (the GPT's shape: build_gpt_plan's defaults).
    With `world` > 1: data-parallel rank `rank`'s plan (its `data_parallel` key says how to run it).
    dry: a dry run (PlanBuilder's), the same plan without initial contents (every buffer's init
    None, the blob empty): what plan_buffers reads."""
    if cfg.model in ("mlp", "mlp-ln"):
        if isinstance(data, TextCorpus):
            raise TypeError(f"model {cfg.model!r} trains on a Dataset, not a TextCorpus")
        return build_mlp_plan(cfg, data, path, tiles, rank, world, dry=dry)
    if cfg.model == "net" and cfg.trains_on_text:
        if not isinstance(data, TextCorpus):
            raise TypeError(f"a network with a token input trains on a TextCorpus, got {type(data).__name__}")
        return build_token_net_plan(cfg, data, path, tiles, rank, world, dry=dry)
    if cfg.model == "net":
        if isinstance(data, TextCorpus):
            raise TypeError("model 'net' with an image or vector input trains on a Dataset, not a TextCorpus")
        return build_net_plan(cfg, data, path, tiles, rank, world, dry=dry)
    if cfg.model == "gpt":
        if not isinstance(data, TextCorpus):
            raise TypeError(f"model 'gpt' trains on a TextCorpus, got {type(data).__name__}")
        return build_gpt_plan(cfg, data, path, tiles, rank=rank, world=world, dry=dry)
    raise ValueError(f"unknown model {cfg.model!r}")


def plan_buffers(
    cfg: TrainConfig,
    data: Dataset | TextCorpus,
    path: str,
    tiles: TileTable | None = None,
    rank: int = 0,
    world: int = 1,
) -> list[BufferSpec]:
    """The buffers build_plan(cfg, data, path, tiles, rank, world) declares (names, bytes,
    categories, shapes), from a dry run of the same code: no parameter is drawn and no blob built
    (their `init` is None), so that a config too large to build is sized in milliseconds."""
    return build_plan(cfg, data, path, tiles, rank=rank, world=world, dry=True)[0]["buffers"]


def sample_param_shapes(cfg: TrainConfig, vocab_size: int) -> dict[str, tuple[int, ...]]:
    """The parameters (names, shapes) a sampling plan of `cfg` takes: the gpt's by its names
    (gpt_param_shapes), a token network's by layer path; ValueError for a model that does not
    generate text."""
    if cfg.model == "gpt":
        return gpt_param_shapes(vocab_size, cfg.d_model, cfg.n_layer, cfg.context, cfg.tie_head)
    if cfg.model == "net" and cfg.model_spec is not None and cfg.model_spec.is_tokens:
        return {name: tuple(p.shape) for name, p in cfg.model_spec.param_shapes().items()}
    raise ValueError(f"model {cfg.model!r} on a table or images does not generate text")


def build_sample_plan(
    cfg: TrainConfig,
    vocab: Sequence[str],
    path: str,
    tiles: TileTable | None = None,
    *,
    params: dict[str, np.ndarray],
    **settings: Any,
) -> tuple[SamplePlan, bytes]:
    """The sampling plan of the gpt or a token network `cfg` with parameters `params`
    (sample_param_shapes) and vocabulary `vocab`; settings: prompt, tokens, temperature, seed,
    tokens_per_submit, kv_cache (webmp/models/net_sample.py)."""
    sample_param_shapes(cfg, len(vocab))  # refuses a model that does not generate text
    build = build_gpt_sample_plan if cfg.model == "gpt" else build_net_sample_plan
    return build(cfg, vocab, path, tiles, params=params, **settings)


def network_of(cfg: TrainConfig, shapes: Mapping[str, Sequence[int]]) -> tuple[Network, dict[str, str]]:
    """The network of layers `cfg` trains (a built-in model's: mlp_network, gpt_network, sized by
    its parameters' `shapes`) and {each parameter's layer path: the model's name for it}."""
    if cfg.model_spec is not None:
        return cfg.model_spec, {path: path for path in cfg.model_spec.param_shapes()}
    if cfg.model == "gpt":
        net = gpt_network(shapes["wte"][0], cfg.d_model, cfg.n_layer, cfg.n_head, cfg.context, cfg.tie_head)
        return net, gpt_names(cfg.n_layer, cfg.tie_head)
    last, layernorm = len(cfg.hidden), cfg.model == "mlp-ln"
    features, classes = shapes["W0"][0], shapes[f"W{last}"][1]
    return mlp_network(features, cfg.hidden, classes, cfg.act, layernorm), mlp_names(last, layernorm)
