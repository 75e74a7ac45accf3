"""`--precision fp8` in the MLP's training step against the float64 model that quantises at the same
points (webmp.testing.reference.mlp_loss_and_grads with fp8=): after a few steps have set each
slot's scale, one more step's gradients, from the masters, scales and batch it starts from.

The reference rounds where the engine stores (bf16) and quantises where it casts, with the GPU's
own scale exponents; every other operation is exact. What can differ: an f32 matmul sum within
f32 error of a bf16 or fp8 rounding boundary may round the other way: one fp8 step (2^-3 of an
E4M3 value, 2^-2 of an E5M2 one) of one term of a sum over the 8 rows of the batch, up to ~1 % of
the gradient's largest entry. Measured on lavapipe: normwise errors 0 and 3e-8 (no flip at all),
against 0.10-0.12 for the same step modelled without the casts; TOL = 2^-6 allows a flip or two
and still fails a step that quantises elsewhere, in another format, or not at all."""

from __future__ import annotations

import numpy as np
import pytest

from webmp.data.tables import batch_rows
from webmp.engine.state import decode_state
from webmp.testing import reference as ref

TOL = 2.0**-6
HIDDEN = [100, 37]


def read(rt, name, shape):
    return np.frombuffer(rt.read(name), np.float32)[: int(np.prod(shape))].reshape(shape)


def normwise(got: dict, want: dict) -> float:
    return max(float(np.abs(got[k] - want[k]).max() / np.abs(want[k]).max()) for k in want)


@pytest.mark.parametrize("keep_ends,loss_scale", [(True, "off"), (False, "off"), (True, "dynamic")])
def test_fp8_step_matches_the_quantised_reference(keep_ends, loss_scale, trainer, digits):
    plan, rt = trainer(
        "bf16", precision="fp8", hidden=HIDDEN, fp8_keep_ends=keep_ends, fp8_loss_scale=loss_scale,
        init_scale=1024.0,
    )  # fmt: skip
    n_linear = len(HIDDEN) + 1
    fp8_layers = list(range(1, n_linear - 1)) if keep_ends else list(range(n_linear))
    assert plan["fp8"]["layers"] == [f"layers.{2 * l}" for l in fp8_layers]  # Linear, GELU, Linear, ...
    for _ in range(3):
        rt.run("train_step")
    params = {p["name"]: read(rt, p["master"], p["shape"]).astype(np.float64) for p in plan["params"]}
    e = read(rt, "fp8_scale", (3 * len(fp8_layers),)).view(np.int32)
    assert (e != 0).all(), f"every slot's scale has moved from 1 after 3 steps: {e}"
    state = decode_state(rt.read("state"))
    cfg = plan["config"]
    rows = batch_rows(state["data_pos"], cfg["batch_size"], len(digits.train_x), cfg["seed"])
    scale = decode_state(rt.read("state"))["scale"]
    assert (scale >= 1024.0) == (loss_scale == "dynamic") and scale >= 1.0, "a loss scale only if asked for"
    rt.run("train_step")
    grads = {p["name"]: read(rt, p["grad"], p["shape"]).astype(np.float64) for p in plan["params"]}
    x, y = digits.train_x[rows], digits.train_y[rows]
    scales = {l: tuple(int(v) for v in e[3 * i : 3 * i + 3]) for i, l in enumerate(fp8_layers)}
    _, want = ref.mlp_loss_and_grads(params, x, y, store="bf16", fp8=scales, scale=scale)
    _, unquantised = ref.mlp_loss_and_grads(params, x, y, store="bf16", scale=scale)
    err, contrast = normwise(grads, want), normwise(grads, unquantised)
    assert err <= TOL, f"normwise error {err:.3g} against the quantised model"
    assert contrast > 4 * TOL, f"the unquantised model is as close ({contrast:.3g}): are the casts there?"


def test_evaluation_records_no_amax(trainer):
    """An evaluation casts at the current scales but records nothing, so it changes no later step."""
    plan, rt = trainer("bf16", precision="fp8", hidden=HIDDEN)
    rt.run("train_step")
    before = [rt.read(n) for n in ("fp8_amax", "fp8_history", "fp8_scale", "fp8_cursor")]
    rt.run("eval")
    after = [rt.read(n) for n in ("fp8_amax", "fp8_history", "fp8_scale", "fp8_cursor")]
    assert before == after
    assert not np.frombuffer(before[0], np.uint32).any(), "amax is reset after each step's update"


def test_fp8_refuses_what_it_cannot_quantise(digits):
    """A model with no Linear layer to quantise is a clear error; a data-parallel fp8 plan names
    its amax buffer (the ranks' max is taken before the update)."""
    from webmp.config import TrainConfig
    from webmp.models import build_plan

    with pytest.raises(ValueError, match="found no layer to quantise"):
        build_plan(TrainConfig(precision="fp8", hidden=[16]), digits, "bf16")
    plan, _ = build_plan(TrainConfig(precision="fp8", batch_size=8), digits, "bf16", rank=0, world=2)
    assert plan["data_parallel"]["amax"] == "fp8_amax"
