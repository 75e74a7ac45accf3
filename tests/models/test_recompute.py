"""Activation recomputation (--recompute blocks, the GPT): the blocks share block 0's activation
buffers (all but the residual stream) and each block but the last runs its forward pass again
right before its backward pass, the same dispatches from the same kept input. Every kernel is
deterministic (fixed reduction orders, no float atomics), so the recomputed values are the forward
pass's bits and the run is the run without recomputation, bit for bit: records, weights, moments,
evaluation."""

from __future__ import annotations

import json

import pytest

from webmp.config import TrainConfig
from webmp.data.text import load_text
from webmp.models import build_plan
from webmp.train.loop import Trainer

GPT = dict(model="gpt", n_layer=3, n_head=2, d_model=16, context=8, batch_size=4, steps=8, log_every=4,
           checkpoint_every=0, warmup=2, val_tokens=64, init_scale=2.0**24, growth_interval=3)  # fmt: skip


FP8_FUSED = dict(precision="fp8", fp8_loss_scale="dynamic", attention="fused")  # its casts recorded twice


SLOW = pytest.mark.slow  # ~25 s each here: the fast tier keeps the tied case


@pytest.mark.parametrize(
    "tie_head, grad_accum, more",
    [
        (True, 1, {}),
        pytest.param(False, 1, {}, marks=SLOW),
        pytest.param(True, 2, {}, marks=SLOW),
        pytest.param(True, 1, FP8_FUSED, marks=SLOW),
    ],
    ids=["tied", "untied", "tied-accumulating", "fp8-fused-attention"],
)
def test_recomputed_blocks_train_the_same_bits(tmp_path, tie_head, grad_accum, more):
    runs = {}
    for recompute in ("none", "blocks"):
        cfg = TrainConfig(**GPT, tie_head=tie_head, recompute=recompute, grad_accum=grad_accum, **more)
        t = Trainer(cfg, out=tmp_path / recompute, progress=False, log=None)
        runs[recompute] = (t, t.run(), t.run_dir.read_metrics())
    (a, sa, ra), (b, sb, rb) = runs["none"], runs["blocks"]
    # the scale backs off (the flags are the same too); fp8's casts saturate, bf16 has f32's range
    assert any(r["skipped"] for r in ra) or more, "no step skipped"
    assert json.dumps(ra) == json.dumps(rb), "the records differ"  # (NaN norms of skipped steps too)
    names = [p[k] for p in a.plan["params"] for k in ("master", "copy", "m", "v") if p[k]] + ["state"]
    for n in names:
        assert a.runtime.read(n) == b.runtime.read(n), f"{n} differs"
    assert sa["val_loss"] == sb["val_loss"] and sa["test_accuracy"] == sb["test_accuracy"]
    # the blocks but the last run their forward pass again
    assert len(b.plan["programs"]["train_step"]) > len(a.plan["programs"]["train_step"])


def test_recompute_keeps_one_blocks_activations():
    """The default GPT's shape with 4 blocks: blocks 1..3's own activations (LayerNorm outputs and
    statistics, qkv, P, O, the MLP's hidden z) are not in the plan; the residual stream is."""
    corpus = load_text(None)
    plans = {
        r: build_plan(TrainConfig(model="gpt", n_layer=4, recompute=r), corpus, "native", dry=True)[0]
        for r in ("none", "blocks")
    }
    bufs = {r: {b["name"]: b for b in p["buffers"]} for r, p in plans.items()}
    own = ("a", "ln1_stats", "qkv", "P", "O", "m", "ln2_stats", "z")
    dropped = {f"{n}{l}" for n in own for l in range(1, 4)}
    assert set(bufs["none"]) - set(bufs["blocks"]) == dropped
    assert {f"x_mid{l}" for l in range(4)} | {f"x{l}" for l in range(4)} <= set(bufs["blocks"])
    act = {r: p["memory"]["activations"] for r, p in plans.items()}
    assert act["none"] - act["blocks"] == sum(bufs["none"][n]["bytes"] for n in dropped)
    print(f"default GPT, 4 blocks: activations {act['none']} B, with recompute blocks {act['blocks']} B")


@pytest.mark.slow  # ~23 s here
def test_a_resume_may_switch_recomputation_on(tmp_path):
    """recompute changes no bit, so a resumed run may change it (it is not resume-locked): 4 steps
    without, 4 resumed with, are the 8 steps without."""
    whole = Trainer(TrainConfig(**GPT), out=tmp_path / "whole", progress=False, log=None)
    whole.run()
    part = Trainer(TrainConfig(**GPT), out=tmp_path / "part", progress=False, log=None)
    part.run(stop_after=4)
    part.checkpoint()
    resumed = Trainer(
        TrainConfig(**GPT, recompute="blocks"), resume=tmp_path / "part", progress=False, log=None
    )
    assert resumed.step == 4 and resumed.plan["config"]["recompute"] == "blocks"
    resumed.run()
    assert json.dumps(resumed.run_dir.read_metrics()) == json.dumps(whole.run_dir.read_metrics())
    for p in whole.plan["params"]:
        assert whole.runtime.read(p["master"]) == resumed.runtime.read(p["master"]), p["name"]
