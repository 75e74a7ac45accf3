"""Dynamic loss scaling through the real training step (small MLP, batch 8, digits).

Overflows are injected on the GPU: Inf or NaN written into train_x at a row the next batch
gathers, a loss scale so large that dlogits leave the f16 range, or a bit set in the flags word
the step's detection sites OR into. Every state transition is also checked against the numpy
rule (webmp.testing.reference.scaler_step) fed with the flags the step reported.
"""

from __future__ import annotations

import numpy as np
import pytest

from webmp.data.tables import batch_rows
from webmp.engine.state import decode_records, decode_state
from webmp.testing import reference as ref

FLAG_H_STORE, FLAG_MASTER_GRAD, FLAG_LOSS = 1, 2, 4
COUNTERS = [
    "scale",
    "growth_tracker",
    "hysteresis_left",
    "iteration",
    "opt_step",
    "data_pos",
    "skipped_total",
    "min_scale_events",
    "first_min_scale_iter",
    "apply",
    "found_inf",
]


class Trainer:
    """One plan's runtime with step-level helpers; checks each step against the reference rule."""

    def __init__(self, plan, rt, digits):
        self.plan, self.rt, self.digits = plan, rt, digits
        self.consts = next(k["constants"] for k in plan["kernels"] if k["entry"] == "scaler_step")

    def state(self) -> dict:
        return decode_state(self.rt.read("state"))

    def step(self) -> dict:
        """One train_step; returns its metrics record (log_every = 1: the ring holds just it)."""
        before = self.state()
        rec = decode_records(self.rt.run("train_step", read_metrics=True))[0]
        want, want_rec = ref.scaler_step(
            before, rec["found_inf"], [rec["grad_norm"] ** 2], [rec["loss"]] * 8, self.consts
        )
        got = self.state()
        assert {k: got[k] for k in COUNTERS} == {k: want[k] for k in COUNTERS}, (
            "state differs from the reference rule"
        )
        for k in ("step", "scale", "skipped", "found_inf", "min_scale_event"):
            assert rec[k] == want_rec[k], f"metrics {k}: {rec[k]} != {want_rec[k]}"
        return rec

    def snapshot(self) -> dict:
        """Bytes of every master weight, working copy and both moments."""
        names = [p[k] for p in self.plan["params"] for k in ("master", "copy", "m", "v") if p[k]]
        return {n: self.rt.read(n) for n in names}

    def step_with_bad_input(self, value) -> dict:
        """A step whose batch holds `value` in one feature of one row; train_x is restored after."""
        x = self.digits.train_x
        cfg = self.plan["config"]
        row = batch_rows(self.state()["data_pos"], cfg["batch_size"], len(x), cfg["seed"])[3]
        bad = x.copy()
        bad[row, 10] = value
        self.rt.write("train_x", bad.tobytes())
        try:
            return self.step()
        finally:
            self.rt.write("train_x", x.tobytes())

    def set_state(self, **fields) -> None:
        from webmp.testing.probe import state_words

        self.rt.write("state", state_words({**self.state(), **fields}).tobytes())


@pytest.fixture
def make(trainer, digits):
    """make(path, **config): a fresh small plan (conftest.SMALL: growth_interval 3, hysteresis 1)."""
    return lambda path, **cfg: Trainer(*trainer(path, **cfg), digits)


@pytest.mark.parametrize("bad", [np.inf, np.nan], ids=["inf", "nan"])
def test_overflow_skips_the_step(bad, f16_path, make):
    t = make(f16_path)
    t.step(), t.step()  # moments are non-zero from here on
    before, weights = t.state(), t.snapshot()
    rec = t.step_with_bad_input(bad)
    after = t.state()
    # Z0 stores a non-finite value (store site), it reaches the loss through GELU (loss site) and
    # the first layer's weight gradient (master-gradient site)
    assert rec["skipped"] == 1 and rec["found_inf"] == FLAG_H_STORE | FLAG_MASTER_GRAD | FLAG_LOSS
    assert after["scale"] == before["scale"] / 2 and after["growth_tracker"] == 0
    assert after["opt_step"] == before["opt_step"], "the optimizer step counter does not advance"
    assert (
        after["iteration"] == before["iteration"] + 1
        and after["skipped_total"] == before["skipped_total"] + 1
    )
    assert t.snapshot() == weights, "master weights, f16 copies and moments keep every bit"
    rec = t.step()  # a clean step applies again
    assert rec["skipped"] == 0 and t.state()["opt_step"] == before["opt_step"] + 1
    changed = t.snapshot()
    assert all(changed[n] != weights[n] for n in weights), "a clean step updates every tensor"


def test_store_site_without_loss_site(f16_path, make):
    """A loss scale of 2^24 puts dlogits = (p - onehot) * scale / B beyond 65504 while the loss
    stays finite: the store flag alone (with the gradients it poisons) skips the step."""
    t = make(f16_path)
    t.set_state(scale=2.0**24)
    rec = t.step()
    assert rec["skipped"] == 1 and rec["found_inf"] & FLAG_H_STORE and not rec["found_inf"] & FLAG_LOSS
    assert np.isfinite(rec["loss"]) and t.state()["scale"] == 2.0**23


@pytest.mark.parametrize("flag", [FLAG_H_STORE, FLAG_MASTER_GRAD, FLAG_LOSS])
def test_each_flag_alone_skips(flag, f16_path, make):
    """Whichever site raises its bit, the scaler skips; the flags are cleared for the next step."""
    t = make(f16_path)
    t.step()
    weights = t.snapshot()
    t.rt.write("flags", np.array([flag, 0, 0, 0], np.uint32).tobytes())
    rec = t.step()
    assert rec["skipped"] == 1 and rec["found_inf"] == flag and t.snapshot() == weights
    assert t.step()["skipped"] == 0


