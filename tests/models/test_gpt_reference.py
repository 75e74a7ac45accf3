"""The float64 GPT reference (webmp.testing.reference.gpt_loss_and_grads) checked against itself: every
gradient against central finite differences of the loss, the loss against an independent
-log softmax of the logits, causality, the store=... rounding model, and gpt_init / GPT_DECAY.
numpy only, no GPU.

Finite differences: the loss is smooth (GELU tanh, LayerNorm with eps, softmax), so the central
difference with step h errs by h^2 |f'''| / 6 (truncation) plus about eps64 |loss| / h (rounding
of the two loss values). With h = 1e-5, |loss| ~ 2 and third derivatives of order 1..100 that is
< 1e-8 absolute, while the gradients checked are of order 1e-2..1 per parameter (the test
parameters are drawn large enough, std 0.3..0.5, that every path carries signal): a relative error
below 1e-6 (per parameter: max |fd - g| / max |g|) leaves a wide margin (the worst seen is 2e-8,
wte), and a hand-derived backward formula with a wrong term misses it by many orders.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from webmp.testing import reference as ref

V, D, N_HEAD, N_LAYER, T, B, TMAX = 7, 6, 2, 2, 5, 2, 6
STEP = 1e-5
REL_TOL = 1e-6


def make_case(tie_head: bool, seed: int = 0):
    """Parameters with every entry random (biases, LN gains and shifts too) and a batch whose
    targets include NO_LABEL rows."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in ref.gpt_param_shapes(V, D, N_LAYER, TMAX, tie_head).items():
        if name.startswith(("ln1_g", "ln2_g", "lnf_g")):
            params[name] = 1.0 + 0.3 * rng.standard_normal(shape)
        elif len(shape) == 2:
            params[name] = 0.5 * rng.standard_normal(shape)
        else:
            params[name] = 0.3 * rng.standard_normal(shape)
    idx = rng.integers(0, V, (B, T))
    targets = rng.integers(0, V, (B, T)).astype(np.int64)
    targets[0, 1] = targets[1, 4] = targets[1, 0] = ref.NO_LABEL
    return params, idx, targets


def loss_of(params, idx, targets, tie_head, **kw):
    loss, _, _ = ref.gpt_loss_and_grads(
        params, idx, targets, n_layer=N_LAYER, n_head=N_HEAD, tie_head=tie_head, grads=False, **kw
    )
    return loss


def fd_grads(params, idx, targets, tie_head, **kw):
    out = {}
    for name, p in params.items():
        gp = np.zeros_like(p)
        for i in np.ndindex(p.shape):
            old = p[i]
            p[i] = old + STEP
            lp = loss_of(params, idx, targets, tie_head, **kw)
            p[i] = old - STEP
            lm = loss_of(params, idx, targets, tie_head, **kw)
            p[i] = old
            gp[i] = (lp - lm) / (2 * STEP)
        out[name] = gp
    return out


def rel_err(g, fd):
    return float(np.abs(g - fd).max() / max(np.abs(fd).max(), 1e-300))


def worst(grads, fds):
    return max((rel_err(grads[n], fds[n]), n) for n in fds)


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def case(request):
    tie = request.param
    params, idx, targets = make_case(tie, seed=1 + tie)
    loss, grads, cache = ref.gpt_loss_and_grads(
        params, idx, targets, n_layer=N_LAYER, n_head=N_HEAD, tie_head=tie
    )
    return {
        "tie": tie,
        "params": params,
        "idx": idx,
        "targets": targets,
        "loss": loss,
        "grads": grads,
        "cache": cache,
        "fd": fd_grads(params, idx, targets, tie),
    }


def test_every_gradient_matches_finite_differences(case):
    grads, fds = case["grads"], case["fd"]
    assert set(grads) == set(case["params"])
    for name in fds:
        assert grads[name].shape == case["params"][name].shape, name
        if name == "wpe":  # rows T.. of the table are unused: exactly zero both ways
            assert (grads[name][T:] == 0).all() and (fds[name][T:] == 0).all()
        assert np.abs(fds[name]).max() > 1e-4, f"{name}: no signal to check"
        assert rel_err(grads[name], fds[name]) < REL_TOL, (name, rel_err(grads[name], fds[name]))


