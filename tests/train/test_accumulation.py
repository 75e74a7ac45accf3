"""Gradient accumulation (--grad-accum N): N micro-batches of batch_size rows per optimizer step
against one batch of N x batch_size rows, an overflow in one micro-batch, resume mid-run.

Why the curves agree to f32 reassociation and no closer: micro-batch k gathers rows k*B .. k*B+B-1
of the step's N*B (state.micro), every per-row value of the forward and backward passes (losses,
activations, activation gradients: products summed over features, never over rows) is the one the
large batch computes for that row, and the loss rows sit in the same order for the scaler's sum. So
step 1's loss, and every step's overflow flags, verdict and loss scale, are the same bits. What
differs is the order of the sums over rows in the weight and bias gradients: N partial sums of B
rows added in f32 instead of one sum of N*B, a reassociation whose relative error is a few 2^-24
of the sum of |terms| (the gradient norms differ in the last bits). Adam turns that into updates
that differ by about as much relative to lr, and the f16 working copies round most of those away;
the losses then drift apart by what that changes: measured at most ~1e-6 over these runs, checked
within 1e-4.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from webmp.cli import main as cli
from webmp.config import TrainConfig
from webmp.data.tables import batch_rows
from webmp.engine.state import decode_records, decode_state
from webmp.train.loop import Trainer

FLAG_H_STORE, FLAG_MASTER_GRAD, FLAG_LOSS = 1, 2, 4
# a loss scale that overflows f16 at first (skips and back-offs), then grows every 3 clean steps
SCALING = dict(init_scale=2.0**24, growth_interval=3)
MLP = dict(hidden=[16], log_every=4, checkpoint_every=0, warmup=2, **SCALING)
GPT = dict(model="gpt", n_layer=1, n_head=2, d_model=16, context=8, log_every=4, checkpoint_every=0, warmup=2,
           val_tokens=64, lr=2e-3, **SCALING)  # fmt: skip
LOSS_TOLERANCE = 1e-4


def trained(tmp_path, name, **kw):
    t = Trainer(TrainConfig(**kw), out=tmp_path / name, progress=False, log=None)
    t.run()
    return t, t.run_dir.read_metrics()


@pytest.mark.parametrize("model", ["mlp", "gpt"])
def test_four_micro_batches_of_16_train_as_one_batch_of_64(tmp_path, model):
    base = {**(MLP if model == "mlp" else GPT), "steps": 12}
    _, one = trained(tmp_path, "one", **base, batch_size=64)
    t, four = trained(tmp_path, "four", **base, batch_size=16, grad_accum=4)
    assert [r["step"] for r in four] == list(range(12)), "steps are optimizer steps"
    for key in ("scale", "skipped", "found_inf"):
        assert [r[key] for r in four] == [r[key] for r in one], f"{key} differs"
    skipped = [r["skipped"] for r in one]
    assert 0 < sum(skipped) < 12 and len({r["scale"] for r in one}) > 2, "the scale backs off and grows"
    assert four[0]["loss"] == one[0]["loss"], "step 1: the same weights, rows and order of the loss sum"
    diffs = [abs(a["loss"] - b["loss"]) for a, b in zip(one, four, strict=True)]
    assert max(diffs) <= LOSS_TOLERANCE, diffs
    state = t.read_state()
    assert state["micro"] == 0 and state["iteration"] == 12
    assert state["data_pos"] == 12 * 64 * (8 if model == "gpt" else 1), "a step consumes 4 x 16 examples"


def test_dropout_draws_the_large_batchs_masks(tmp_path):
    """A network with dropout: micro-batch k's rows draw the masks of rows 16k .. 16k + 15 of the
    batch of 64 (dropout.wgsl's MICRO_ELEMS), so step 1's loss is the same bits as 1 x 64's (with
    every micro-batch drawing rows 0 .. 15's masks it is not) and the curves agree as above."""
    layers = [{"type": "linear", "out": 32}, {"type": "relu"}, {"type": "dropout", "p": 0.3}]
    spec = {"input": [64], "layers": [*layers, {"type": "linear", "out": 10}]}
    base = {**MLP, "model_spec": spec, "steps": 8}
    del base["hidden"]
    _, one = trained(tmp_path, "one", **base, batch_size=64)
    _, four = trained(tmp_path, "four", **base, batch_size=16, grad_accum=4)
    assert four[0]["loss"] == one[0]["loss"]
    assert [r["scale"] for r in four] == [r["scale"] for r in one]
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(one, four, strict=True)) <= LOSS_TOLERANCE


def snapshot(plan, rt) -> dict:
    """Bytes of every master weight, working copy and both moments."""
    names = [p[k] for p in plan["params"] for k in ("master", "copy", "m", "v") if p[k]]
    return {n: rt.read(n) for n in names}


