"""The quick tier of a page's plan (webmp/engine/tiers.py): twins of the first programs whose matmuls
use QUICK_TILES. A twin is the same dispatches on the same buffers but for its matmuls' kernels and
workgroup counts, and a step of it leaves every buffer with the bits a step of its program does
(the GPT and the default MLP on the shipped tables of lavapipe and SwiftShader)."""

from __future__ import annotations

import numpy as np
import pytest

from webmp.config import TrainConfig
from webmp.data.text import tokenize
from webmp.engine.adapters import LAVAPIPE, SWIFTSHADER
from webmp.engine.plan import FIRST_PROGRAMS
from webmp.engine.runtime import Runtime
from webmp.engine.tiers import QUICK_SUFFIX, QUICK_TILES, QuickTable, add_quick_tier
from webmp.engine.tiles import TileTable
from webmp.models import build_plan
from webmp.serve.page_data import training_data

GPT = TrainConfig(model="gpt", n_layer=2, d_model=16, n_head=2, context=8, batch_size=2)
MLP = TrainConfig(batch_size=16)


def corpus():
    rng = np.random.default_rng(3)
    return tokenize("".join(rng.choice(list("abcdefgh "), size=400)), "tiny", "test", "0")


def tiered(cfg, data, table, path="native"):
    plan, blob = build_plan(cfg, data, path, table)
    quick, _ = build_plan(cfg, data, path, QuickTable(table), dry=True)
    return plan, blob, add_quick_tier(plan, quick, FIRST_PROGRAMS)


@pytest.mark.parametrize("shipped", [LAVAPIPE, SWIFTSHADER], ids=["lavapipe", "swiftshader"])
def test_the_twins_differ_only_in_their_matmuls(shipped):
    plan, _, twins = tiered(GPT, corpus(), TileTable({}, None, shipped))
    assert twins == FIRST_PROGRAMS and plan["quick"] == {p: p + QUICK_SUFFIX for p in FIRST_PROGRAMS}
    kernels = {k["name"]: k for k in plan["kernels"]}
    for program, twin in plan["quick"].items():
        mine, theirs = plan["programs"][program], plan["programs"][twin]
        assert len(mine) == len(theirs)
        changed = 0
        for a, b in zip(mine, theirs, strict=True):
            assert a["bind"] == b["bind"]
            if a["kernel"] == b["kernel"]:
                assert a == b
                continue
            changed += 1
            ka, kb = kernels[a["kernel"]], kernels[b["kernel"]]
            assert (
                kb["name"].endswith(QUICK_SUFFIX)
                and ka["entry"] == kb["entry"]
                and ka["entry"].startswith("matmul")
            )
            assert {n: kb["constants"][n] for n in ("WG_X", "WG_Y", "TM", "TN")} == {
                n: QUICK_TILES[n] for n in ("WG_X", "WG_Y", "TM", "TN")
            }
            assert "B_PAIRS" not in kb["constants"] and "matmul_reg_a.wgsl" in kb["sources"]
        assert changed >= 10, program  # the GPT's step has ten matmul kernels, all of them changed
    # no twin for the evaluation, and no kernel that nothing runs
    used = {d["kernel"] for ds in plan["programs"].values() for d in ds}
    assert used == set(kernels)


def test_no_twin_where_the_tiles_are_the_quick_ones():
    plan, _, twins = tiered(MLP, training_data(MLP), QuickTable(TileTable()))
    assert twins == [] and "quick" not in plan


def test_a_twin_needs_the_same_buffers():
    data = training_data(MLP)
    plan, _ = build_plan(MLP, data, "native", TileTable({}, None, LAVAPIPE))
    other, _ = build_plan(MLP.model_copy(update={"batch_size": 8}), data, "native", dry=True)
    with pytest.raises(ValueError, match="other buffers"):
        add_quick_tier(plan, other, FIRST_PROGRAMS)


def run_steps(gpu, plan, blob, program, steps):
    rt = Runtime(plan, blob, gpu, first=[program])
    for _ in range(steps):
        rt.run(program)
    return {b["name"]: rt.read(b["name"]) for b in plan["buffers"]}


@pytest.mark.parametrize("model", ["gpt", "mlp"])
def test_a_twins_steps_are_its_programs_bits(gpu, model):
    """Three steps of train_step and of its twin from the same blob, each on a runtime of its own:
    every buffer (weights, optimizer state, activations, metrics, the lens's counts) the same bytes;
    the lens's program likewise."""
    cfg, data = (GPT, corpus()) if model == "gpt" else (MLP, training_data(MLP))
    table = TileTable.for_adapter(gpu.name, gpu.info)
    if table.shipped is None:
        table = TileTable({}, None, LAVAPIPE)
    plan, blob, twins = tiered(cfg, data, table)
    assert "train_step" in twins, "the shipped tiles are the quick ones here: nothing to compare"
    for program in twins:
        own = run_steps(gpu, plan, blob, program, 3)
        quick = run_steps(gpu, plan, blob, plan["quick"][program], 3)
        differ = [name for name in own if own[name] != quick[name]]
        assert differ == [], f"{program}: {differ}"
        assert np.frombuffer(own["state"], np.uint32).any()  # the steps ran
