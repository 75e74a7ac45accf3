"""What a run would hold, before any GPU work: `webmp train --dry-run` (the config checked, the data
read and fitted to the model, the plan's memory by category; a network's layer table) and
`webmp model SPEC.json` (a network's layer table alone)."""

from __future__ import annotations

from ..config import TrainConfig
from ..data.tables import Dataset, load_table
from ..data.text import load_training_data
from ..engine.plan import memory_by_category
from ..engine.tiles import TileTable, plan_classes
from ..engine.tune_cache import cache_path, load_cache
from ..models import build_plan, plan_buffers
from ..models.net import check_data_fits
from ..models.summary import LayerTable, layer_table, size
from ..nn.network import Network


def network_table(net: Network, batch_size: int, data_file: str | None = None) -> LayerTable:
    """`webmp model`: the table of `net` at `batch_size`, on `data_file` when given (which must fit it:
    ValueError naming both)."""
    data = None
    if data_file is not None:
        data = load_table(data_file)
        check_data_fits(net, data)
    return layer_table(net, batch_size, data)


def dry_run_report(cfg: TrainConfig) -> str:
    """`webmp train --dry-run`'s text: the layer table of a network, else the plan's bytes by category."""
    data = load_training_data(cfg)
    if cfg.model_spec is not None:
        if isinstance(data, Dataset):
            check_data_fits(cfg.model_spec, data)
        return layer_table(cfg.model_spec, cfg.batch_size, data).format()
    path = "fp32" if cfg.precision == "fp32" else "native"
    by_category = memory_by_category(plan_buffers(cfg, data, path))
    lines = [f"{k.replace('_', ' ')}: {size(v)}" for k, v in by_category.items()]
    total = f"total: {size(sum(by_category.values()))} on the GPU"
    head = f"model {cfg.model}, {cfg.precision}, batch {cfg.batch_size}:"
    return "\n".join([head, *lines, total, tiles_report(cfg, data, path)])


def tiles_report(cfg: TrainConfig, data, path: str) -> str:
    """Where the run's matmul tiles will come from (the adapter is opened only by the run): the rule,
    and for each adapter the tune cache holds, how many of the run's shape classes it has."""
    lines = [
        "matmul tiles, per shape class, chosen when the run opens its adapter: the tune cache's entry "
        "(`webmp bench --tune`; `webmp train` tunes the missing ones first unless --no-tune), else the "
        "shipped table of the adapter's class (webmp.engine.adapters: lavapipe, SwiftShader, a rule for "
        "GPUs), else the defaults"
    ]
    cache = load_cache()
    for adapter in sorted(cache):
        table = TileTable.for_adapter(adapter)
        classes = plan_classes(build_plan(cfg, data, path, table, dry=True)[0])
        have = sum(c in table.by_class for c in classes)
        lines.append(
            f"  tune cache {cache_path()}: {adapter}: {have} of the run's {len(classes)} shape classes"
        )
    if not cache:
        lines.append(f"  tune cache {cache_path()}: empty")
    return "\n".join(lines)
