"""The plans of --zero 1 (webmp/models/zero.py), built dry, no GPU: who owns what, what a rank drops,
and that the ranks' buffers add up to the unsharded plan's. The training itself (bit-identical to
the unsharded run, the gathered checkpoint, resuming on any N) is tests/train/test_mpi.py's."""

from __future__ import annotations

import math

import pytest

from webmp.config import TrainConfig
from webmp.models import build_plan
from webmp.models.zero import shard_owners
from webmp.train.loop import load_training_data

MLP = {"model": "mlp", "hidden": [32, 48], "batch_size": 24}  # splits over 2 and 3 ranks


def plans(cfg: TrainConfig, world: int) -> list[dict]:
    data = load_training_data(cfg)
    return [build_plan(cfg, data, "native", None, rank=r, world=world, dry=True)[0] for r in range(world)]


def test_owners_balance_largest_first():
    shape = lambda *s: {"shape": list(s), "copy": "h" if len(s) == 2 else None}  # noqa: E731
    params = [shape(10), shape(64, 32), shape(32), shape(32, 48), shape(48)]
    assert shard_owners(params, 2) == [1, 0, 1, 1, 1]  # 64x32 alone on rank 0: the largest
    assert shard_owners(params, 3) == [2, 0, 2, 1, 2]
    assert shard_owners(params, 1) == [0] * 5


@pytest.mark.parametrize("world", [2, 3])
def test_the_ranks_hold_the_unsharded_state_between_them(world):
    cfg = TrainConfig(**MLP, zero=1)
    sharded = plans(cfg, world)
    plain = plans(cfg.model_copy(update={"zero": 0}), world)[0]
    assert plain["data_parallel"]["zero"] is None
    whole = plain["checkpoint_buffers"]
    params = plain["params"]
    shared = {p["copy"] for p in params if p["copy"]} | {p["master"] for p in params if not p["copy"]}
    for r, plan in enumerate(sharded):
        zero = plan["data_parallel"]["zero"]
        assert zero["checkpoint_buffers"] == whole
        held = {b["name"] for b in plan["buffers"]}
        assert held.isdisjoint(b["name"] for b in zero["absent"])
        assert set(whole) <= held | {b["name"] for b in zero["absent"]}
        owned = {n for p, o in zip(params, zero["owners"], strict=True) if o == r for n in (p["m"], p["v"])}
        assert {n for n in held if n.startswith(("m_", "v_"))} == owned  # the moments: its own only
        assert shared <= held  # what the passes read: every rank
        assert plan["programs"]["train_stats"] and "train_update" in plan["programs"]
        assert (
            zero["optimizer_bytes_unsharded"]
            == plain["memory"]["master_weights"] + plain["memory"]["optimizer_state"]
        )
    # every moment on exactly one rank; the optimizer's bytes add up (the f32-read masters counted
    # on every rank)
    moments = [n for plan in sharded for n in plan["checkpoint_buffers"] if n.startswith(("m_", "v_"))]
    assert sorted(moments) == sorted(n for p in params for n in (p["m"], p["v"]))
    replicated = sum(4 * math.prod(p["shape"]) for p in params if not p["copy"])  # the biases' masters
    total = sum(plan["data_parallel"]["zero"]["optimizer_bytes"] for plan in sharded)
    assert (
        total
        == plain["memory"]["master_weights"] + plain["memory"]["optimizer_state"] + (world - 1) * replicated
    )


def test_one_rank_has_nothing_to_shard():
    (plan,) = plans(TrainConfig(**MLP, zero=1), 1)
    assert "data_parallel" not in plan and "train_stats" not in plan["programs"]
