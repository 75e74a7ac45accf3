"""The image kernels (webmp/ops/conv.py: im2col, col2im, max and average pooling forward and
backward, repack_h) against their float64 references (webmp/testing/reference/conv.py) on each
storage path, at odd shapes: C odd and even, H != W, strides 1 and 2 (unequal in a case), padding 0
and 1, kernels 1, 2 and 3 (KH != KW in a case), more output rows than a workgroup, and one size
whose grid-stride loops run more than once. The matmuls that read an image as its patches
(implicit_patches: a convolution's forward and weight gradient) give the bits of the same matmuls
on im2col's patches, on every core.

Where the bits only move (im2col, max pooling's values and argmax, repack_h) the outputs equal the
reference bit for bit, f16 subnormals and -0 included. The sums (col2im, maxpool_bwd, avgpool) are
f32 sums of at most n terms, erring by dot_error(n) * sum|terms| (plus one division for average
pooling: n + 1), then one store (kernel_cases.stored_bound).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_cases import FLAG_H_STORE, Cases, rand_h, rng_for, stored_bound

from webmp import ops
from webmp.engine.plan import PlanBuilder
from webmp.engine.runtime import default_gpu
from webmp.ops.common import MAX_WORKGROUPS
from webmp.testing import reference as ref
from webmp.testing.probe import run_kernel, run_op
from webmp.testing.reference import check_close, dot_error

CASES = Cases()
kernel_case, run = CASES.case, CASES.run
SENTINEL = 7.0  # what the row after an output's last holds, and must still hold
GRID_THREADS = MAX_WORKGROUPS * 64  # a grid-stride loop runs twice past this many words

# (B, C, H, W, KH, KW, SH, SW, PH, PW): 126, 72, 72, 90 patch rows
CONV = {
    "c3_k3_s1_p1": (2, 3, 7, 9, 3, 3, 1, 1, 1, 1),
    "c4_k2x3_s2x1_p0x1": (3, 4, 9, 6, 2, 3, 2, 1, 0, 1),
    "c5_k1_s2_p0": (3, 5, 11, 8, 1, 1, 2, 2, 0, 0),
    "c6_k3x2_s2_p1x0": (3, 6, 10, 13, 3, 2, 2, 2, 1, 0),
}
# (B, C, H, W, K, S, P): 80, 80, 84, 75, 90 pooled rows; overlapping windows (S < K) in three
POOL = {
    "c3_k3_s2_p1_negative": (4, 3, 9, 7, 3, 2, 1),  # all values < 0: a zero padding would win
    "c4_k2_s2_p0": (4, 4, 8, 10, 2, 2, 0),
    "c5_k3_s1_p1": (2, 5, 7, 6, 3, 1, 1),
    "c1_k1_s2_p0": (3, 1, 9, 9, 1, 2, 0),
    "c2_k2_s1_p0_ties": (3, 2, 6, 7, 2, 1, 0),  # a few distinct values: ties everywhere
}


def conv_sizes(g) -> dict[str, int]:
    return dict(zip(("B", "C", "H", "W", "KH", "KW", "SH", "SW", "PH", "PW"), g, strict=True))


def pool_sizes(g) -> dict[str, int]:
    return dict(zip(("B", "C", "H", "W", "K", "S", "P"), g, strict=True))


def out_rows(s: dict[str, int]) -> int:
    """B*OH*OW of a conv's or a pool's sizes."""
    k = (s.get("KH", s.get("K")), s.get("KW", s.get("K")))
    st = (s.get("SH", s.get("S")), s.get("SW", s.get("S")))
    p = (s.get("PH", s.get("P")), s.get("PW", s.get("P")))
    return s["B"] * ops.conv_out(s["H"], k[0], st[0], p[0]) * ops.conv_out(s["W"], k[1], st[1], p[1])


def op(launcher, inputs, outputs, path, **sizes):
    return run_op(launcher, inputs, outputs, path=path, gpu=default_gpu(), **sizes)


def with_specials(X, rng, path):
    """X with f16 subnormals and a negative zero at random places: bits a conversion could change."""
    special = np.array([2.0**-24, -(2.0**-20), 3 * 2.0**-16, -0.0])
    X.flat[rng.choice(X.size, 4, replace=False)] = ref.round_h(special, path)
    return X


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def assert_same_bits(got, want, what):
    diff = bits(got) != bits(np.asarray(want, np.float32))
    assert not diff.any(), f"{what}: {int(diff.sum())} of {diff.size} values differ"


def assert_zero_padding(out, cols, what):
    if cols % 2:
        assert not bits(out[:, cols]).any(), f"{what}: the padding half of odd rows stays zero"


# --- im2col and col2im ------------------------------------------------------------------------------


def _conv_run(name, path, g):
    s = conv_sizes(g)
    rng = rng_for(name, path)
    rows, n = out_rows(s), s["KH"] * s["KW"] * s["C"]
    X = with_specials(rand_h(rng, (s["B"] * s["H"] * s["W"], s["C"]), path), rng, path)
    dP = rand_h(rng, (rows, n), path)
    out = op(ops.im2col, {"X": X}, {"P": ((rows, n), "padded")}, path, **s)
    flags = np.zeros(4, np.uint32)
    grads = op(
        ops.col2im, {"dP": dP, "flags": flags}, {"dX": ((len(X), s["C"]), "padded"), "flags": None}, path, **s
    )
    return {"X": X, "dP": dP}, {**out, **grads}


for _name, _g in CONV.items():
    kernel_case(f"conv/{_name}")(lambda name, path, g=_g: _conv_run(name, path, g))


@pytest.mark.parametrize("name", CONV)
def test_im2col_moves_the_bits(name, path):
    inp, out = run(f"conv/{name}", path)
    s = conv_sizes(CONV[name])
    n = s["KH"] * s["KW"] * s["C"]
    assert_same_bits(out["P"][:, :n], ref.im2col(inp["X"], **s), name)
    assert_zero_padding(out["P"], n, name)


def check_col2im(name, inp, out, s, path):
    exact = ref.col2im(inp["dP"], **s)
    f32_err = dot_error(s["KH"] * s["KW"]) * ref.col2im(np.abs(inp["dP"]), **s)
    check_close(out["dX"][:, : s["C"]], exact, stored_bound(exact, f32_err, path), f"{name} dX")
    assert_zero_padding(out["dX"], s["C"], name)


@pytest.mark.parametrize("name", CONV)
def test_col2im(name, path):
    inp, out = run(f"conv/{name}", path)
    check_col2im(name, inp, out, conv_sizes(CONV[name]), path)
    assert out["flags"][0] == 0


def test_col2im_flags_overflow(path):
    """9 taps of 40000 into an interior pixel: 360000 does not fit f16 (flagged); it fits fp32."""
    s = conv_sizes((1, 3, 4, 5, 3, 3, 1, 1, 1, 1))
    dP = np.full((out_rows(s), 27), 40000.0)
    out = op(
        ops.col2im, {"dP": dP, "flags": np.zeros(4, np.uint32)}, {"dX": (20, 3), "flags": None}, path, **s
    )
    assert out["flags"][0] == (0 if path == "fp32" else FLAG_H_STORE)


def test_grid_stride_loops_run_twice(path):
    """A 300 x 300 image, C = 5, 3 x 3 taps: P has 2.07M words and dX 270000, both more than the
    capped grid's threads, so each thread's loop runs again (im2col's eight times)."""
    g = (1, 5, 300, 300, 3, 3, 1, 1, 1, 1)
    s = conv_sizes(g)
    assert 90000 * 3 > GRID_THREADS
    inp, out = _conv_run("conv/grid_stride", path, g)
    assert_same_bits(out["P"][:, :45], ref.im2col(inp["X"], **s), "P")
    check_col2im("grid_stride", inp, out, s, path)


def test_reference_col2im_is_im2col_adjoint():
    """<im2col(X), dP> == <X, col2im(dP)> for every geometry above (float64)."""
    rng = np.random.default_rng(0)
    for g in CONV.values():
        s = conv_sizes(g)
        X = rng.standard_normal((s["B"] * s["H"] * s["W"], s["C"]))
        dP = rng.standard_normal((out_rows(s), s["KH"] * s["KW"] * s["C"]))
        assert np.isclose((ref.im2col(X, **s) * dP).sum(), (X * ref.col2im(dP, **s)).sum(), rtol=1e-12)


# --- implicit im2col: a convolution's matmuls read the image as its patches -------------------------

# CONV's geometries (a 1x1 at stride 2 among them) and a 1x1 at stride 1 without padding; C 3, 4, 5,
# 6, 7: odd, even, none a multiple of 4 but one
IMPLICIT = {**CONV, "c7_k1_s1_p0": (2, 7, 5, 3, 1, 1, 1, 1, 0, 0)}
OC = 5  # output channels: an odd N
# tile choices beyond each geometry's default (the register core's 4 x 4 with sizes read at run
# time): the workgroup-memory core, which stages op(A) row-wise (forward) and column-wise (weight
# gradient), and the register cores (8 x 8 blocks; 16-row blocks, with subgroups)
IMPLICIT_TILES = {
    "tiled_4x4_t4x4_k32": {"WG_X": 4, "WG_Y": 4, "TM": 4, "TN": 4, "BK": 32},
    "reg_8x4_t8x8": {"core": "reg", "WG_X": 8, "WG_Y": 4, "TM": 8, "TN": 8},
    "sg_8x2_t16x8_pairs": {"core": "reg_sg", "WG_X": 8, "WG_Y": 2, "TM": 16, "TN": 8, "B_PAIRS": 1},
}
IMPLICIT_TILED = ("c3_k3_s1_p1", "c6_k3x2_s2_p1x0")  # the geometries run with every IMPLICIT_TILES


def _conv_matmuls(path, s, inp, image, tiles):
    """A convolution's forward (matmul_fwd, C = P W + bias) and weight gradient (matmul_wgrad,
    P^T dY) with A the patches P (image None) or the images X read as their patches (image: the
    geometry s)."""
    rows, n = out_rows(s), s["KH"] * s["KW"] * s["C"]
    A = inp["P"] if image is None else inp["X"]
    opts = dict(a_image=image, **({"tiles": tiles} if tiles else {}))
    fwd = op(
        ops.matmul, {"A": A, "B": inp["W"], "bias": inp["bias"], "flags": np.zeros(4, np.uint32)},
        {"C": ((rows, OC), "padded"), "flags": None}, path, variant="matmul_fwd", M=rows, N=OC, K=n, **opts,
    )  # fmt: skip
    wgrad = op(
        ops.matmul, {"A": A, "B": inp["dY"]}, {"C": (n, OC)}, path, variant="matmul_wgrad", M=n, N=OC,
        K=rows, trans_a=1, **opts,
    )  # fmt: skip
    return {"Y": fwd["C"], "flags": fwd["flags"], "dW": wgrad["C"]}


def _implicit_run(name, path, g, tiles=None):
    s = conv_sizes(g)
    if tiles and tiles.get("core") == "reg_sg" and not default_gpu().has_subgroups:
        pytest.skip("the adapter has no subgroups")
    rng = rng_for(name, path)
    rows, n = out_rows(s), s["KH"] * s["KW"] * s["C"]
    X = with_specials(rand_h(rng, (s["B"] * s["H"] * s["W"], s["C"]), path), rng, path)
    inp = {
        "X": X,
        "P": ref.im2col(X, **s),  # what im2col stores (test_im2col_moves_the_bits)
        "W": rand_h(rng, (n, OC), path),
        "bias": rng.standard_normal(OC).astype(np.float32),
        "dY": rand_h(rng, (rows, OC), path),
    }
    implicit = _conv_matmuls(path, s, inp, s, tiles)
    return inp, {"implicit": implicit, "patches": _conv_matmuls(path, s, inp, None, tiles)}


IMPLICIT_NAMES = [f"implicit/{name}" for name in IMPLICIT] + [
    f"implicit/{name}/{t}" for name in IMPLICIT_TILED for t in IMPLICIT_TILES
]
for _name in IMPLICIT_NAMES:
    _g, _t = IMPLICIT[_name.split("/")[1]], IMPLICIT_TILES.get(_name.split("/")[-1])
    kernel_case(_name)(lambda name, path, g=_g, t=_t: _implicit_run(name, path, g, t))


@pytest.mark.parametrize("name", IMPLICIT_NAMES)
def test_implicit_patches_give_the_patch_matmuls_bits(name, path):
    """The matmuls reading the images as their patches give the bits of the same matmuls on the
    patches im2col stores (the same values in the same places, accumulated in the same k order), on
    every core, forward and weight gradient; and both are the products against numpy."""
    inp, out = run(name, path)
    for key in ("Y", "dW"):
        assert_same_bits(out["implicit"][key], out["patches"][key], f"{name} {key}")
    P, W, bias, dY = inp["P"], inp["W"], inp["bias"], inp["dY"]
    exact = ref.matmul(P, W, path=path) + bias
    err = stored_bound(exact, ref.matmul_error(P, W, path=path, extra=bias), path)
    check_close(out["implicit"]["Y"][:, :OC], exact, err, f"{name} Y")
    assert_zero_padding(out["implicit"]["Y"], OC, name)
    assert out["implicit"]["flags"][0] == 0
    exact = ref.matmul(P, dY, trans_a=1, path=path)
    check_close(out["implicit"]["dW"], exact, ref.matmul_error(P, dY, trans_a=1, path=path), f"{name} dW")


def test_implicit_patches_refuse_a_wrong_product():
    """The product must be the patch matrix's ([126, 27] here, or its transpose) and X the images."""
    pb = _builder({"X": (126, 3), "W": (27, 4), "Y": (126, 4)})
    with pytest.raises(
        ValueError,
        match=r"matmul_fwd: the patch matrix .* is \[126, 27\], so op\(A\) is "
        r"\[126, 27\] \(trans_a=0\), got M=126, K=26",
    ):
        ops.matmul(pb, "p", "matmul_fwd", A="X", B="W", C="Y", M=126, N=4, K=26, bias="b", a_image=CONV_OK)
    with pytest.raises(ValueError, match=r"op\(A\) is \[27, 126\] \(trans_a=1\), got M=126, K=27"):
        ops.matmul(pb, "p", "matmul_wgrad", A="X", B="Y", C="g", M=126, N=4, K=27, trans_a=1, a_image=CONV_OK)
    pb = _builder({"X": (125, 3)})
    with pytest.raises(ValueError, match=r"matmul_plain: buffer X .* the images X, an h matrix \[126, 3\]"):
        ops.matmul(pb, "p", "matmul_plain", A="X", B="W", C="Y", M=126, N=4, K=27, a_image=CONV_OK)
    with pytest.raises(ValueError, match=r"matmul_plain: an image read as its patches .* unbatched"):
        ops.matmul(pb, "p", "matmul_plain", A="X", B="W", C="Y", M=126, N=4, K=27, a_image=CONV_OK, batch=2)


# --- pooling -------------------------------------------------------------------------------------------


def _pool_inputs(name, path, s):
    rng = rng_for(name, path)
    shape = (s["B"] * s["H"] * s["W"], s["C"])
    if name.endswith("ties"):
        X = rng.integers(-2, 2, shape).astype(np.float64)
    else:
        X = with_specials(rand_h(rng, shape, path), rng, path)
    if "negative" in name:
        X = ref.round_h(-np.abs(X) - 0.5, path)
    return X, rand_h(rng, (out_rows(s), s["C"]), path)


def _pool_run(name, path, g, kind):
    s = pool_sizes(g)
    X, dY = _pool_inputs(name, path, s)
    rows, C = out_rows(s), s["C"]
    flags = np.zeros(4, np.uint32)
    if kind == "max":
        fwd = op(ops.maxpool_fwd, {"X": X}, {"Y": ((rows, C), "padded"), "argmax": (rows, C)}, path, **s)
        bwd_in = {"dY": dY, "argmax": fwd["argmax"], "flags": flags}
        bwd = op(ops.maxpool_bwd, bwd_in, {"dX": ((len(X), C), "padded"), "flags": None}, path, **s)
    else:
        fwd_in = {"X": X, "flags": flags}
        fwd = op(ops.avgpool_fwd, fwd_in, {"Y": ((rows, C), "padded"), "flags": None}, path, **s)
        fwd["flags_fwd"] = fwd.pop("flags")
        bwd = op(
            ops.avgpool_bwd,
            {"dY": dY, "flags": flags},
            {"dX": ((len(X), C), "padded"), "flags": None},
            path,
            **s,
        )
    return {"X": X, "dY": dY}, {**fwd, **bwd}


for _name, _g in POOL.items():
    for _kind in ("max", "avg"):
        kernel_case(f"{_kind}pool/{_name}")(lambda name, path, g=_g, k=_kind: _pool_run(name, path, g, k))


@pytest.mark.parametrize("name", POOL)
def test_maxpool_fwd_copies_the_winner(name, path):
    """Y the windows' maxima bit for bit, argmax the first winner in row-major order (the ties case
    has many equal values; the negative case windows over the padding)."""
    inp, out = run(f"maxpool/{name}", path)
    s = pool_sizes(POOL[name])
    Y, argmax = ref.maxpool_fwd(inp["X"], **s)
    assert_same_bits(out["Y"][:, : s["C"]], Y, f"{name} Y")
    assert np.array_equal(out["argmax"], argmax), (
        f"{name}: argmax differs at {np.count_nonzero(out['argmax'] != argmax)}"
    )
    assert_zero_padding(out["Y"], s["C"], name)


@pytest.mark.parametrize("name", POOL)
def test_maxpool_bwd(name, path):
    inp, out = run(f"maxpool/{name}", path)
    s = pool_sizes(POOL[name])
    _, argmax = ref.maxpool_fwd(inp["X"], **s)
    sizes = {k: s[k] for k in ("B", "C", "H", "W")}
    exact = ref.maxpool_bwd(inp["dY"], argmax, **sizes)
    n = math.ceil(s["K"] / s["S"]) ** 2  # windows covering a pixel
    f32_err = dot_error(n) * ref.maxpool_bwd(np.abs(inp["dY"]), argmax, **sizes)
    check_close(out["dX"][:, : s["C"]], exact, stored_bound(exact, f32_err, path), f"{name} dX")
    assert_zero_padding(out["dX"], s["C"], name)
    assert out["flags"][0] == 0


@pytest.mark.parametrize("name", POOL)
def test_avgpool(name, path):
    inp, out = run(f"avgpool/{name}", path)
    s = pool_sizes(POOL[name])
    K, S, C = s["K"], s["S"], s["C"]
    exact = ref.avgpool_fwd(inp["X"], **s)
    f32_err = dot_error(K * K + 1) * ref.avgpool_fwd(np.abs(inp["X"]), **s)
    check_close(out["Y"][:, :C], exact, stored_bound(exact, f32_err, path), f"{name} Y")
    exact = ref.avgpool_bwd(inp["dY"], **s)
    f32_err = dot_error(math.ceil(K / S) ** 2 + 1) * ref.avgpool_bwd(np.abs(inp["dY"]), **s)
    check_close(out["dX"][:, :C], exact, stored_bound(exact, f32_err, path), f"{name} dX")
    assert_zero_padding(out["Y"], C, name)
    assert_zero_padding(out["dX"], C, name)
    assert out["flags_fwd"][0] == 0 and out["flags"][0] == 0


def test_pool_flags_overflow(path):
    """A pixel winning all nine 3 x 3 windows around it (stride 1) with dY = 40000 each: 360000;
    average pooling of 65504 (f16's largest, which h_overflows counts as overflowing): flagged on
    the f16 paths, not on fp32."""
    s = pool_sizes((1, 2, 5, 5, 3, 1, 1))
    X = np.zeros((25, 2))
    X[12] = 1.0
    flags = np.zeros(4, np.uint32)
    fwd = op(ops.maxpool_fwd, {"X": X}, {"Y": (25, 2), "argmax": (25, 2)}, path, **s)
    bwd_in = {"dY": np.full((25, 2), 40000.0), "argmax": fwd["argmax"], "flags": flags}
    bwd = op(ops.maxpool_bwd, bwd_in, {"dX": (25, 2), "flags": None}, path, **s)
    if path == "fp32":
        assert bwd["dX"][12].tolist() == [360000.0, 360000.0]
    want = 0 if path == "fp32" else FLAG_H_STORE
    assert bwd["flags"][0] == want
    big = {"X": np.full((25, 2), 65504.0), "flags": flags}
    s2 = pool_sizes((1, 2, 5, 5, 2, 2, 0))
    assert op(ops.avgpool_fwd, big, {"flags": None, "Y": (4, 2)}, path, **s2)["flags"][0] == want
    s1 = pool_sizes((1, 2, 5, 5, 1, 1, 0))
    back = {"dY": np.full((25, 2), 65504.0), "flags": flags}
    assert op(ops.avgpool_bwd, back, {"flags": None, "dX": (25, 2)}, path, **s1)["flags"][0] == want


# --- repack_h ------------------------------------------------------------------------------------------

# (rows_in, cols_in, rows_out, cols_out): Flatten of [2*5*7, 3] and back, even widths, one element,
# and 400002 words out (the grid-stride loop runs twice)
REPACK = [(70, 3, 2, 105), (2, 105, 70, 3), (35, 6, 5, 42), (1, 1, 1, 1), (3, 200001, 200001, 3)]


@pytest.mark.parametrize("shape", REPACK, ids=lambda s: "x".join(map(str, s)))
def test_repack_h_moves_the_bits(shape, path):
    rows_in, cols_in, rows_out, cols_out = shape
    rng = rng_for(f"repack/{shape}", path)
    X = (
        with_specials(rand_h(rng, (rows_in, cols_in), path), rng, path)
        if rows_in * cols_in >= 4
        else np.ones((1, 1))
    )
    out = op(
        ops.repack_h, {"X": X}, {"Y": ((rows_out, cols_out), "padded")}, path,
        rows_in=rows_in, cols_in=cols_in, rows_out=rows_out, cols_out=cols_out,
    )  # fmt: skip
    assert_same_bits(out["Y"][:, :cols_out], X.reshape(rows_out, cols_out), "Y")
    assert_zero_padding(out["Y"], cols_out, "Y")


# --- no thread writes past the last row ------------------------------------------------------------


class _Recorder(PlanBuilder):
    """Keeps a launcher's dispatch (files, entry, constants, grid) and skips its buffer checks, so
    the kernel can run on output buffers one row longer than the launcher allows."""

    def require_bytes(self, entry, buffer, nbytes, what):
        pass

    def dispatch(self, program, files, entry, constants, binds, workgroups):
        self.recorded = files, entry, constants, workgroups


def run_longer(launcher, inputs, outputs, path, **sizes):
    """The launcher's kernel with its own constants and grid, outputs {name: (shape, view)} one row
    (or word) longer and filled with SENTINEL first."""
    pb = _Recorder(path)
    launcher(pb, "p", **{n: n for n in (*inputs, *outputs)}, **sizes)
    files, entry, constants, workgroups = pb.recorded
    filled = {}
    for name, spec in outputs.items():
        filled[name] = np.full(spec[0], 0xDEAD, np.uint32) if name == "argmax" else np.full(spec[0], SENTINEL)
    return run_kernel(
        files, entry, constants, {**inputs, **filled}, outputs, workgroups, path=path, gpu=default_gpu()
    )


def test_image_kernels_write_only_their_rows(path):
    """Every image kernel on outputs one row longer (argmax one entry longer), at sizes whose last
    workgroup is partly past the end: the extra row keeps its sentinel."""
    s = conv_sizes(CONV["c3_k3_s1_p1"])
    rows, n, pixels, C = out_rows(s), 27, 2 * 7 * 9, 3
    rng = rng_for("guard", path)
    X = rand_h(rng, (pixels, C), path)
    flags = np.zeros(4, np.uint32)
    got = run_longer(ops.im2col, {"X": X}, {"P": ((rows + 1, n), "padded")}, path, **s)["P"]
    assert (got[rows, :n] == SENTINEL).all() and not (got[:rows] == SENTINEL).any()
    dP = {"dP": rand_h(rng, (rows, n), path), "flags": flags}
    got = run_longer(ops.col2im, dP, {"dX": ((pixels + 1, C), "padded")}, path, **s)["dX"]
    assert (got[pixels, :C] == SENTINEL).all()

    p = pool_sizes(POOL["c5_k3_s1_p1"])
    rows, C, pixels = out_rows(p), 5, 2 * 7 * 6
    X = rand_h(rng, (pixels, C), path)
    dY = rand_h(rng, (rows, C), path)
    fwd = run_longer(
        ops.maxpool_fwd,
        {"X": X},
        {"Y": ((rows + 1, C), None), "argmax": ((rows * C + 1,), np.uint32)},
        path,
        **p,
    )
    assert (fwd["Y"][rows] == SENTINEL).all() and fwd["argmax"][rows * C] == 0xDEAD
    back = {"dY": dY, "argmax": fwd["argmax"][: rows * C], "flags": flags}
    assert (
        run_longer(ops.maxpool_bwd, back, {"dX": ((pixels + 1, C), None)}, path, **p)["dX"][pixels]
        == SENTINEL
    ).all()
    got = run_longer(ops.avgpool_fwd, {"X": X, "flags": flags}, {"Y": ((rows + 1, C), None)}, path, **p)["Y"]
    assert (got[rows] == SENTINEL).all()
    got = run_longer(ops.avgpool_bwd, {"dY": dY, "flags": flags}, {"dX": ((pixels + 1, C), None)}, path, **p)[
        "dX"
    ]
    assert (got[pixels] == SENTINEL).all()
    sizes = {"rows_in": 70, "cols_in": 3, "rows_out": 2, "cols_out": 105}
    got = run_longer(ops.repack_h, {"X": rand_h(rng, (70, 3), path)}, {"Y": ((3, 105), None)}, path, **sizes)[
        "Y"
    ]
    assert (got[2] == SENTINEL).all()


# --- refusals ---------------------------------------------------------------------------------------


def _builder(buffers: dict[str, tuple[int, int]], path="fp32") -> PlanBuilder:
    pb = PlanBuilder(path)
    for name, (rows, cols) in buffers.items():
        pb.h(name, rows, cols)
    return pb


CONV_OK = conv_sizes((2, 3, 7, 9, 3, 3, 1, 1, 1, 1))


@pytest.mark.parametrize(
    "change,message",
    [
        ({"B": 0}, r"im2col: sizes and strides must be positive and padding not negative, got B=0"),
        ({"SW": 0, "PH": -1}, r"got SW=0, PH=-1"),
        ({"PH": 3}, r"im2col: padding PH=3 must be smaller than the kernel KH=3"),
        ({"KW": 5, "PW": 1, "W": 2}, r"im2col: kernel KW=5 is larger than the padded input W \+ 2\*PW = 4"),
    ],
)
def test_im2col_refuses_bad_sizes(change, message):
    with pytest.raises(ValueError, match=message):
        ops.im2col(_builder({}), "p", X="X", P="P", **{**CONV_OK, **change})


def test_conv_launchers_refuse_wrong_buffers():
    rows = out_rows(CONV_OK)
    with pytest.raises(
        ValueError, match=r"im2col: buffer X has 1008 bytes, .* the images X, an h matrix \[126, 3\]"
    ):
        ops.im2col(_builder({"X": (63, 3), "P": (rows, 27)}), "p", X="X", P="P", **CONV_OK)
    with pytest.raises(ValueError, match=r"im2col: buffer P .* the patches P, an h matrix \[126, 27\]"):
        ops.im2col(_builder({"X": (126, 3), "P": (rows, 26)}), "p", X="X", P="P", **CONV_OK)
    with pytest.raises(
        ValueError, match=r"col2im: buffer dX .* the image gradient dX, an h matrix \[126, 3\]"
    ):
        ops.col2im(_builder({"dP": (rows, 27), "dX": (127, 3)}), "p", dP="dP", dX="dX", **CONV_OK)
    with pytest.raises(ValueError, match=r"col2im: padding PW=1 must be smaller than the kernel KW=1"):
        ops.col2im(_builder({}), "p", dP="dP", dX="dX", **{**CONV_OK, "KW": 1})


POOL_OK = pool_sizes((2, 5, 7, 6, 3, 1, 1))
POOL_LAUNCHERS = {
    ops.maxpool_fwd: {"X": "X", "Y": "Y", "argmax": "argmax"},
    ops.maxpool_bwd: {"dY": "dY", "argmax": "argmax", "dX": "dX"},
    ops.avgpool_fwd: {"X": "X", "Y": "Y"},
    ops.avgpool_bwd: {"dY": "dY", "dX": "dX"},
}


@pytest.mark.parametrize("launcher", POOL_LAUNCHERS, ids=lambda f: f.__name__)
def test_pools_refuse_bad_sizes_and_buffers(launcher):
    name, bufs = launcher.__name__, POOL_LAUNCHERS[launcher]
    for change, message in [
        ({"S": 0}, "sizes and strides must be positive and padding not negative, got SH=0, SW=0"),
        ({"P": 2}, r"padding P=2 must be at most half the kernel K=3 \(PyTorch's rule\)"),
        ({"K": 10, "P": 1}, r"kernel KH=10 is larger than the padded input H \+ 2\*PH = 9"),
    ]:
        with pytest.raises(ValueError, match=f"{name}: {message}"):
            launcher(_builder({}), "p", **bufs, **{**POOL_OK, **change})
    pixels, rows = 84, out_rows(POOL_OK)
    pb = _builder({"X": (pixels, 5), "dX": (pixels, 5), "Y": (rows, 5), "dY": (rows, 5)})
    pb.u32("argmax", (rows * 5 - 1,), "other")
    side = "Y" if "Y" in bufs else "dY"
    pb.buffers[side]["bytes"] += 8
    with pytest.raises(ValueError, match=rf"{name}: buffer {side} has .* an h matrix \[84, 5\]"):
        launcher(pb, "p", **bufs, **POOL_OK)
    if "argmax" in bufs:
        pb.buffers[side]["bytes"] -= 8
        with pytest.raises(ValueError, match=rf"{name}: buffer argmax has 1676 bytes, .* u32 argmax \[420\]"):
            launcher(pb, "p", **bufs, **POOL_OK)


def test_repack_h_refuses_bad_sizes_and_buffers():
    with pytest.raises(
        ValueError,
        match=r"rows_in\*cols_in == rows_out\*cols_out, got rows_in=4, cols_in=3, rows_out=2, cols_out=5",
    ):
        ops.repack_h(_builder({}), "p", X="X", Y="Y", rows_in=4, cols_in=3, rows_out=2, cols_out=5)
    with pytest.raises(ValueError, match=r"repack_h: sizes must be positive"):
        ops.repack_h(_builder({}), "p", X="X", Y="Y", rows_in=0, cols_in=3, rows_out=0, cols_out=5)
    with pytest.raises(ValueError, match=r"repack_h: buffer Y has .* Y, an h matrix \[2, 105\]"):
        ops.repack_h(
            _builder({"X": (70, 3), "Y": (2, 104)}),
            "p",
            X="X",
            Y="Y",
            rows_in=70,
            cols_in=3,
            rows_out=2,
            cols_out=105,
        )


# --- native and emulated f16 agree bit for bit ---------------------------------------------------

test_native_matches_emulated = CASES.native_matches_emulated()


# --- the references against PyTorch ----------------------------------------------------------------


@pytest.mark.slow
def test_references_match_torch():
    """im2col @ W is conv2d, col2im(dY @ W^T) its input gradient; maxpool (values, indices per
    plane), avgpool and their gradients: torch.nn.functional in float64, via autograd."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(7)

    def nchw(rows, B, H, W, C):  # pixel rows [B*H*W, C] -> [B, C, H, W]
        return torch.tensor(rows.reshape(B, H, W, C).transpose(0, 3, 1, 2).copy(), requires_grad=True)

    def rows_of(t):
        B, C, H, W = t.shape
        return t.detach().numpy().transpose(0, 2, 3, 1).reshape(B * H * W, C)

    for g in CONV.values():
        s = conv_sizes(g)
        B, C, H, W, KH, KW = (s[k] for k in ("B", "C", "H", "W", "KH", "KW"))
        X = rng.standard_normal((B * H * W, C))
        Wm = rng.standard_normal((KH * KW * C, 4))
        x = nchw(X, B, H, W, C)
        w = torch.tensor(Wm.reshape(KH, KW, C, 4).transpose(3, 2, 0, 1).copy())
        y = F.conv2d(x, w, stride=(s["SH"], s["SW"]), padding=(s["PH"], s["PW"]))
        assert np.allclose(ref.im2col(X, **s) @ Wm, rows_of(y), atol=1e-12)
        dY = rng.standard_normal(y.shape)
        y.backward(torch.tensor(dY))
        assert np.allclose(ref.col2im(rows_of(torch.tensor(dY)) @ Wm.T, **s), rows_of(x.grad), atol=1e-12)

    for g in POOL.values():
        s = pool_sizes(g)
        B, C, H, W, K, S, P = s.values()
        X = rng.standard_normal((B * H * W, C))
        x = nchw(X, B, H, W, C)
        y, idx = F.max_pool2d(x, K, S, P, return_indices=True)
        Y, argmax = ref.maxpool_fwd(X, **s)
        assert np.array_equal(Y, rows_of(y))
        planes = np.repeat(np.arange(B), len(Y) // B)[:, None] * H * W  # torch counts within (b, c)
        assert np.array_equal(argmax - planes, rows_of(idx))
        dY = rng.standard_normal(y.shape)
        y.backward(torch.tensor(dY))
        assert np.allclose(
            ref.maxpool_bwd(rows_of(torch.tensor(dY)), argmax, B, C, H, W), rows_of(x.grad), atol=1e-12
        )
        x = nchw(X, B, H, W, C)
        y = F.avg_pool2d(x, K, S, P)
        assert np.allclose(ref.avgpool_fwd(X, **s), rows_of(y), atol=1e-12)
        y.backward(torch.tensor(dY))
        assert np.allclose(ref.avgpool_bwd(rows_of(torch.tensor(dY)), **s), rows_of(x.grad), atol=1e-12)
