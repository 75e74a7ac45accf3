"""The row and column kernels (webmp/ops/rows.py: column sums, LayerNorm forward, backward and weight
gradient in both row forms, RMSNorm's likewise, softmax cross-entropy and its flags; and
transpose_h) against their numpy references on each storage path, at odd shapes. How the bounds
are derived: kernel_cases.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import FLAG_H_STORE, FLAG_LOSS, Cases, rand_h, rng_for, softmax_run, stored_bound

from webmp import ops
from webmp.engine.plan import PlanBuilder
from webmp.engine.runtime import default_gpu
from webmp.testing import reference as ref
from webmp.testing.probe import run_op
from webmp.testing.reference import U32, check_close, dot_error

# Every kernel run is a registered case, cached per path (kernel_cases.Cases).
CASES = Cases()
kernel_case, run = CASES.case, CASES.run


# --- column sums, layernorm --------------------------------------------------------------------


@kernel_case("colsum/13x37")
@kernel_case("colsum/3x131")
def _colsum_case(name, path):
    M, N = map(int, name.split("/")[1].split("x"))
    G = rand_h(rng_for(name, path), (M, N), path)
    return {"G": G}, run_op(ops.colsum, {"G": G}, {"out": (N,)}, M=M, N=N, path=path, gpu=default_gpu())


@pytest.mark.parametrize("name", ["colsum/13x37", "colsum/3x131"])
def test_colsum(name, path):
    inp, out = run(name, path)
    G = inp["G"]
    check_close(out["out"], ref.colsum(G), dot_error(len(G)) * np.abs(G).sum(0), name)


# odd rows and columns (padding halves on both sides), one element, more blocks than a workgroup
TRANSPOSE_NAMES = ["transpose_h/5x7", "transpose_h/1x1", "transpose_h/6x4", "transpose_h/70x131"]


@kernel_case("transpose_h/5x7")
@kernel_case("transpose_h/1x1")
@kernel_case("transpose_h/6x4")
@kernel_case("transpose_h/70x131")
def _transpose_case(name, path):
    rows, cols = map(int, name.split("/")[1].split("x"))
    rng = rng_for(name, path)
    X = rand_h(rng, (rows, cols), path)
    # f16 subnormals (2^-24 .. 2^-15) and a negative zero: bits that a conversion could change
    special = np.array([2.0**-24, -(2.0**-20), 3 * 2.0**-16, -0.0])
    X.flat[rng.choice(X.size, min(X.size, 4), replace=False)] = special[: min(X.size, 4)]
    out = run_op(
        ops.transpose_h, {"X": X}, {"Y": ((cols, rows), "padded")}, rows=rows, cols=cols, path=path,
        gpu=default_gpu(),
    )  # fmt: skip
    return {"X": X}, out


@pytest.mark.parametrize("name", TRANSPOSE_NAMES)
def test_transpose_h_moves_the_bits(name, path):
    inp, out = run(name, path)
    X = np.asarray(inp["X"], np.float32)
    rows, cols = X.shape
    Y = out["Y"]
    assert Y.shape == (cols, rows + rows % 2)
    want = np.zeros(Y.shape, np.float32)
    want[:, :rows] = X.T
    assert np.array_equal(Y.view(np.uint32), want.view(np.uint32)), (
        f"{name}: {np.count_nonzero(Y.view(np.uint32) != want.view(np.uint32))} words differ"
    )


LN_NAMES = ["layernorm/5x1", "layernorm/5x37", "layernorm/3x131"]


def _ln_inputs(name, path):
    M, N = map(int, name.split("/")[1].split("x"))
    rng = rng_for(name, path)
    Z = rand_h(rng, (M, N), path, 2.0) + ref.round_h(0.5, path)  # a mean away from 0
    return (
        M,
        N,
        rng,
        {
            "Z": ref.round_h(Z, path),
            "gamma": (1 + 0.2 * rng.standard_normal(N)).astype(np.float32),
            "beta": (0.2 * rng.standard_normal(N)).astype(np.float32),
        },
    )


def _bits(out: dict) -> dict:
    """Every output as its raw 32-bit patterns (h outputs are unpacked to f32 exactly)."""

    def raw(v):
        return np.ascontiguousarray(v, np.float32 if np.asarray(v).dtype.kind == "f" else None).view(
            np.uint32
        )

    return {k: raw(v) for k, v in out.items()}


def _ln_forms(launcher, inp, outputs, path, M, N):
    """Both row-kernel forms on the same inputs: asserts every output is bit-identical, returns one."""
    wg, th = (
        run_op(launcher, inp, outputs, M=M, N=N, path=path, gpu=default_gpu(), rows=r) for r in ops.ROW_FORMS
    )
    for k in wg:
        a, b = _bits({k: wg[k]})[k], _bits({k: th[k]})[k]
        assert np.array_equal(a, b), f"{k}: the thread form differs at {np.count_nonzero(a != b)} entries"
    return wg


# N = 1, 37 (odd: the padding half), 131 (66 words > 64: a lane takes two), M = 70 > 64 rows (the
# thread form's second workgroup partly past the end)
@pytest.mark.parametrize(
    "name", [pytest.param(LN_NAMES[0], marks=pytest.mark.slow), *LN_NAMES[1:], "layernorm/70x130"]
)
def test_layernorm_thread_form_bit_identical(name, path):
    """rows="thread" (a thread a row, the workgroup tree run serially) gives the workgroup form's
    bits: Y, stats and flags forward, dZ and flags backward."""
    M, N, rng, inp = _ln_inputs(name, path)
    inp = {**inp, "flags": np.zeros(4, np.uint32)}
    fwd = _ln_forms(
        ops.layernorm_fwd, inp, {"Y": ((M, N), "padded"), "stats": (M, 2), "flags": None}, path, M, N
    )
    bwd_inp = {
        "dY": rand_h(rng, (M, N), path),
        "Z": inp["Z"],
        "stats": fwd["stats"],
        "gamma": inp["gamma"],
        "flags": inp["flags"],
    }
    _ln_forms(ops.layernorm_bwd, bwd_inp, {"dZ": ((M, N), "padded"), "flags": None}, path, M, N)


@pytest.mark.parametrize("name", ["add_layernorm/1x128", "add_layernorm/5x37", "add_layernorm/70x131"])
def test_add_layernorm_is_add_then_layernorm(name, path):
    """layernorm_fwd with `add` (add_layernorm_fwd.wgsl; the sampler's row program: a residual add
    and the next LayerNorm in one dispatch) leaves the bits of add_h then layernorm_fwd of the same
    row form: the sum in Z, Y, stats, flags; a sum of 65504 (saturated f16, overflow to the check)
    in a word's low or high half raises the flag from the add alone (the LayerNorm's values fit)."""
    M, N, rng, inp = _ln_inputs(name, path)
    A = rand_h(rng, (M, N), path, 2.0)
    flags = np.zeros(4, np.uint32)
    gpu = default_gpu()
    Z = inp["Z"]
    for col in (None, 0, 1):  # no overflow, then a saturated sum in a word's low, high half
        overflow = col is not None
        if overflow and path == "fp32":
            continue  # no f16 range on the fp32 path
        inp["Z"] = Z.copy()
        if col is not None:
            inp["Z"][0, col] = 32752.0
            A = A.copy()
            A[0, col] = 32752.0
        added = run_op(
            ops.add_h, {"A": A, "Y": inp["Z"], "flags": flags}, {"Y": ((M, N), "padded"), "flags": None},
            M=M, N=N, path=path, gpu=gpu,
        )  # fmt: skip
        outputs = {"Y": ((M, N), "padded"), "stats": (M, 2), "flags": None}
        for rows in ops.ROW_FORMS:
            normed = run_op(
                ops.layernorm_fwd, {**inp, "Z": added["Y"][:, :N], "flags": added["flags"]}, outputs, M=M,
                N=N, path=path, gpu=gpu, rows=rows,
            )  # fmt: skip
            fused = run_op(
                ops.layernorm_fwd, {**inp, "add": A, "flags": flags}, {**outputs, "Z": ((M, N), "padded")},
                M=M, N=N, path=path, gpu=gpu, rows=rows,
            )  # fmt: skip
            want = _bits({"Z": added["Y"], **normed})
            got = _bits(fused)
            for k in want:
                assert np.array_equal(got[k], want[k]), f"{name} {rows} overflow={overflow}: {k} differs"
            assert bool(fused["flags"][0] & FLAG_H_STORE) == overflow


def _ln_stats_error(Z):
    """Bounds on the kernel's f32 mean (abs) and rstd (relative): the mean is an f32 sum of N
    values; the variance sums squares of (z - mean'), whose cross term with the mean's error
    cancels, so it errs by dot_error(N + 2) relative plus N * mean_err^2; inverseSqrt is good to
    2 ulps and halves the relative error of its argument."""
    N = Z.shape[1]
    mean = Z.mean(1)
    q = ((Z - mean[:, None]) ** 2).sum(1)
    mean_err = dot_error(N + 1) * np.abs(Z).mean(1)
    q_err = dot_error(N + 2) * q + N * mean_err**2
    rstd_rel = 0.5 * (q_err / N + 4 * U32 * (q / N + 1e-5)) / (q / N + 1e-5) + 4 * U32
    return mean_err, rstd_rel


for _n in LN_NAMES:

    @kernel_case(_n + "/fwd")
    def _ln_fwd_case(name, path):
        M, N, rng, inp = _ln_inputs(name.rsplit("/", 1)[0], path)
        outputs = {"Y": ((M, N), "padded"), "stats": (M, 2), "flags": (4,)}
        out = run_op(ops.layernorm_fwd, inp, outputs, M=M, N=N, path=path, gpu=default_gpu())
        return inp, out

    @kernel_case(_n + "/bwd")
    def _ln_bwd_case(name, path):
        M, N, rng, inp = _ln_inputs(name.rsplit("/", 1)[0], path)
        _, stats = ref.layernorm_fwd(inp["Z"], inp["gamma"], inp["beta"])
        inp = {
            "dY": rand_h(rng, (M, N), path),
            "Z": inp["Z"],
            "stats": stats.astype(np.float32),
            "gamma": inp["gamma"],
        }
        outputs = {"dZ": ((M, N), "padded"), "flags": (4,)}
        out = run_op(ops.layernorm_bwd, inp, outputs, M=M, N=N, path=path, gpu=default_gpu())
        return inp, out

    @kernel_case(_n + "/wgrad")
    def _ln_wgrad_case(name, path):
        M, N, rng, inp = _ln_inputs(name.rsplit("/", 1)[0], path)
        _, stats = ref.layernorm_fwd(inp["Z"], inp["gamma"], inp["beta"])
        inp = {"dY": rand_h(rng, (M, N), path), "Z": inp["Z"], "stats": stats.astype(np.float32)}
        outputs = {"dgamma": (N,), "dbeta": (N,)}
        out = run_op(ops.layernorm_wgrad, inp, outputs, M=M, N=N, path=path, gpu=default_gpu())
        return inp, out


@pytest.mark.parametrize("name", LN_NAMES)
def test_layernorm_fwd(name, path):
    inp, out = run(name + "/fwd", path)
    _check_layernorm_fwd(inp["Z"], inp["gamma"], inp["beta"], out, name, path)
    assert out["flags"][0] == 0


def _check_layernorm_fwd(Z, gamma, beta, out, name, path):
    """out's stats and Y against the float64 LayerNorm of Z, within the f32 bounds derived below."""
    gamma, beta = gamma.astype(np.float64), beta.astype(np.float64)
    Y, stats = ref.layernorm_fwd(Z, gamma, beta)
    mean_err, rstd_rel = _ln_stats_error(Z)
    check_close(out["stats"][:, 0], stats[:, 0], mean_err, f"{name} mean")
    check_close(out["stats"][:, 1], stats[:, 1], rstd_rel * stats[:, 1], f"{name} rstd")
    # Y = (z - mean) rstd gamma + beta in f32: the errors of mean and rstd, 4 roundings
    t = np.abs(Z - stats[:, :1]) * stats[:, 1:] * np.abs(gamma)
    f32_err = (
        mean_err[:, None] * stats[:, 1:] * np.abs(gamma)
        + t * (rstd_rel[:, None] + 8 * U32)
        + 2 * U32 * (np.abs(Y) + np.abs(beta))
    )
    N = Z.shape[1]
    check_close(out["Y"][:, :N], Y, stored_bound(Y, f32_err, path), f"{name} Y")
    if N % 2:
        assert not out["Y"][:, N].any(), "padding stays zero"


@pytest.mark.parametrize("name", LN_NAMES)
def test_layernorm_bwd(name, path):
    inp, out = run(name + "/bwd", path)
    dY, Z, stats, gamma = (
        inp["dY"],
        inp["Z"],
        inp["stats"].astype(np.float64),
        inp["gamma"].astype(np.float64),
    )
    dZ = ref.layernorm_bwd(dY, Z, stats, gamma)
    N = Z.shape[1]
    # rstd * (g - mean(g) - xhat * mean(g xhat)): two f32 row sums of N terms and a few roundings
    g = np.abs(dY * gamma)
    xhat = np.abs(Z - stats[:, :1]) * stats[:, 1:]
    mag = stats[:, 1:] * (g + g.mean(1, keepdims=True) + xhat * (g * xhat).mean(1, keepdims=True))
    f32_err = (dot_error(N) + 16 * U32) * mag
    check_close(out["dZ"][:, :N], dZ, stored_bound(dZ, f32_err, path), f"{name} dZ")
    if N % 2:
        assert not out["dZ"][:, N].any(), "padding stays zero"
    assert out["flags"][0] == 0


@pytest.mark.parametrize("name", LN_NAMES)
def test_layernorm_wgrad(name, path):
    inp, out = run(name + "/wgrad", path)
    dY, Z, stats = inp["dY"], inp["Z"], inp["stats"].astype(np.float64)
    dgamma, dbeta = ref.layernorm_wgrad(dY, Z, stats)
    M = len(Z)
    xhat = (Z - stats[:, :1]) * stats[:, 1:]
    check_close(out["dgamma"], dgamma, (dot_error(M) + 8 * U32) * np.abs(dY * xhat).sum(0), f"{name} dgamma")
    check_close(out["dbeta"], dbeta, dot_error(M) * np.abs(dY).sum(0), f"{name} dbeta")


SENTINEL = 7.0  # what the row after an output's last holds, and must still hold


@pytest.mark.parametrize("rows", ops.ROW_FORMS)
@pytest.mark.parametrize("M", [5, 70])
def test_layernorm_writes_only_its_rows(M, rows, path):
    """Y, stats and dZ one row longer than M, that row a sentinel: no thread past the last row (the
    thread form's grid is ceil(M / 64) * 64 threads) writes it, in either form."""
    N = 37
    _, _, rng, inp = _ln_inputs(f"layernorm/{M}x{N}", path)
    extra = np.full((M + 1, N), SENTINEL, np.float32)
    fwd_in = {**inp, "flags": np.zeros(4, np.uint32), "Y": extra, "stats": np.full((M + 1, 2), SENTINEL)}
    fwd_out = {"Y": ((M + 1, N), "padded"), "stats": (M + 1, 2)}
    fwd = run_op(ops.layernorm_fwd, fwd_in, fwd_out, M=M, N=N, path=path, gpu=default_gpu(), rows=rows)
    assert (fwd["Y"][M, :N] == SENTINEL).all() and (fwd["stats"][M] == SENTINEL).all()
    bwd_in = {
        "dY": rand_h(rng, (M, N), path),
        "Z": inp["Z"],
        "stats": fwd["stats"][:M],
        "gamma": inp["gamma"],
        "flags": np.zeros(4, np.uint32),
        "dZ": extra,
    }
    bwd_out = {"dZ": ((M + 1, N), "padded")}
    bwd = run_op(ops.layernorm_bwd, bwd_in, bwd_out, M=M, N=N, path=path, gpu=default_gpu(), rows=rows)
    assert (bwd["dZ"][M, :N] == SENTINEL).all()


def test_softmax_xent_writes_only_its_rows(path):
    """loss_rows and dlogits one row longer than B = 70 (the second workgroup partly past the end):
    the row after the last keeps its sentinel."""
    B, C = 70, 5
    rng = rng_for("softmax_guard", path)
    inp = {
        "logits": (4 * rng.standard_normal((B, C))).astype(np.float32),
        "labels": rng.integers(0, C, B).astype(np.uint32),
        "state": {"scale": 8.0},
        "loss_rows": np.full(B + 1, SENTINEL, np.float32),
        "dlogits": np.full((B + 1, C), SENTINEL, np.float32),
    }
    outputs = {"loss_rows": (B + 1,), "dlogits": ((B + 1, C), "padded"), "flags": (4,)}
    out = run_op(ops.softmax_xent, inp, outputs, B=B, C=C, path=path, gpu=default_gpu())
    assert out["loss_rows"][B] == SENTINEL and (out["dlogits"][B, :C] == SENTINEL).all()


# --- RMSNorm -------------------------------------------------------------------------------------

# 37 columns (the padding half), 130 (65 words: a lane takes two); 70 rows (two workgroups of the
# thread form, the second partly past the end)
RMS_NAMES = ["rmsnorm/70x37", "rmsnorm/67x130"]


def _rms_inputs(name, path):
    M, N = map(int, name.split("/")[1].split("x"))
    rng = rng_for(name, path)
    X = rand_h(rng, (M, N), path, 2.0) + ref.round_h(0.5, path)
    X[0] *= 2.0**-12  # a row of tiny values: eps matters there
    inp = {"X": ref.round_h(X, path), "gamma": (1 + 0.2 * rng.standard_normal(N)).astype(np.float32)}
    return M, N, rng, inp


def _rms_rstd_rel(X, eps=ref.RMSNORM_EPS):
    """Relative bound on the kernel's rstd: the f32 sum of N squares (dot_error(N)), the division
    by N and the + eps (one rounding each), inverseSqrt's 2 ulps; the square root halves the
    argument's relative error."""
    N = X.shape[1]
    ms = (X * X).mean(1)
    arg_rel = (dot_error(N) + 2 * U32) * ms / (ms + eps) + 2 * U32
    return 0.51 * arg_rel + 4 * U32


for _n in RMS_NAMES:

    @kernel_case(_n + "/fwd")
    def _rms_fwd_case(name, path):
        M, N, _, inp = _rms_inputs(name.rsplit("/", 1)[0], path)
        outputs = {"Y": ((M, N), "padded"), "rstd": (M,), "flags": (4,)}
        return inp, run_op(ops.rmsnorm_fwd, inp, outputs, M=M, N=N, path=path, gpu=default_gpu())

    @kernel_case(_n + "/bwd")
    def _rms_bwd_case(name, path):
        M, N, rng, inp = _rms_inputs(name.rsplit("/", 1)[0], path)
        _, rstd = ref.rmsnorm_fwd(inp["X"], inp["gamma"])
        inp = {
            "dY": rand_h(rng, (M, N), path),
            "X": inp["X"],
            "rstd": rstd.astype(np.float32),
            "gamma": inp["gamma"],
        }
        outputs = {"dX": ((M, N), "padded"), "flags": (4,)}
        return inp, run_op(ops.rmsnorm_bwd, inp, outputs, M=M, N=N, path=path, gpu=default_gpu())

    @kernel_case(_n + "/wgrad")
    def _rms_wgrad_case(name, path):
        M, N, rng, inp = _rms_inputs(name.rsplit("/", 1)[0], path)
        _, rstd = ref.rmsnorm_fwd(inp["X"], inp["gamma"])
        inp = {"dY": rand_h(rng, (M, N), path), "X": inp["X"], "rstd": rstd.astype(np.float32)}
        return inp, run_op(ops.rmsnorm_wgrad, inp, {"dgamma": (N,)}, M=M, N=N, path=path, gpu=default_gpu())


@pytest.mark.parametrize("name", RMS_NAMES)
def test_rmsnorm_fwd(name, path):
    inp, out = run(name + "/fwd", path)
    X, gamma = inp["X"], inp["gamma"].astype(np.float64)
    Y, rstd = ref.rmsnorm_fwd(X, gamma)
    rel = _rms_rstd_rel(X)
    check_close(out["rstd"], rstd, rel * rstd, f"{name} rstd")
    # x * rstd * gamma: rstd's error and two roundings
    N = X.shape[1]
    f32_err = (rel[:, None] + 4.01 * U32) * np.abs(Y)
    check_close(out["Y"][:, :N], Y, stored_bound(Y, f32_err, path), f"{name} Y")
    if N % 2:
        assert not out["Y"][:, N].any(), "padding stays zero"


@pytest.mark.parametrize("name", RMS_NAMES)
def test_rmsnorm_bwd(name, path):
    inp, out = run(name + "/bwd", path)
    dY, X, gamma = inp["dY"], inp["X"], inp["gamma"].astype(np.float64)
    rstd = inp["rstd"].astype(np.float64)
    dX = ref.rmsnorm_bwd(dY, X, rstd, gamma)
    N = X.shape[1]
    # rstd * (g - xhat * mean(g xhat)): one f32 row sum of N products (three roundings each) and a
    # few roundings around it, bounded on the magnitudes
    g = np.abs(dY * gamma)
    xhat = np.abs(X) * rstd[:, None]
    mag = rstd[:, None] * (g + xhat * (g * xhat).mean(1, keepdims=True))
    f32_err = (dot_error(N) + 16 * U32) * mag
    check_close(out["dX"][:, :N], dX, stored_bound(dX, f32_err, path), f"{name} dX")
    if N % 2:
        assert not out["dX"][:, N].any(), "padding stays zero"
    assert out["flags"][0] == 0


@pytest.mark.parametrize("name", RMS_NAMES)
def test_rmsnorm_wgrad(name, path):
    inp, out = run(name + "/wgrad", path)
    dY, X, rstd = inp["dY"], inp["X"], inp["rstd"].astype(np.float64)
    dgamma = ref.rmsnorm_wgrad(dY, X, rstd)
    terms = np.abs(dY * X * rstd[:, None]).sum(0)
    check_close(out["dgamma"], dgamma, (dot_error(len(X)) + 8 * U32) * terms, f"{name} dgamma")


def test_rmsnorm_thread_form_bit_identical(path):
    M, N, rng, inp = _rms_inputs(RMS_NAMES[0], path)
    inp = {**inp, "flags": np.zeros(4, np.uint32)}
    fwd = _ln_forms(ops.rmsnorm_fwd, inp, {"Y": ((M, N), "padded"), "rstd": (M,), "flags": None}, path, M, N)
    bwd_inp = {"dY": rand_h(rng, (M, N), path), "X": inp["X"], "rstd": fwd["rstd"], "gamma": inp["gamma"],
               "flags": inp["flags"]}  # fmt: skip
    _ln_forms(ops.rmsnorm_bwd, bwd_inp, {"dX": ((M, N), "padded"), "flags": None}, path, M, N)


ROWS_PAST_ONE_DIM = 65573  # > 65535 workgroups: the workgroup form's grid is [32787, 2], one workgroup past M


def test_row_kernels_past_one_grid_dimension(path):
    """LayerNorm and RMSNorm over more rows than one grid dimension takes: the workgroup form's 2-D
    grid (grid_row) gives every row the thread form's bits (rows found by gid.x), the last
    workgroup past M writes nothing (a sentinel row after the last), and the rows are the reference's."""
    M, N = ROWS_PAST_ONE_DIM, 3
    rng = np.random.default_rng(3)
    Z = ref.round_h(rand_h(rng, (M, N), path, 2.0), path)
    gamma, beta = np.ones(N, np.float32), np.zeros(N, np.float32)
    sentinel = np.full((M + 1, N), SENTINEL, np.float32)
    ln_in = {"Z": Z, "gamma": gamma, "beta": beta, "flags": np.zeros(4, np.uint32), "Y": sentinel}
    ln_in["stats"] = np.full((M + 1, 2), SENTINEL, np.float32)
    ln = _ln_forms(ops.layernorm_fwd, ln_in, {"Y": ((M + 1, N), "padded"), "stats": (M + 1, 2)}, path, M, N)
    assert (ln["Y"][M, :N] == SENTINEL).all() and (ln["stats"][M] == SENTINEL).all()
    _check_layernorm_fwd(Z, gamma, beta, {k: v[:M] for k, v in ln.items()}, f"layernorm/{M}x{N}", path)
    dY = rand_h(rng, (M, N), path)
    bwd_in = {"dY": dY, "Z": Z, "stats": ln["stats"][:M], "gamma": gamma, "flags": np.zeros(4, np.uint32)}
    _ln_forms(ops.layernorm_bwd, bwd_in, {"dZ": ((M, N), "padded"), "flags": None}, path, M, N)
    rms_in = {"X": Z, "gamma": gamma, "flags": np.zeros(4, np.uint32)}
    rms = _ln_forms(
        ops.rmsnorm_fwd, rms_in, {"Y": ((M, N), "padded"), "rstd": (M,), "flags": None}, path, M, N
    )
    bwd_in = {"dY": dY, "X": Z, "rstd": rms["rstd"], "gamma": gamma, "flags": np.zeros(4, np.uint32)}
    _ln_forms(ops.rmsnorm_bwd, bwd_in, {"dX": ((M, N), "padded"), "flags": None}, path, M, N)


@pytest.mark.parametrize("rows", ops.ROW_FORMS)
def test_rmsnorm_writes_only_its_rows(rows, path, monkeypatch):
    """Y, rstd and dX one row longer than M = 70 keep the sentinel row (the launchers' exact-size
    check relaxed for them); a buffer of the wrong size is refused."""
    M, N, rng, inp = _rms_inputs(RMS_NAMES[0], path)
    extra = np.full((M + 1, N), SENTINEL, np.float32)
    fwd_in = {**inp, "flags": np.zeros(4, np.uint32), "Y": extra, "rstd": np.full(M + 1, SENTINEL)}
    fwd_out = {"Y": ((M + 1, N), "padded"), "rstd": (M + 1,)}
    with pytest.raises(ValueError, match="rmsnorm_fwd: buffer Y"):
        run_op(ops.rmsnorm_fwd, fwd_in, fwd_out, M=M, N=N, path=path, gpu=default_gpu(), rows=rows)
    require = PlanBuilder.require_bytes
    monkeypatch.setattr(
        PlanBuilder,
        "require_bytes",
        lambda pb, e, b, n, w: None if b in ("Y", "rstd", "dX") else require(pb, e, b, n, w),
    )
    fwd = run_op(ops.rmsnorm_fwd, fwd_in, fwd_out, M=M, N=N, path=path, gpu=default_gpu(), rows=rows)
    assert (fwd["Y"][M, :N] == SENTINEL).all() and fwd["rstd"][M] == SENTINEL
    bwd_in = {"dY": rand_h(rng, (M, N), path), "X": inp["X"], "rstd": fwd["rstd"][:M], "gamma": inp["gamma"],
              "flags": np.zeros(4, np.uint32), "dX": extra}  # fmt: skip
    bwd = run_op(ops.rmsnorm_bwd, bwd_in, {"dX": ((M + 1, N), "padded")}, M=M, N=N, path=path,
                 gpu=default_gpu(), rows=rows)  # fmt: skip
    assert (bwd["dX"][M, :N] == SENTINEL).all()


def test_rmsnorm_flags_overflow(path):
    """Y beyond the activation format raises the store flag: gamma 1e5 on the f16 paths (|xhat|
    ~ 1), 3e38 on fp32 (Inf)."""
    M, N = 3, 5
    X = ref.round_h(np.linspace(-2, 2, M * N).reshape(M, N) + 0.1, path)
    gamma = np.full(N, 3e38 if path == "fp32" else 1e5, np.float32)
    inp = {"X": X, "gamma": gamma, "flags": np.zeros(4, np.uint32)}
    out = run_op(ops.rmsnorm_fwd, inp, {"Y": (M, N), "rstd": (M,), "flags": None}, M=M, N=N, path=path,
                 gpu=default_gpu())  # fmt: skip
    assert out["flags"][0] == FLAG_H_STORE


def test_rmsnorm_arguments_are_checked():
    pb = PlanBuilder("native")
    pb.h("X", 3, 5)
    pb.h("Y", 3, 5)
    pb.f32("gamma", (5,), "other")
    pb.f32("rstd", (3,), "other")
    with pytest.raises(ValueError, match="rmsnorm_fwd: eps -1"):
        ops.rmsnorm_fwd(pb, "p", X="X", gamma="gamma", Y="Y", rstd="rstd", M=3, N=5, eps=-1, flags="f")
    with pytest.raises(ValueError, match="rmsnorm_fwd: buffer rstd .* gamma: 5 f32"):
        ops.rmsnorm_fwd(pb, "p", X="X", gamma="rstd", Y="Y", rstd="rstd", M=3, N=5, flags="f")
    with pytest.raises(ValueError, match="rmsnorm_bwd: M 0"):
        ops.rmsnorm_bwd(pb, "p", dY="X", X="X", rstd="rstd", gamma="gamma", dX="Y", M=0, N=5, flags="f")


@pytest.mark.slow
def test_rmsnorm_references_match_torch():
    """ref.rmsnorm_* against torch's nn.RMSNorm in float64, forward and autograd backward (dX and
    dgamma), at eps = finfo(float32).eps: what eps=None gives for float32 inputs (torch takes the
    input's dtype: float64's here), and the launchers' default."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    M, N = 6, 9
    X, dY, gamma = rng.standard_normal((M, N)), rng.standard_normal((M, N)), 1 + 0.3 * rng.standard_normal(N)
    X[0] *= 1e-4
    layer = torch.nn.RMSNorm(N, eps=torch.finfo(torch.float32).eps, dtype=torch.float64)
    assert layer.eps == ref.RMSNORM_EPS == ops.rows.RMSNORM_EPS
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(gamma))
    x = torch.tensor(X, requires_grad=True)
    y = layer(x)
    y.backward(torch.tensor(dY))
    Y, rstd = ref.rmsnorm_fwd(X, gamma)
    np.testing.assert_allclose(Y, y.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(ref.rmsnorm_bwd(dY, X, rstd, gamma), x.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ref.rmsnorm_wgrad(dY, X, rstd), layer.weight.grad.numpy(), rtol=1e-10)


# --- softmax cross-entropy --------------------------------------------------------------------

SOFTMAX_NAMES = ["softmax/70x1", "softmax/70x10", "softmax/9x13"]


for _n in SOFTMAX_NAMES:

    @kernel_case(_n)
    def _softmax_case(name, path):
        B, C = map(int, name.split("/")[1].split("x"))
        rng = rng_for(name, path)
        inp = {
            "logits": (4 * rng.standard_normal((B, C))).astype(np.float32),
            "labels": rng.integers(0, C, B),
            "scale": 1024.0,
        }
        return inp, softmax_run(inp["logits"], inp["labels"], inp["scale"], path)


@pytest.mark.parametrize("name", SOFTMAX_NAMES)
def test_softmax_xent(name, path):
    inp, out = run(name, path)
    z, labels, scale = inp["logits"].astype(np.float64), inp["labels"], inp["scale"]
    B, C = z.shape
    loss, dl, bad = ref.softmax_xent(z, labels, scale)
    assert not bad
    loss_err, f32_err = ref.softmax_xent_error(z, labels, scale)  # exp, log, division in f32
    check_close(out["loss_rows"], loss, loss_err, f"{name} loss")
    check_close(out["dlogits"][:, :C], dl, stored_bound(dl, f32_err, path), f"{name} dlogits")
    if C % 2:
        assert not out["dlogits"][:, C].any(), "padding stays zero"
    assert out["flags"][0] == 0


# rows of logits far from 0 with an O(1) spread (f32 spacing up to 2 there), and the extreme row
# [3e38, 3e38, -3e38, ...] with label 0, whose loss is ln 2
SOFTMAX_LARGE_BASES = [1e3, -1e3, 2.0**22, -(2.0**23), 1e6, -3e7, 3e38]


@kernel_case("softmax/large_logits")
def _softmax_large_case(name, path):
    rng = rng_for(name, path)
    C = 7
    offsets = rng.integers(-6, 7, (len(SOFTMAX_LARGE_BASES), C)) * 0.5
    logits = (np.array(SOFTMAX_LARGE_BASES)[:, None] + offsets).astype(np.float32)
    labels = rng.integers(0, C, len(logits))
    logits[-1] = [3e38, 3e38] + [-3e38] * (C - 2)
    labels[-1] = 0
    inp = {"logits": logits, "labels": labels, "scale": 8.0}
    return inp, softmax_run(logits, labels, inp["scale"], path)


def test_softmax_xent_large_logits(path):
    """loss = log(sum) - (l_y - max) keeps the loss's own precision when the logits are far from
    0; (max + log(sum)) - l_y rounded it to the logits' ulp (up to 1 here) and gave 0 for
    [3e38, 3e38, -3e38] with label 0 instead of ln 2."""
    inp, out = run("softmax/large_logits", path)
    z, labels, scale = inp["logits"].astype(np.float64), inp["labels"], inp["scale"]
    C = z.shape[1]
    loss, dl, bad = ref.softmax_xent(z, labels, scale)
    assert not bad and loss[-1] == np.log(2)
    loss_err, f32_err = ref.softmax_xent_error(z, labels, scale)
    assert loss_err.max() < 1e-5
    check_close(out["loss_rows"], loss, loss_err, "large logits: loss")
    check_close(out["dlogits"][:, :C], dl, stored_bound(dl, f32_err, path), "large logits: dlogits")
    assert out["flags"][0] == 0


def test_softmax_flags(path):
    """The loss site flags a non-finite loss (Inf from finite logits, or NaN) and nothing else;
    the store site flags dlogits beyond f16 range (a large loss scale) and nothing else."""
    z = np.zeros((3, 4), np.float32)
    z[0, 0], z[0, 1] = 3e38, -3e38  # row 0, label 1: loss = 3e38 + 3e38 -> Inf in f32
    labels = np.array([1, 0, 2])
    assert softmax_run(z, labels, 1.0, path)["flags"][0] == FLAG_LOSS
    z2 = np.zeros((3, 4), np.float32)
    z2[1, 2] = np.nan
    assert softmax_run(z2, labels, 1.0, path)["flags"][0] & FLAG_LOSS
    # dlogits = (p - 1) * scale / B with p = 1/4: 0.75 * 2^20 / 3 = 262144 > 65504
    flags = softmax_run(np.zeros((3, 4), np.float32), labels, 2.0**20, path)["flags"][0]
    assert flags == (0 if path == "fp32" else FLAG_H_STORE)


# --- native and emulated f16 agree bit for bit ---------------------------------------------------

test_native_matches_emulated = CASES.native_matches_emulated()
