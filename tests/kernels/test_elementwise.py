"""The elementwise layer kernels (webmp/ops/elementwise.py): standalone activations forward and
backward (act.wgsl: ReLU, GELU, SiLU, Tanh) and dropout (dropout.wgsl: its counter-based mask bit
for bit, the kept share, the scale, the backward's mask, the step's iteration) against their
numpy references on each storage path, at odd shapes (70 rows: two workgroups' words and more;
37 columns: the padding half; 44: none). How the bounds are derived: kernel_cases.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import FLAG_H_STORE, Cases, rand_h, rng_for, stored_bound

from webmp import ops
from webmp.engine.plan import PlanBuilder
from webmp.engine.runtime import default_gpu
from webmp.testing import reference as ref
from webmp.testing.probe import run_op
from webmp.testing.reference import U32, check_close

CASES = Cases()
kernel_case, run = CASES.case, CASES.run
ACTS = ["relu", "gelu", "silu", "tanh"]
SENTINEL = 7.0


def op(launcher, inputs, outputs, path, **params):
    return run_op(launcher, inputs, outputs, path=path, gpu=default_gpu(), **params)


def no_flags():
    return np.zeros(4, np.uint32)


# --- activations -------------------------------------------------------------------------------

ACT_NAMES = [f"act/{a}/70x37" for a in ACTS] + ["act/silu/66x44"]


def _act_inputs(name, path):
    rows, cols = map(int, name.split("/")[2].split("x"))
    rng = rng_for(name, path)
    X = rand_h(rng, (rows, cols), path, 3.0)
    # saturation (sigmoid's exp(-|x|) far below 1, tanh's clamp), zeros and tiny values
    special = [0.0, -0.0, 2.0**-20, -(2.0**-14), 9.5, -9.5, 12.0, -12.0, 30.0, -30.0, 100.0, -100.0]
    X.flat[rng.choice(X.size, len(special), replace=False)] = special
    return rows, cols, ref.round_h(X, path), rand_h(rng, (rows, cols), path)


for _n in ACT_NAMES:

    @kernel_case(_n)
    def _act_case(name, path):
        act = name.split("/")[1]
        rows, cols, X, dY = _act_inputs(name, path)
        size = dict(rows=rows, cols=cols, act=act)
        fwd = op(ops.act_fwd, {"X": X, "flags": no_flags()}, {"Y": ((rows, cols), "padded"), "flags": None},
                 path, **size)  # fmt: skip
        bwd = op(ops.act_bwd, {"X": X, "dY": dY, "flags": no_flags()},
                 {"dX": ((rows, cols), "padded"), "flags": None}, path, **size)  # fmt: skip
        return {"X": X, "dY": dY}, {"fwd": fwd, "bwd": bwd}


@pytest.mark.parametrize("name", ACT_NAMES)
def test_act_fwd(name, path):
    inp, out = run(name, path)
    act, X = name.split("/")[1], inp["X"]
    cols = X.shape[1]
    Y = out["fwd"]["Y"]
    exact = ref.act_fwd(X, act)
    check_close(Y[:, :cols], exact, stored_bound(exact, ref.act_fwd_error(X, act), path), name)
    if cols % 2:
        assert not Y[:, cols].any(), "padding stays zero"
    assert out["fwd"]["flags"][0] == 0


@pytest.mark.parametrize("name", ACT_NAMES)
def test_act_bwd(name, path):
    inp, out = run(name, path)
    act, X, dY = name.split("/")[1], inp["X"], inp["dY"]
    cols = X.shape[1]
    dX = out["bwd"]["dX"]
    g = ref.act_grad(X, act)
    exact = dY * g
    # dY * act'(X) in f32: act' within its bound, then one rounding
    f32_err = np.abs(dY) * ref.act_grad_error(X, act) * (1 + 2 * U32) + 2 * U32 * np.abs(exact)
    check_close(dX[:, :cols], exact, stored_bound(exact, f32_err, path), name)
    if cols % 2:
        assert not dX[:, cols].any(), "padding stays zero"
    assert out["bwd"]["flags"][0] == 0


def test_act_bwd_flags_overflow(path):
    """dY * act'(x) beyond the activation format (SiLU' and GELU' exceed 1 near x = 2) raises the
    store flag: past 65504 on the f16 paths, Inf on fp32 (SiLU' = 1.0998 at 2.4, GELU' = 1.129 at 1.5)."""
    big, limit = (3.3e38, np.finfo(np.float32).max) if path == "fp32" else (60000.0, ref.F16_MAX)
    dY = ref.round_h(np.full((3, 5), big), path)
    for act, x in (("silu", 2.4), ("gelu", 1.5)):
        X = ref.round_h(np.full((3, 5), x), path)
        assert ref.act_grad(X, act).min() * dY.min() > limit
        out = op(ops.act_bwd, {"X": X, "dY": dY, "flags": no_flags()}, {"dX": (3, 5), "flags": None}, path,
                 rows=3, cols=5, act=act)  # fmt: skip
        assert out["flags"][0] == FLAG_H_STORE, act


def _relaxed_require(monkeypatch, *names):
    """PlanBuilder.require_bytes without the exact-size check for the buffers `names` (an output one
    row longer than the kernel's range, to see that no thread writes past it)."""
    orig = PlanBuilder.require_bytes

    def require(self, entry, buffer, nbytes, what):
        if buffer not in names:
            orig(self, entry, buffer, nbytes, what)

    monkeypatch.setattr(PlanBuilder, "require_bytes", require)


def test_act_writes_only_its_rows(path, monkeypatch):
    rows, cols = 70, 37
    rng = rng_for("act_guard", path)
    X = rand_h(rng, (rows, cols), path)
    with pytest.raises(ValueError, match="act_fwd: buffer Y"):
        op(ops.act_fwd, {"X": X, "flags": no_flags(), "Y": np.zeros((rows + 1, cols))}, {"Y": None}, path,
           rows=rows, cols=cols, act="tanh")  # fmt: skip
    _relaxed_require(monkeypatch, "Y", "dX")
    extra = np.full((rows + 1, cols), SENTINEL)
    fwd = op(ops.act_fwd, {"X": X, "flags": no_flags(), "Y": extra}, {"Y": None}, path,
             rows=rows, cols=cols, act="tanh")  # fmt: skip
    assert (fwd["Y"][rows] == SENTINEL).all() and (fwd["Y"][:rows] != SENTINEL).all()
    bwd = op(ops.act_bwd, {"X": X, "dY": X, "flags": no_flags(), "dX": extra}, {"dX": None}, path,
             rows=rows, cols=cols, act="tanh")  # fmt: skip
    assert (bwd["dX"][rows] == SENTINEL).all()


def test_act_arguments_are_checked():
    pb = PlanBuilder("native")
    pb.h("X", 3, 5)
    pb.h("Y", 3, 5)
    with pytest.raises(ValueError, match="act_fwd: act 'none'"):
        ops.act_fwd(pb, "p", X="X", Y="Y", rows=3, cols=5, act="none")
    with pytest.raises(ValueError, match="act_bwd: act 'swish'"):
        ops.act_bwd(pb, "p", X="X", dY="Y", dX="Y", rows=3, cols=5, act="swish")
    with pytest.raises(ValueError, match="act_fwd: rows 0"):
        ops.act_fwd(pb, "p", X="X", Y="Y", rows=0, cols=5, act="relu")
    with pytest.raises(ValueError, match=r"act_fwd: buffer X .*\[3, 4\]"):
        ops.act_fwd(pb, "p", X="X", Y="Y", rows=3, cols=4, act="relu")


# --- dropout -----------------------------------------------------------------------------------

P, SEED = 0.3, 1234
DROP_ROWS, DROP_COLS = 70, 37
# (stream, iteration): two iterations of one stream, and another stream
DROP_DRAWS = [(0, 5), (0, 6), (3, 5)]


def _drop_x(path):
    """Inputs with no zeros (so the output's zeros are the mask), both signs."""
    rng = rng_for("dropout", path)
    X = rand_h(rng, (DROP_ROWS, DROP_COLS), path)
    return ref.round_h(np.where(np.abs(X) < 0.1, 0.5, X), path), rng


def _drop_params(stream, p=P):
    return dict(rows=DROP_ROWS, cols=DROP_COLS, p=p, seed=SEED, stream=stream)


@kernel_case("dropout/draws")
def _dropout_case(name, path):
    X, rng = _drop_x(path)
    dY = rand_h(rng, X.shape, path)
    out = {}
    for stream, it in DROP_DRAWS:
        inp = {"X": X, "state": {"iteration": it}, "flags": no_flags()}
        out[f"fwd/{stream}/{it}"] = op(ops.dropout_fwd, inp, {"Y": (X.shape, "padded"), "flags": None}, path,
                                       **_drop_params(stream))  # fmt: skip
    inp = {"dY": dY, "state": {"iteration": 5}, "flags": no_flags()}
    out["bwd"] = op(ops.dropout_bwd, inp, {"dX": (X.shape, "padded"), "flags": None}, path, **_drop_params(0))
    return {"X": X, "dY": dY}, out


def _dropout_bound(exact, path):
    """x * SCALE in f32: SCALE = 1 / (1 - p) rounded to f32 once, then one product; then the store."""
    return stored_bound(exact, 4.01 * U32 * np.abs(exact), path)


def test_dropout_mask_is_the_reference_bit_for_bit(path):
    inp, out = run("dropout/draws", path)
    X = inp["X"]
    for stream, it in DROP_DRAWS:
        got = out[f"fwd/{stream}/{it}"]
        keep = ref.dropout_keep(DROP_ROWS, DROP_COLS, P, SEED, stream, it)
        Y = got["Y"][:, :DROP_COLS]
        assert np.array_equal(Y != 0, keep), (
            f"stream {stream}, iteration {it}: {np.sum((Y != 0) != keep)} differ"
        )
        exact = ref.dropout(X, keep, P)
        check_close(Y, exact, _dropout_bound(exact, path), f"dropout {stream}/{it}")
        assert not got["Y"][:, DROP_COLS].any(), "padding stays zero"
        assert got["flags"][0] == 0


def test_dropout_keeps_one_minus_p(path):
    """The kept share of each draw is within 5 binomial sigmas of 1 - p, and two draws (another
    iteration, another stream) agree about as often as independent masks do: p^2 + (1 - p)^2."""
    _, out = run("dropout/draws", path)
    n = DROP_ROWS * DROP_COLS
    masks = {k: v["Y"][:, :DROP_COLS] != 0 for k, v in out.items() if k.startswith("fwd")}
    for k, m in masks.items():
        assert abs(m.sum() - n * (1 - P)) <= 5 * np.sqrt(n * P * (1 - P)), k
    base = masks["fwd/0/5"]
    agree_p = P**2 + (1 - P) ** 2
    for k in ("fwd/0/6", "fwd/3/5"):
        agree = np.sum(base == masks[k])
        assert not np.array_equal(base, masks[k]), f"{k}: the same mask"
        assert abs(agree - n * agree_p) <= 5 * np.sqrt(n * agree_p * (1 - agree_p)), (
            f"{k}: {agree} of {n} agree"
        )


def test_dropout_bwd_uses_the_forward_mask(path):
    inp, out = run("dropout/draws", path)
    keep = out["fwd/0/5"]["Y"][:, :DROP_COLS] != 0
    dY = inp["dY"]
    exact = ref.dropout(dY, keep, P)
    dX = out["bwd"]["dX"]
    check_close(dX[:, :DROP_COLS], exact, _dropout_bound(exact, path), "dropout backward")
    assert not dX[:, DROP_COLS].any() and out["bwd"]["flags"][0] == 0


def test_dropout_p0_is_the_identity_and_overflow_is_flagged(path):
    X, _ = _drop_x(path)
    inp = {"X": X, "state": {"iteration": 9}, "flags": no_flags()}
    same = op(ops.dropout_fwd, inp, {"Y": X.shape, "flags": None}, path, **_drop_params(0, p=0.0))
    assert np.array_equal(same["Y"], X.astype(np.float32)) and same["flags"][0] == 0
    big = ref.round_h(np.full((3, 5), 3e38 if path == "fp32" else 60000.0), path)
    inp = {"X": big, "state": {"iteration": 1}, "flags": no_flags()}
    out = op(
        ops.dropout_fwd, inp, {"Y": (3, 5), "flags": None}, path, rows=3, cols=5, p=0.5, seed=1, stream=0
    )
    assert out["flags"][0] == FLAG_H_STORE  # x * 2 beyond the format (all 15 dropped: 2^-15 odds)


def test_dropout_writes_only_its_rows(path, monkeypatch):
    X, _ = _drop_x(path)
    _relaxed_require(monkeypatch, "Y")
    extra = np.full((DROP_ROWS + 1, DROP_COLS), SENTINEL)
    inp = {"X": X, "state": {"iteration": 2}, "flags": no_flags(), "Y": extra}
    out = op(ops.dropout_fwd, inp, {"Y": None}, path, **_drop_params(0))
    assert (out["Y"][DROP_ROWS] == SENTINEL).all()
    keep = ref.dropout_keep(DROP_ROWS, DROP_COLS, P, SEED, 0, 2)
    assert np.array_equal(out["Y"][:DROP_ROWS] != 0, keep)


@pytest.mark.parametrize(
    ("p", "seed", "stream", "match"),
    [(1.0, 0, 0, "p = 1.0"), (-0.1, 0, 0, "p = -0.1"), (1 - 2**-34, 0, 0, "too close to 1"),
     (0.5, -1, 0, "seed -1"), (0.5, 0, 2**32, "stream 4294967296")],
)  # fmt: skip
def test_dropout_arguments_are_checked(p, seed, stream, match):
    pb = PlanBuilder("native")
    pb.h("X", 3, 5)
    pb.h("Y", 3, 5)
    with pytest.raises(ValueError, match=f"dropout_fwd: .*{match}"):
        ops.dropout_fwd(pb, "p", X="X", Y="Y", state="s", rows=3, cols=5, p=p, seed=seed, stream=stream)


def test_dropout_threshold():
    """keep iff bits >= p * 2^32: the threshold is its ceiling, exactly."""
    assert ref.dropout_threshold(0.0) == 0
    assert ref.dropout_threshold(0.5) == 2**31
    assert ref.dropout_threshold(0.1) == int(np.ceil(0.1 * 2**32))
    x = np.arange(1 << 16, dtype=np.uint32)
    assert len(np.unique(ref.lowbias32(x))) == len(x)  # a bijection


# --- references against torch ------------------------------------------------------------------


@pytest.mark.slow
def test_act_references_match_torch():
    torch = pytest.importorskip("torch")
    x = np.concatenate([np.linspace(-40, 40, 4001), [-1e-6, 0.0, 1e-6]])
    for act, fn in (("silu", torch.nn.functional.silu), ("tanh", torch.tanh),
                    ("gelu", lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
                    ("relu", torch.relu)):  # fmt: skip
        t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        y = fn(t)
        y.sum().backward()
        # atol: GELU's 1 + tanh(u) cancels for large negative x, in both (values ~1e-15 there)
        np.testing.assert_allclose(
            ref.act_fwd(x, act), y.detach().numpy(), rtol=1e-12, atol=1e-14, err_msg=act
        )
        got = ref.act_grad(x, act)
        want = t.grad.numpy()
        if act == "relu":  # torch's ReLU gradient at 0 is 0, as the kernel's
            assert np.array_equal(got, want)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14, err_msg=act)


# --- native and emulated f16 agree bit for bit ---------------------------------------------------

test_native_matches_emulated = CASES.native_matches_emulated()