@pytest.mark.parametrize("micro", [0, 2, 3])
def test_an_overflow_in_one_micro_batch_skips_the_whole_step(micro, trainer, digits):
    """An Inf in one row of micro-batch `micro` (of 4, 8 rows each): the whole step is skipped
    (no micro-batch's gradient is applied), the scale halves once, the step's 32 rows are consumed,
    and the next step applies again."""
    plan, rt = trainer("emulated", grad_accum=4)
    state = lambda: decode_state(rt.read("state"))  # noqa: E731
    step = lambda: decode_records(rt.run("train_step", read_metrics=True))[0]  # noqa: E731
    assert step()["skipped"] == 0 and step()["skipped"] == 0  # moments are non-zero from here on
    before, weights = state(), snapshot(plan, rt)
    x = digits.train_x
    row = batch_rows(before["data_pos"], 32, len(x), plan["config"]["seed"])[micro * 8 + 3]
    bad = x.copy()
    bad[row, 10] = np.inf
    rt.write("train_x", bad.tobytes())
    try:
        rec = step()
    finally:
        rt.write("train_x", x.tobytes())
    after = state()
    assert rec["skipped"] == 1 and rec["found_inf"] == FLAG_H_STORE | FLAG_MASTER_GRAD | FLAG_LOSS
    assert after["scale"] == before["scale"] / 2 and after["growth_tracker"] == 0
    assert after["skipped_total"] == before["skipped_total"] + 1 and after["opt_step"] == before["opt_step"]
    assert after["iteration"] == before["iteration"] + 1 and after["data_pos"] == before["data_pos"] + 32
    assert after["micro"] == 0
    assert snapshot(plan, rt) == weights, "master weights, f16 copies and moments keep every bit"
    submits, readbacks = rt.submits, rt.readbacks
    rec = step()
    assert (rt.submits, rt.readbacks) == (submits + 1, readbacks + 1), "one submit, one read a step"
    assert rec["skipped"] == 0 and rec["found_inf"] == 0 and state()["scale"] == after["scale"]
    assert state()["opt_step"] == before["opt_step"] + 1


def test_resume_with_accumulation_is_exact(tmp_path):
    kw = dict(MLP, steps=14, batch_size=8, grad_accum=3)
    whole, ma = trained(tmp_path, "whole", **kw)
    part = Trainer(TrainConfig(**kw), out=tmp_path / "part", progress=False, log=None)
    part.run(stop_after=7)  # not a multiple of log_every: resume mid-interval
    part.checkpoint()
    resumed = Trainer(TrainConfig(**kw), resume=tmp_path / "part", progress=False, log=None)
    assert resumed.step == 7
    resumed.run()
    names = [p[k] for p in whole.plan["params"] for k in ("master", "copy", "m", "v") if p[k]] + ["state"]
    for n in names:
        assert whole.runtime.read(n) == resumed.runtime.read(n), f"buffer {n} differs after resume"
    assert resumed.run_dir.read_metrics() == ma


def test_memory_is_one_micro_batchs_activations():
    """The default GPT's plan at 4 x 16 windows keeps the activations of 16 (plus the step's f32
    loss rows) and one more f32 copy of the gradients (the step's sums), against 1 x 64."""
    from webmp.data.text import load_text
    from webmp.models import build_plan

    corpus = load_text(None)
    mem = {
        (b, n): build_plan(TrainConfig(model="gpt", batch_size=b, grad_accum=n), corpus, "native", dry=True)[
            0
        ]["memory"]
        for b, n in ((16, 1), (16, 4), (64, 1))
    }
    loss_rows = 4 * 64 * 64  # f32 [4 x 16 windows x context 64]
    assert mem[16, 4]["activations"] == mem[16, 1]["activations"] + loss_rows
    assert mem[16, 4]["gradients"] == 2 * mem[16, 1]["gradients"] == 2 * mem[64, 1]["gradients"]
    assert mem[64, 1]["activations"] > 3.5 * mem[16, 4]["activations"]
    print({k: (v["activations"], v["gradients"]) for k, v in mem.items()})


def test_cli_names_the_accumulation_in_the_log_and_summary(tmp_path, capsys):
    out = tmp_path / "cli"
    flags = ["--steps", "4", "--hidden", "16", "--batch-size", "8", "--grad-accum", "2", "--log-every", "2"]
    assert cli(["train", *flags, "--out", str(out)]) == 0
    assert "gradient accumulation: 2 micro-batches of 8 an optimizer step (effective batch 16)" in (
        capsys.readouterr().out
    )
    s = json.loads((out / "summary.json").read_text())
    assert s["micro_batches"] == 2 and s["effective_batch"] == 16 and s["steps"] == 4


def test_the_steps_rows_must_fit_the_gpus_data_position():
    """data_pos advances by the step's rows (all its micro-batches'): a 32-bit counter."""
    TrainConfig(steps=2**16 - 1, batch_size=2**10, grad_accum=2**6)
    with pytest.raises(ValidationError, match=r"steps x rows a step \(65536 x 65536\) must stay below 2\^32"):
        TrainConfig(steps=2**16, batch_size=2**10, grad_accum=2**6)
    with pytest.raises(ValidationError, match="grad_accum must be positive"):
        TrainConfig(grad_accum=0)
    with pytest.raises(ValidationError, match="grad_accum must be at most 256"):
        TrainConfig(grad_accum=257)


def test_fp8_accumulates_one_amax_per_step(tmp_path):
    """fp8: each micro-batch's casts record into the step's amax, so 4 x 16 sets the scales 1 x 64
    sets (the max over the same rows) and the curves agree as the f16 ones do."""
    base = {**GPT, "steps": 8, "precision": "fp8", "fp8_amax_history": 4}
    one_t, one = trained(tmp_path, "one", **base, batch_size=64)
    four_t, four = trained(tmp_path, "four", **base, batch_size=16, grad_accum=4)
    assert four[0]["loss"] == one[0]["loss"]
    diffs = [abs(a["loss"] - b["loss"]) for a, b in zip(one, four, strict=True)]
    assert max(diffs) <= LOSS_TOLERANCE, diffs
    assert one_t.runtime.read("fp8_scale") == four_t.runtime.read("fp8_scale")
