"""Gradients of the whole MLP from the engine's training step against a float64 numpy model.

One train_step runs on a fresh plan; the g_* buffers then hold the gradients of the initial
weights on the first batch (webmp.data.tables.batch_rows(0, ...)), multiplied by the loss scale; the
optimizer reads them but does not change them.

Errors are normwise per tensor, max |got - want| / max |want|: gradients are batch sums of mixed
signs, so entries that nearly cancel have no meaningful elementwise relative error.
- fp32 vs float64: about six f32 stages (matmul sums of <= 64 terms, dot_error(64) ~ 8e-6 each,
  tanh good to 2^-18): TOL_F32 = 2^-14, an eighth of one f16 rounding, so any f16 rounding sneaking
  into the fp32 path fails it.
- mixed vs float64: any gradient sits downstream of at most 8 stores in f16 (input, weight
  copies, pre-activation, activation on load, LayerNorm output, dlogits, deltas), each off by
  < 2 U16 relative: TOL_MIXED = 16 U16 = 2^-7 (first order).
Against the same model rounded where the engine stores (reference store=path) mixed agrees to
~2e-7 on lavapipe, but that is no portable bound: an f32 result within f32 error of an f16 rounding
boundary may round the other way on another adapter (one ulp, 2^-10, of one batch term), so
whether each rounding happens is tested per kernel instead (test_matmul_act_on_load_rounds).
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import stored_bound

from webmp.data.tables import batch_rows
from webmp.engine.plan import unpack_h
from webmp.engine.state import decode_state
from webmp.testing import reference as ref
from webmp.testing.reference import check_close

TOL_F32 = 2.0**-14
TOL_MIXED = 16 * ref.U16
MODELS = [("mlp", "gelu"), ("mlp-ln", "relu")]


def step_gradients(plan, rt, digits):
    """(initial master weights, batch x, batch y, loss scale, gradients / scale, step loss)."""

    def read(name, shape):
        return np.frombuffer(rt.read(name), np.float32)[: int(np.prod(shape))].reshape(shape)

    params = {p["name"]: read(p["master"], p["shape"]).astype(np.float64) for p in plan["params"]}
    scale = decode_state(rt.read("state"))["scale"]
    rt.run("train_step")
    grads = {p["name"]: read(p["grad"], p["shape"]).astype(np.float64) / scale for p in plan["params"]}
    loss = decode_state(rt.read("state"))["loss"]
    cfg = plan["config"]
    rows = batch_rows(0, cfg["batch_size"], len(digits.train_x), cfg["seed"])
    return params, digits.train_x[rows], digits.train_y[rows], scale, grads, loss


def worst_relative(got: dict, want: dict) -> dict:
    """Per tensor: max |got - want| / max |want| (normwise: gradients mix signs, so elementwise
    relative errors of entries that cancel to ~0 say nothing)."""
    return {k: float(np.abs(got[k] - want[k]).max() / np.abs(want[k]).max()) for k in want}


# Widths that are not multiples of any workgroup size (64 columns a colsum / layernorm_wgrad
# workgroup, 256 a grad_stats one) nor of a matmul tile: a grid rounded down in the plan leaves
# columns 64 .. 99 of the first layer's bias (and LayerNorm) gradients unwritten. conftest.SMALL's
# [16] fits in one workgroup everywhere and could not tell.
HIDDEN = {"16": [16], "100-37": [100, 37]}


@pytest.mark.parametrize("hidden", list(HIDDEN))
@pytest.mark.parametrize("model,act", MODELS)
def test_gradients(model, act, hidden, path, trainer, digits):
    plan, rt = trainer(path, model=model, act=act, hidden=HIDDEN[hidden])
    params, x, y, scale, grads, loss = step_gradients(plan, rt, digits)
    ln = model == "mlp-ln"
    loss64, g64 = ref.mlp_loss_and_grads(params, x, y, act=act, ln=ln)
    assert set(grads) == set(g64)
    assert scale == (1.0 if path == "fp32" else plan["config"]["init_scale"])
    tol = TOL_F32 if path == "fp32" else TOL_MIXED
    errors = worst_relative(grads, g64)
    assert max(errors.values()) <= tol, f"{path} {model}: normwise errors {errors} > {tol:.3g}"
    assert abs(loss - loss64) <= tol * loss64, f"{path} {model}: loss {loss} != {loss64}"


def test_update_matches_adamw(path, trainer):
    """The first train_step's AdamW update of every parameter against webmp.testing.reference.adamw on the
    gradients the step left (bounds: reference.adamw_error), with HIDDEN["100-37"]: W1 [100, 37]
    has an odd column count, so adamw_copy's padded-row path runs next to its flat one (W0
    [64, 100], W2 [37, 10]) and to adamw (the biases). Working copies are the new masters stored
    in the activation format, and the odd matrix's padding halves stay 0. The same config as a
    test_gradients case, so the runtime is already compiled in this file."""
    plan, rt = trainer(path, model="mlp", act="gelu", hidden=HIDDEN["100-37"])

    def read(name, n):
        return np.frombuffer(rt.read(name), np.float32)[:n].astype(np.float64)

    sizes = {p["name"]: int(np.prod(p["shape"])) for p in plan["params"]}
    before = {p["name"]: [read(p[k], sizes[p["name"]]) for k in ("master", "m", "v")] for p in plan["params"]}
    rt.run("train_step")
    state = decode_state(rt.read("state"))
    assert state["apply"] == 1, "the first step is applied"
    kernels = {k["name"]: k for k in plan["kernels"]}
    updates = {
        d["bind"][1]: kernels[d["kernel"]]
        for d in plan["programs"]["train_step"]
        if kernels[d["kernel"]]["entry"] in ("adamw", "adamw_copy")
    }  # binding 1 is P
    odd = [p for p in plan["params"] if p["copy"] and p["shape"][1] % 2]
    assert [p["name"] for p in odd] == ["W1"] and "COLS" in updates[odd[0]["master"]]["constants"]
    for p in plan["params"]:
        name, n = p["name"], sizes[p["name"]]
        consts = updates[p["master"]]["constants"]
        P, Mo, V = before[name]
        G = read(p["grad"], n)
        want = ref.adamw(P, G, Mo, V, state, consts)
        m_err, v_err, p_err = ref.adamw_error(P, G, Mo, V, state, consts)
        got = [read(p[k], n) for k in ("master", "m", "v")]
        for what, g, w, e in zip(("P", "Mo", "V"), got, want, (p_err, m_err, v_err), strict=True):
            check_close(g, w, e, f"{path} {name} {what}")
        if p["copy"]:
            rows, cols = p["shape"]
            Wh = unpack_h(rt.read(p["copy"]), rows, cols + cols % 2, path)
            exact, err = want[0].reshape(rows, cols), p_err.reshape(rows, cols)
            check_close(Wh[:, :cols], exact, stored_bound(exact, err, path), f"{path} {name} copy")
            assert not Wh[:, cols:].any(), f"{path} {name}: the padding halves stay 0"
