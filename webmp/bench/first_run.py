"""The GPT's step as a first run takes it against the tuned one, side by side in one process (issue 28:
a user who never tunes should get close to a tuned step).

"first run": the tiles `webmp train` builds with on a machine whose tune cache is empty, the shipped
table of the adapter's class (webmp.engine.adapters; first-use tuning skips a measured class table
and tunes, within its small budget, where there is none). "tuned": the tune cache's table for this
adapter (with `webmp bench --tune`, the one this run tuned). Each step model is compiled and run
once, then both are timed in alternating blocks of steps, so that a slow minute of a shared
machine hits both alike; a figure is the fastest block's mean step.
"""

from __future__ import annotations

from typing import Any

from ..config import TrainConfig
from ..engine.adapters import shipped_tiles
from ..engine.runtime import Runtime
from ..engine.tiles import TileTable, plan_classes
from ..models import build_plan
from .step import _wall

TARGET_RATIO = 1.25  # issue 28: the first run's step within 1.25x the tuned one


def first_run_vs_tuned(
    gpu, config: dict, data, path: str, blocks: int = 5, steps: int = 5, log=print
) -> dict[str, Any]:
    cfg = TrainConfig(**{"steps": 10**6, **config})
    tables = {
        "first_run": TileTable({}, gpu.name, shipped_tiles(gpu.info)),
        "tuned": TileTable.for_adapter(gpu.name, gpu.info),
    }
    runs: dict[str, Runtime] = {}
    tiles: dict[str, str] = {}
    for name, table in tables.items():
        plan, blob = build_plan(cfg, data, path, table)
        rt = Runtime(plan, blob, gpu, first=["train_step"])
        rt.run("train_step")  # compiled and warm before any timing
        rt.sync()
        runs[name], tiles[name] = rt, table.describe(plan_classes(plan))
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(blocks):
        for name, rt in runs.items():

            def block(rt=rt) -> None:
                for _ in range(steps):
                    rt.run("train_step")

            times[name].append(_wall(block, rt) / steps)
    ms = {name: 1000 * min(t) for name, t in times.items()}
    out = {
        "model": cfg.model,
        "path": path,
        "batch_size": cfg.batch_size,
        "context": cfg.context,
        "blocks": blocks,
        "steps_per_block": steps,
        "first_run_ms": ms["first_run"],
        "tuned_ms": ms["tuned"],
        "ratio": ms["first_run"] / ms["tuned"],
        "first_run_tiles": tiles["first_run"],
        "tuned_tiles": tiles["tuned"],
        "target_ratio": TARGET_RATIO,
    }
    log(
        f"  first run {out['first_run_ms']:.1f} ms a step, tuned {out['tuned_ms']:.1f} ms: "
        f"{out['ratio']:.2f}x (target <= {TARGET_RATIO}x)"
    )
    return out