def test_growth_interval_doubles_the_scale(f16_path, make):
    t = make(f16_path)
    s = t.state()["scale"]
    assert [t.step()["scale"] for _ in range(3)] == [s] * 3  # records hold the scale each step used
    assert t.state()["scale"] == 2 * s and t.state()["growth_tracker"] == 0
    t.step(), t.step()
    t.step_with_bad_input(np.inf)  # an overflow restarts the count: 2 clean steps were not enough
    assert t.state()["scale"] == s and t.state()["growth_tracker"] == 0
    t.step(), t.step()
    assert t.state()["scale"] == s
    t.step()
    assert t.state()["scale"] == 2 * s


def test_hysteresis_tolerates_one_overflow(f16_path, make):
    t = make(f16_path, hysteresis=2)
    s = t.state()["scale"]
    assert t.step_with_bad_input(np.inf)["skipped"] == 1
    assert t.state()["scale"] == s and t.state()["hysteresis_left"] == 1, "the first overflow only skips"
    t.step_with_bad_input(np.nan)
    assert t.state()["scale"] == s / 2, "the second one backs off"
    for _ in range(3):
        t.step()
    assert t.state()["scale"] == s and t.state()["hysteresis_left"] == 2, "growth restores the tolerance"


def test_min_scale_floor(f16_path, make):
    t = make(f16_path, init_scale=2.0, min_scale=1.0)
    rec = t.step_with_bad_input(np.inf)
    assert rec["min_scale_event"] == 0 and t.state()["scale"] == 1.0
    it = t.state()["iteration"]
    rec = t.step_with_bad_input(np.inf)
    st = t.state()
    assert rec["skipped"] == 1 and rec["min_scale_event"] == 1
    assert st["scale"] == 1.0 and st["min_scale_events"] == 1 and st["first_min_scale_iter"] == it + 1
    t.step_with_bad_input(np.nan)
    st = t.state()
    assert st["min_scale_events"] == 2 and st["first_min_scale_iter"] == it + 1, "the first event is kept"


def test_fp32_reports_but_never_skips(make):
    t = make("fp32")
    t.step()
    rec = t.step_with_bad_input(np.inf)
    st = t.state()
    assert rec["found_inf"] == FLAG_H_STORE | FLAG_MASTER_GRAD | FLAG_LOSS and rec["skipped"] == 0
    assert st["scale"] == 1.0 and st["opt_step"] == 2 and st["skipped_total"] == 0


def test_bf16_skips_an_overflowing_step_without_a_scale(make):
    """bf16 has no loss scale (1 throughout), but its overflow check skips the step as mixed's does:
    no weight or moment changes, the optimizer's step counter stays, skipped_total counts it."""
    t = make("bf16")
    t.step(), t.step()
    before, weights = t.state(), t.snapshot()
    rec = t.step_with_bad_input(np.inf)
    after = t.state()
    assert rec["skipped"] == 1 and rec["found_inf"] == FLAG_H_STORE | FLAG_MASTER_GRAD | FLAG_LOSS
    assert after["scale"] == before["scale"] == 1.0 and after["skipped_total"] == 1
    assert after["opt_step"] == before["opt_step"] and t.snapshot() == weights
    rec = t.step()
    assert rec["skipped"] == 0 and t.state()["opt_step"] == before["opt_step"] + 1


def test_overflowing_evaluation_leaves_training_alone(f16_path, make):
    """Program 'eval' stores f16 activations too, and an overflow there must not reach the next
    training step: its bit goes to its own word (eval_flags), not the flags the scaler reads.
    (It went into the training flags, and nothing cleared them: the next step was skipped.)"""
    t = make(f16_path)
    t.step()
    x = t.digits.test_x
    w0 = np.frombuffer(t.rt.read("W0"), np.float32)[: x.shape[1] * 16].reshape(x.shape[1], 16)
    # f16-representable inputs whose first hidden unit is 6e4 * sum |W0[:, 0]| ~ 1e5: overflow
    huge = np.tile(6e4 * np.where(w0[:, 0] >= 0, 1, -1), (len(x), 1)).astype(np.float32)
    t.rt.write("test_x", huge.tobytes())
    try:
        t.rt.run("eval")
    finally:
        t.rt.write("test_x", x.tobytes())
    before = t.snapshot()
    rec = t.step()
    assert rec["skipped"] == 0 and rec["found_inf"] == 0, "a clean step after an overflowing evaluation"
    assert t.snapshot() != before
    assert np.frombuffer(t.rt.read("eval_flags"), np.uint32)[0] == FLAG_H_STORE, "the evaluation overflowed"


@pytest.mark.parametrize("model", ["mlp", "mlp-ln"])
def test_eval_program_keeps_to_its_flags(model, digits):
    """No dispatch of 'eval' binds the training flags, none of 'train_step' binds eval_flags."""
    from webmp.config import TrainConfig
    from webmp.models import build_plan

    plan, _ = build_plan(TrainConfig(model=model, hidden=[16, 9]), digits, "emulated")
    binds = {p: {b for d in plan["programs"][p] for b in d["bind"]} for p in ("train_step", "eval")}
    assert "flags" in binds["train_step"] and "eval_flags" not in binds["train_step"]
    assert "eval_flags" in binds["eval"] and "flags" not in binds["eval"]
