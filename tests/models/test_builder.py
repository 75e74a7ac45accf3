"""The models' plans as data, built without a GPU: ModelBuilder's checks, and the dry run
(webmp.models.plan_buffers) that sizes a plan from its declarations."""

from __future__ import annotations

import tracemalloc

import pytest

from webmp.config import TrainConfig
from webmp.data.text import load_training_data
from webmp.engine.tiles import WEIGHTS_KEY, TileTable
from webmp.models import build_plan, plan_buffers
from webmp.models.common import ModelBuilder

SMALL = {
    "mlp": dict(model="mlp", hidden=[30, 20]),
    "mlp-ln": dict(model="mlp-ln", hidden=[30, 20], batch_size=32),
    "gpt": dict(model="gpt", n_layer=2, d_model=32, n_head=2, context=16, batch_size=4, val_tokens=1000),
    "gpt-untied": dict(model="gpt", n_layer=1, d_model=24, n_head=2, context=8, batch_size=4, tie_head=False),
}


def test_a_plan_without_the_lens_is_refused_by_name():
    mb = ModelBuilder(TrainConfig(model="mlp"), "native")
    mb.bookkeeping(mb.local_batch)
    with pytest.raises(ValueError, match="no histograms program: call ModelBuilder.histograms"):
        mb.finish([2, 2], {"result_buffer": "eval_result", "test_rows": 0, "loss_buffer": None})


@pytest.mark.parametrize("weights", ["as_stored", "transposed"])
@pytest.mark.parametrize("rank,world", [(0, 1), (1, 2)])
@pytest.mark.parametrize("path,precision", [("native", "mixed"), ("emulated", "mixed"), ("fp32", "fp32")])
@pytest.mark.parametrize("model", list(SMALL))
def test_a_dry_run_is_the_plan_without_its_contents(model, path, precision, rank, world, weights):
    """The same buffers (names, sizes, categories, shapes, in order), kernels and programs; only the
    initial contents are left out."""
    cfg = TrainConfig(**SMALL[model], precision=precision)
    data = load_training_data(cfg)
    tiles = TileTable({WEIGHTS_KEY: {"form": weights}})
    plan, blob = build_plan(cfg, data, path, tiles, rank=rank, world=world)
    dry, dry_blob = build_plan(cfg, data, path, tiles, rank=rank, world=world, dry=True)
    assert dry_blob == b"" and all(b["init"] is None for b in dry["buffers"]) and blob
    assert dry == {**plan, "buffers": [{**b, "init": None} for b in plan["buffers"]], "blob_bytes": 0}
    assert plan_buffers(cfg, data, path, tiles) == build_plan(cfg, data, path, tiles, dry=True)[0]["buffers"]


def test_a_dry_run_draws_no_parameters():
    """A 4096-wide MLP's weight matrix is 64 MiB in f32 (128 MiB as drawn, in float64): the dry run
    sizes it without allocating it, or any other array of its size."""
    cfg = TrainConfig(model="mlp", hidden=[4096, 4096], precision="fp32")
    data = load_training_data(cfg)
    tracemalloc.start()
    try:
        buffers = {b["name"]: b for b in plan_buffers(cfg, data, "fp32")}
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert buffers["W1"]["bytes"] == buffers["m_W1"]["bytes"] == 4096 * 4096 * 4
    assert buffers["h_W1"]["bytes"] == 4096 * 4096 * 4 and buffers["h_W1"]["category"] == "working_weights"
    assert peak < 4 * 2**20, f"the dry run allocated {peak} bytes"
