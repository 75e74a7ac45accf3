"""Models: each composes the launchers of webmp/ops.py into a training plan (webmp/plan.py's format)."""

from __future__ import annotations

from ..config import TrainConfig
from ..data import Dataset
from ..plan import Plan
from ..tilecache import TileTable
from .mlp import build_mlp_plan


def build_plan(
    cfg: TrainConfig, data: Dataset, path: str, tiles: TileTable | None = None
) -> tuple[Plan, bytes]:
    """The plan and its initial-contents blob for training `cfg` on `data` with prelude `path`
    ('native', 'emulated' or 'fp32'); matmul tile shapes from `tiles` (default: DEFAULT_TILES)."""
    if cfg.model in ("mlp", "mlp-ln"):
        return build_mlp_plan(cfg, data, path, tiles)
    raise ValueError(f"unknown model {cfg.model!r}")