def test_finite_difference_check_detects_one_wrong_entry(case):
    """The comparison is sharp: one gradient entry off by 1e-4 of its parameter's largest gradient
    (a missing small term would do that) fails it, in every parameter tried."""
    for name in ["wte", "wpe", "Wqkv0", "bqkv1", "ln1_g0", "W21", "lnf_b"]:
        g = {n: v.copy() for n, v in case["grads"].items()}
        flat = g[name].reshape(-1)
        flat[len(flat) // 3] += 1e-4 * np.abs(case["fd"][name]).max()
        assert rel_err(g[name], case["fd"][name]) > REL_TOL, name
        assert worst(g, case["fd"])[0] > REL_TOL


def test_loss_is_mean_cross_entropy_of_the_logits(case):
    logits = case["cache"]["logits"]
    labels = case["targets"].reshape(-1)
    assert logits.shape == (B * T, V)
    valid = labels != ref.NO_LABEL
    nll = [
        -math.log(math.exp(row[y]) / sum(math.exp(v) for v in row))
        for row, y in zip(logits[valid], labels[valid], strict=True)
    ]
    assert case["loss"] == pytest.approx(sum(nll) / len(nll), rel=1e-12)
    # counted overrides the divisor, as softmax_xent's
    loss20 = loss_of(case["params"], case["idx"], case["targets"], case["tie"], counted=20)
    assert loss20 == pytest.approx(sum(nll) / 20, rel=1e-12)


def test_logits_recomputed_directly(case):
    """The head: logits = LNf(x) @ wte^T when tied, @ Whead + bhead otherwise."""
    p, c = case["params"], case["cache"]
    xf, _ = ref.layernorm_fwd(c["x_final"], p["lnf_g"], p["lnf_b"])
    want = xf @ p["wte"].T if case["tie"] else xf @ p["Whead"] + p["bhead"]
    np.testing.assert_allclose(c["logits"], want, rtol=1e-12, atol=1e-12)


def test_causal(case):
    """Changing the token at position t changes no logit at positions < t (and does change t's)."""
    p, tie = case["params"], case["tie"]
    base = case["cache"]["logits"].reshape(B, T, V)
    for t in range(T):
        idx = case["idx"].copy()
        idx[:, t] = (idx[:, t] + 3) % V
        _, _, c = ref.gpt_loss_and_grads(
            p, idx, case["targets"], n_layer=N_LAYER, n_head=N_HEAD, tie_head=tie, grads=False
        )
        lg = c["logits"].reshape(B, T, V)
        np.testing.assert_array_equal(lg[:, :t], base[:, :t])
        assert np.abs(lg[:, t] - base[:, t]).max() > 1e-6


def test_attn_scale_and_loss_scale(case):
    p, idx, y, tie = case["params"], case["idx"], case["targets"], case["tie"]
    kw = {"n_layer": N_LAYER, "n_head": N_HEAD, "tie_head": tie}
    d = D // N_HEAD
    loss1, _, _ = ref.gpt_loss_and_grads(p, idx, y, attn_scale=1 / math.sqrt(d), **kw)
    assert loss1 == case["loss"]
    loss2, _, _ = ref.gpt_loss_and_grads(p, idx, y, attn_scale=0.25, **kw)
    assert loss2 != case["loss"]
    loss3, g3, _ = ref.gpt_loss_and_grads(p, idx, y, loss_scale=1024.0, **kw)
    assert loss3 == case["loss"]
    for n in g3:
        np.testing.assert_allclose(g3[n], 1024.0 * case["grads"][n], rtol=1e-12, atol=0)


@pytest.mark.parametrize("path", ["native", "fp32"])
def test_store_rounding_model(path):
    """With store=path the stored values are representable in the activation format, and the
    loss and gradients stay close to the exact ones (f16: about 1e-2 relative at most)."""
    tie = True
    params, idx, y = make_case(tie, seed=5)
    kw = {"n_layer": N_LAYER, "n_head": N_HEAD, "tie_head": tie}
    loss, g, _ = ref.gpt_loss_and_grads(params, idx, y, **kw)
    loss_h, gh, c = ref.gpt_loss_and_grads(params, idx, y, store=path, **kw)
    dt = np.float32 if path == "fp32" else np.float16
    stored = [c["x0"], c["xf"], c["dlogits"], c["dxf"], c["dx0"]]
    for lc in c["layers"]:
        stored += [lc[k] for k in ("a", "qkv", "P", "O", "x_mid", "m", "z", "h", "x")]
        stored += [lc[k] for k in ("dx_out", "dz", "dm", "dx_mid", "dO", "dS", "dqkv", "da")]
    for v in stored:
        np.testing.assert_array_equal(v.astype(dt).astype(np.float64), v)
    # S and logits are f32 buffers: not rounded to f16
    assert not np.array_equal(c["layers"][0]["S"].astype(dt).astype(np.float64), c["layers"][0]["S"])
    tol = 1e-5 if path == "fp32" else 2e-2
    assert loss_h == pytest.approx(loss, rel=tol)
    for n in g:
        assert rel_err(gh[n], g[n]) < tol, n
    assert loss_h != loss


def test_gpt_init():
    rng = np.random.default_rng(0)
    n_layer, D_ = 3, 64
    p = ref.gpt_init(50, D_, n_layer, 4, 32, rng, tie_head=False)
    assert set(p) == set(ref.gpt_param_shapes(50, D_, n_layer, 32, False))
    assert all(v.dtype == np.float32 for v in p.values())
    assert p["Wqkv1"].shape == (D_, 3 * D_) and p["W10"].shape == (D_, 4 * D_)
    assert p["W22"].shape == (4 * D_, D_) and p["Whead"].shape == (D_, 50)
    assert abs(p["W10"].std() - 0.02) < 0.002 and abs(p["wte"].std() - 0.02) < 0.003
    assert abs(p["W21"].std() - 0.02 / math.sqrt(2 * n_layer)) < 0.001
    assert abs(p["Wo0"].std() - 0.02 / math.sqrt(2 * n_layer)) < 0.002
    assert (p["ln1_g0"] == 1).all() and (p["lnf_b"] == 0).all() and (p["bqkv2"] == 0).all()
    tied = ref.gpt_init(50, D_, n_layer, 4, 32, np.random.default_rng(0), tie_head=True)
    assert "Whead" not in tied and "bhead" not in tied
    with pytest.raises(ValueError):
        ref.gpt_init(50, 10, 1, 4, 32, rng, tie_head=True)


def test_decay_set():
    shapes = ref.gpt_param_shapes(V, D, 12, TMAX, False)
    decayed = {n for n in shapes if ref.gpt_decays(n)}
    assert decayed == {n for n, s in shapes.items() if len(s) == 2}  # matrices, embeddings too
    assert ref.gpt_decays("W111") and ref.gpt_decays("Wqkv10") and not ref.gpt_decays("b111")
    assert not ref.gpt_decays("ln1_g0") and not ref.gpt_decays("Wx")
