"""Every kernel against its numpy reference, on each storage path (native f16, emulated f16, fp32),
at shapes that are not multiples of any tile or workgroup size.

Kernels run through webmp.testing.probe (the plan builder and runtime training uses). References
(webmp.testing.reference) give the exact float64 value of each operation on the values the kernel reads;
each test bounds |GPU - exact| elementwise by the arithmetic the kernel does:
  - an f32 sum of n terms errs by at most dot_error(n) * sum|terms|, ~ 2 (n + 1) U32;
  - a store in the activation format adds < 1 ulp: 2 U16 = 2^-10 relative for f16 (WGSL lets a
    conversion round to either neighbour), 2^-24 absolute for f16 subnormals, 2 U32 for fp32.
So in the f16 paths the store term, ~1e-3 relative, dominates; in fp32 the bounds are ~1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import Cases, assert_same_bits, rand_h, rng_for, softmax_run, stored_bound

from webmp import ops
from webmp.engine.runtime import default_gpu
from webmp.engine.state import decode_records, decode_state, encode_state
from webmp.testing import reference as ref
from webmp.testing.probe import run_matmul, run_op
from webmp.testing.reference import U32, check_close, dot_error

FLAG_H_STORE, FLAG_MASTER_GRAD, FLAG_LOSS = 1, 2, 4
NO_LABEL = 0xFFFFFFFF


# Every kernel run is a registered case, cached per path (kernel_cases.Cases).
CASES = Cases()
RUNS, kernel_case, run = CASES.runs, CASES.case, CASES.run


# --- matmuls -----------------------------------------------------------------------------------

# (M, N, K); N = 44: C in whole 4-column groups, stored a group at once (webmp.ops.c_quads)
MATMUL_SHAPES = [(1, 1, 1), (17, 33, 65), (130, 7, 257), (19, 44, 65)]
# (variant, trans_a, trans_b, a_act, out_act). Pipelines compile slowly on a CPU adapter, so the
# cases are chosen to cover each code path once: the four variants as training uses them (with
# both transposes via matmul_logits) at every shape, the remaining activation and transpose
# combinations at one odd shape.
MATMUL_CASES = {
    "fwd_gelu": ("matmul_fwd", 0, 0, 2, 0),
    "logits_TT_relu": ("matmul_logits", 1, 1, 1, 0),
    "wgrad_gelu": ("matmul_wgrad", 1, 0, 2, 0),
    "dgrad_gelu": ("matmul_dgrad", 0, 1, 0, 2),
    "fwd": ("matmul_fwd", 0, 0, 0, 0),
    "logits_TN": ("matmul_logits", 1, 0, 0, 0),
    "logits_NT": ("matmul_logits", 0, 1, 0, 0),
    "dgrad_relu": ("matmul_dgrad", 0, 1, 0, 1),
}
MATMUL_NAMES = [
    f"matmul/{case}/{M}x{N}x{K}" for case in list(MATMUL_CASES)[:4] for M, N, K in MATMUL_SHAPES
] + [f"matmul/{case}/17x33x65" for case in list(MATMUL_CASES)[4:]]
# Tile shapes other than the default (webmp/tune/native.py picks among such per adapter) must be right
# too; NN and TT cover all four ways of staging the operands.
# The register-blocked cores (matmul_reg.wgsl: no workgroup memory) read each transpose their own
# way, and their A loader with subgroups differs: all four transposes, TM and TN 4 and 8.
TILE_VARIANTS = {
    "8x8_t8x8_k8": {"WG_X": 8, "WG_Y": 8, "TM": 8, "TN": 8, "BK": 8},
    "4x4_t4x4_k32": {"WG_X": 4, "WG_Y": 4, "TM": 4, "TN": 4, "BK": 32},
    "reg_8x4_t8x8": {"core": "reg", "WG_X": 8, "WG_Y": 4, "TM": 8, "TN": 8},
    "sg_8x2_t4x4": {"core": "reg_sg", "WG_X": 8, "WG_Y": 2, "TM": 4, "TN": 4},
    # 16-row blocks, op(B) read two words a load (N = 35: 18 words a row, the last one half padding)
    "sg_8x2_t16x8_pairs": {"core": "reg_sg", "WG_X": 8, "WG_Y": 2, "TM": 16, "TN": 8, "B_PAIRS": 1},
    "reg_8x2_t16x4_pairs": {"core": "reg", "WG_X": 8, "WG_Y": 2, "TM": 16, "TN": 4, "B_PAIRS": 1},
}
PAIR_VARIANTS = ("sg_8x2_t16x8_pairs", "reg_8x2_t16x4_pairs")  # (the compact loop: CORE_TILES)
TILE_NAMES = (
    [
        f"matmul/{case}/17x33x65/{t}"
        for t in TILE_VARIANTS
        if t not in PAIR_VARIANTS
        for case in ("fwd_gelu", "logits_TT_relu")
    ]
    + [
        f"matmul/{case}/17x33x65/{t}"
        for t in ("reg_8x4_t8x8", "sg_8x2_t4x4")
        for case in ("wgrad_gelu", "dgrad_gelu")
    ]
    + [
        f"matmul/{case}/17x35x65/{t}"
        for t in PAIR_VARIANTS
        for case in ("fwd_gelu", "wgrad_gelu")  # B not transposed: read in pairs
    ]
    + [  # N = 47: 24 words a row, so the 16 x 8 blocks read four words a load (webmp.ops.b_quads)
        f"matmul/{case}/17x47x65/sg_8x2_t16x8_pairs" for case in ("fwd_gelu", "wgrad_gelu")
    ]
)


def _matmul_case(name, path):
    parts = name.split("/")
    variant, ta, tb, a_act, out_act = MATMUL_CASES[parts[1]]
    M, N, K = map(int, parts[2].split("x"))
    tiles = TILE_VARIANTS[parts[3]] if len(parts) > 3 else None
    if tiles and tiles.get("core") == "reg_sg" and not default_gpu().has_subgroups:
        pytest.skip("the adapter has no subgroups")
    rng = rng_for(name, path)
    inp = {
        "A": rand_h(rng, (K, M) if ta else (M, K), path),
        "B": rand_h(rng, (N, K) if tb else (K, N), path),
        "bias": rng.standard_normal(N).astype(np.float32),
        "zprev": rand_h(rng, (M, N), path, 2.0),
    }
    out = run_matmul(
        variant,
        inp["A"],
        inp["B"],
        bias=inp["bias"],
        zprev=inp["zprev"],
        trans_a=ta,
        trans_b=tb,
        a_act=a_act,
        out_act=out_act,
        padded=True,
        tiles=tiles,
        path=path,
        gpu=default_gpu(),
    )
    return inp, out


for _name in MATMUL_NAMES + TILE_NAMES:
    kernel_case(_name)(_matmul_case)


@pytest.mark.parametrize("name", MATMUL_NAMES + TILE_NAMES)
def test_matmul(name, path):
    inp, out = run(name, path)
    variant, ta, tb, a_act, out_act = MATMUL_CASES[name.split("/")[1]]
    A, B, bias, zprev = inp["A"], inp["B"], inp["bias"], inp["zprev"]
    opts = dict(trans_a=ta, trans_b=tb, a_act=a_act, path=path)
    exact = ref.matmul(A, B, **opts)
    has_bias = variant in ("matmul_fwd", "matmul_logits")
    err = ref.matmul_error(A, B, **opts, extra=bias if has_bias else None)
    if has_bias:
        exact = exact + bias
    if variant == "matmul_dgrad":
        # times act'(Zprev) in f32: the product's error, act' evaluated in f32, one more rounding
        g, g_err = ref.act_grad(zprev, out_act), ref.act_grad_error(zprev, out_act)
        err = err * (np.abs(g) + g_err) + np.abs(exact) * g_err + 2 * U32 * np.abs(exact * g)
        exact = ref.matmul_dgrad(A, B, zprev, out_act, path=path)
    N = exact.shape[1]
    C = out["C"]
    if variant in ("matmul_fwd", "matmul_dgrad"):
        err = stored_bound(exact, err, path)
        if N % 2:
            assert not C[:, N].any(), "the padding half of odd rows must stay zero"
        C = C[:, :N]
        assert out["flags"][0] == 0, "no value here comes near the f16 range"
    check_close(C, exact, err, name)


CORE_TILES = [
    {"core": "tiled", "WG_X": 4, "WG_Y": 4, "TM": 4, "TN": 4, "BK": 32},
    {"core": "reg", "WG_X": 8, "WG_Y": 4, "TM": 8, "TN": 8},
    {"core": "reg", "WG_X": 4, "WG_Y": 2, "TM": 4, "TN": 4},
    {"core": "reg_sg", "WG_X": 8, "WG_Y": 4, "TM": 8, "TN": 4},
    {"core": "reg_sg", "WG_X": 8, "WG_Y": 1, "TM": 4, "TN": 8},
    {"core": "reg_sg", "WG_X": 8, "WG_Y": 2, "TM": 16, "TN": 8, "B_PAIRS": 1},
    {"core": "reg", "WG_X": 8, "WG_Y": 4, "TM": 16, "TN": 4, "B_PAIRS": 1, "RUNTIME_DIMS": 1},
    # 4 threads along x: a subgroup of 8 spans two rows of threads, so the subgroup core takes its
    # compact per-thread K loop (k_loop_compact)
    {"core": "reg_sg", "WG_X": 4, "WG_Y": 4, "TM": 16, "TN": 8, "B_PAIRS": 1},
]


def _bits_case(case, path, M, N, K, seed):
    """A MATMUL_CASES case's variant, random operands and run_matmul options at M x N x K."""
    variant, ta, tb, a_act, out_act = MATMUL_CASES[case]
    rng = np.random.default_rng(seed)
    A = rand_h(rng, (K, M) if ta else (M, K), path)
    B = rand_h(rng, (N, K) if tb else (K, N), path)
    bias, zprev = rng.standard_normal(N).astype(np.float32), rand_h(rng, (M, N), path, 2.0)
    opts = dict(bias=bias, zprev=zprev, trans_a=ta, trans_b=tb, a_act=a_act, out_act=out_act, padded=True)
    return variant, A, B, opts


@pytest.mark.parametrize("case", ["fwd_gelu", "logits_TT_relu", "wgrad_gelu", "dgrad_gelu"])
def test_matmul_cores_give_the_same_bits(case, path):
    """Every core accumulates each output in k order, one fma per k from zero (f32 operands that
    are f16 values, exact), so on one adapter each core and tile shape gives the default's bits:
    a tuner's choice never moves a curve. On lavapipe they do; another compiler may fuse the fmas
    of one kernel and not another's, and then test_matmul's bounds are what holds. K is odd
    (the register cores' last step is half a word), M, N are not multiples of any block; N = 47
    is 24 words a row, so B_PAIRS tiles read a non-transposed B two words a load."""
    variant, A, B, opts = _bits_case(case, path, 37, 47, 67, seed=7)
    gpu = default_gpu()
    want = run_matmul(variant, A, B, **opts, path=path, gpu=gpu)
    for tiles in CORE_TILES:
        if tiles["core"] == "reg_sg" and not gpu.has_subgroups:
            continue
        got = run_matmul(variant, A, B, **opts, tiles=tiles, path=path, gpu=gpu)
        assert_same_bits(f"{case} {tiles}", got, want)


@pytest.mark.parametrize("case", ["fwd_gelu", "logits_TT_relu", "wgrad_gelu", "dgrad_gelu"])
def test_matmul_c_quads_store_the_same_bits(case, path, monkeypatch):
    """Where C is in whole 4-column groups (N = 44) the matmuls store a group at once
    (matmul_f32_out4.wgsl, matmul_h_store4.wgsl); the values and places are those of the
    per-word stores, with every core's rows."""
    variant, A, B, opts = _bits_case(case, path, 37, 44, 67, seed=11)
    gpu = default_gpu()
    for tiles in (CORE_TILES[0], CORE_TILES[5], CORE_TILES[6]):
        if tiles["core"] == "reg_sg" and not gpu.has_subgroups:
            continue
        quads = run_matmul(variant, A, B, **opts, tiles=tiles, path=path, gpu=gpu)
        with monkeypatch.context() as m:
            m.setattr(ops, "c_quads", lambda *a: False)
            words = run_matmul(variant, A, B, **opts, tiles=tiles, path=path, gpu=gpu)
        assert_same_bits(f"{case} {tiles}", quads, words)


def test_c_quads_only_where_every_group_is_whole():
    """A matmul stores C a 4-column group at once only where N and C's offsets and row stride are
    multiples of 4; the plan carries the choice as the kernel's store file."""
    from webmp.engine.plan import PlanBuilder
    from webmp.ops import Layout, c_quads

    assert c_quads(44, None) and c_quads(44, Layout(off=8, sb=176, sh=44, ld=88))
    assert not c_quads(46, None)  # 23 words a row
    assert not c_quads(47, None)
    assert not c_quads(44, Layout(off=2))  # a batch starting mid-group
    assert not c_quads(44, Layout(sh=6))
    assert not c_quads(44, Layout(ld=90))
    for variant, store in (("matmul_plain", "matmul_h_store"), ("matmul_wgrad", "matmul_f32_out")):
        pb = PlanBuilder("native")
        pb.u32("flags", (4,), "other")
        for N in (44, 46):
            pb.h(f"A{N}", 8, 8)
            pb.h(f"B{N}", 8, N)
            if variant == "matmul_plain":
                pb.h(f"C{N}", 8, N)
            else:
                pb.f32(f"C{N}", (8, N), "other")
            ops.matmul(pb, "p", variant, A=f"A{N}", B=f"B{N}", C=f"C{N}", M=8, N=N, K=8)
        by_name = {k["name"]: k["sources"] for k in pb.kernels.values()}
        got = [by_name[d["kernel"]] for d in pb.programs["p"]]
        assert f"{store}4.wgsl" in got[0] and f"{store}.wgsl" not in got[0]
        assert f"{store}.wgsl" in got[1] and f"{store}4.wgsl" not in got[1]


def test_b_pairs_only_where_every_pair_starts_on_an_even_word():
    """B_PAIRS reads two words of op(B) a load (shaders/matmul_reg.wgsl): only a register core
    asking for it, B not transposed, every row and batch of B starting on an even word; else the
    same tiles read a word a load. The plan carries the choice as the kernel's constant."""
    from webmp.engine.plan import PlanBuilder
    from webmp.ops import Layout, b_pairs, b_quads

    t = {"core": "reg", "WG_X": 8, "WG_Y": 2, "TM": 16, "TN": 4, "B_PAIRS": 1}
    assert b_pairs(t, 0, 44, None) == 1  # 22 words a row
    assert b_pairs(t, 0, 47, None) == 1  # 24 words a row, its last half padding
    assert b_pairs(t, 0, 45, None) == 0  # 23 words: every other row starts on an odd word
    assert b_pairs(t, 1, 44, None) == 0  # B^T: its words hold k pairs of one column
    assert b_pairs(t, 0, 44, Layout(off=4, sb=96, sh=8, ld=48)) == 1
    assert b_pairs(t, 0, 44, Layout(off=2)) == 0  # a batch starting on an odd word
    assert b_pairs(t, 0, 44, Layout(sh=6, ld=48)) == 0
    assert b_pairs(t, 0, 44, Layout(ld=46)) == 0  # 23 words between rows
    assert b_pairs({k: v for k, v in t.items() if k != "B_PAIRS"}, 0, 44, None) == 0
    # quads: 8-column blocks on an f16 path, rows and batches on whole quads, B's buffer whole quads
    t8 = {**t, "TN": 8}
    assert b_quads(t8, 48, None, "native", None)  # 24 words a row, the buffer its rows
    assert b_quads(t8, 47, None, "emulated", 67 * 24 * 4)
    assert not b_quads(t8, 48, None, "fp32", None)  # a word is 8 bytes there: pairs only
    assert not b_quads(t, 48, None, "native", None)  # 4-column blocks
    assert not b_quads(t8, 44, None, "native", None)  # 22 words a row
    assert not b_quads(t8, 48, Layout(off=4), "native", 4096)  # a batch starting mid-quad
    assert not b_quads(t8, 48, Layout(sb=48 * 8), "native", 8 * 48 * 2 + 8)  # the buffer's tail
    assert not b_quads(t8, 48, Layout(sb=48 * 8), "native", None)  # a layout, the buffer unknown
    assert b_pairs({"WG_X": 8, "WG_Y": 8, "TM": 8, "TN": 8, "BK": 8, "B_PAIRS": 1}, 0, 44, None) == 0

    pb = PlanBuilder("native")
    pb.u32("flags", (4,), "other")
    for N in (44, 45):
        pb.h(f"B{N}", 8, N)
        pb.h(f"C{N}", 4, N)
    pb.h("A", 4, 8)
    for N in (44, 45):
        ops.matmul(pb, "p", "matmul_plain", A="A", B=f"B{N}", C=f"C{N}", M=4, N=N, K=8, tiles=t)
    pairs = [k["constants"].get("B_PAIRS", 0) for k in pb.kernels.values()]
    assert pairs == [1, 0]
    pb.h("B48", 8, 48)
    pb.h("C48", 4, 48)
    ops.matmul(pb, "q", "matmul_plain", A="A", B="B48", C="C48", M=4, N=48, K=8, tiles={**t, "TN": 8})
    (quads,) = [k for k in pb.kernels.values() if "matmul_b_quads.wgsl" in k["sources"]]
    assert quads["constants"]["B_PAIRS"] == 1 and "matmul_b_pairs.wgsl" not in quads["sources"]


@kernel_case("matmul/act_on_load/4096")
def _act_on_load_case(name, path):
    a = np.linspace(-12, 12, 4096)
    a = ref.round_h(a, path)
    return {"a": a}, {
        k: run_matmul(
            "matmul_wgrad", a[None, :], np.ones((1, 1)), trans_a=1, a_act=k, path=path, gpu=default_gpu()
        )["C"][:, 0]
        for k in (1, 2)
    }


def test_matmul_act_on_load_rounds(path):
    """A_ACT operands are act(x) rounded to the storage precision, as if the activation had been
    stored: C = act(a) * 1 shows them directly (one product, f32 output). The emulated path once
    lost this rounding to a compiler folding unpack2x16float(pack2x16float(x)) into x."""
    inp, out = run("matmul/act_on_load/4096", path)
    a = inp["a"]
    for code, got in out.items():
        exact = ref.act_fwd(a, code)
        assert np.array_equal(ref.round_h(got, path), got), (
            f"act {code}: operands not rounded to the storage format"
        )
        bound = stored_bound(exact, ref.act_fwd_error(a, code), path)
        check_close(got, exact, bound, f"act {code} on load")


def _f16_ties():
    """Every value halfway between two consecutive finite f16 values (normal and subnormal,
    both signs; f32 holds them exactly), and their f32 neighbours on both sides."""
    h = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)  # 0 .. 65504
    ties = ((h[:-1] + h[1:]) / 2).astype(np.float32)
    assert (ties.astype(np.float64) == (h[:-1] + h[1:]) / 2).all()
    near = [np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(0))]
    x = np.concatenate([ties, *near])
    return np.concatenate([x, -x])


@kernel_case("round_h/f16_ties")
def _round_h_case(name, path):
    x = _f16_ties()
    return {"x": x}, run_op(ops.round_h, {"x": x}, {"out": x.shape}, N=len(x), path=path, gpu=default_gpu())


def test_h_round_ties_to_even(f16_path):
    """h_round (the f16 preludes' f16_round, what A_ACT operands get) against numpy's
    round-to-nearest-even bit for bit on every tie between f16 neighbours, normal and subnormal,
    and on the f32 values next to each tie. test_matmul_act_on_load_rounds cannot tell: it accepts
    either neighbour and its grid never hits a tie, so rounding ties away from zero passed it."""
    inp, out = run("round_h/f16_ties", f16_path)
    x, got = inp["x"], out["out"]
    want = x.astype(np.float16).astype(np.float32)
    same = (got.view(np.uint32) == want.view(np.uint32)) | ((got == 0) & (want == 0))  # +-0 alike
    bad = np.flatnonzero(~same)
    assert not len(bad), (
        f"{len(bad)} of {len(x)} values rounded differently, e.g. {x[bad[:4]].tolist()} -> "
        f"{got[bad[:4]].tolist()}, numpy {want[bad[:4]].tolist()}"
    )


@pytest.mark.parametrize("variant", ["matmul_fwd", "matmul_dgrad"])
def test_matmul_store_overflow_is_bit_based(variant, path):
    """The store flag tests |x| >= 65504 on the f32 bits, so a conversion that saturates to 65504
    instead of giving Inf still counts as overflow; 65472 (the next f16 below) does not."""
    dgrad = int(variant == "matmul_dgrad")

    def store(a, b):
        """(flags, stored value) of the 1x1 product a * b (act' = 1 for dgrad)."""
        out = run_matmul(
            variant,
            np.full((1, 1), a),
            np.full((1, 1), b),
            zprev=np.ones((1, 1)),
            trans_b=dgrad,
            path=path,
            gpu=default_gpu(),
        )
        return int(out["flags"][0]), float(out["C"][0, 0])

    below = ref.F16_MAX - 32  # the next f16 below the maximum
    if path == "fp32":
        assert store(1.0, ref.F16_MAX) == (0, ref.F16_MAX) and store(2.0, 5e4) == (0, 1e5), (
            "f32 storage holds these"
        )
        assert store(2.0, 3e38)[0] == FLAG_H_STORE, "an f32 product overflowing to Inf is flagged"
        return
    assert store(1.0, below) == (0, below)
    assert store(1.0, ref.F16_MAX) == (FLAG_H_STORE, ref.F16_MAX), (
        "f16 max is flagged (a saturated store reads it)"
    )
    flag, stored = store(2.0, -35000.0)
    assert flag == FLAG_H_STORE and stored in (-ref.F16_MAX, -np.inf), stored


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
    Z, gamma, beta = inp["Z"], inp["gamma"].astype(np.float64), inp["beta"].astype(np.float64)
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
    assert out["flags"][0] == 0


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


# --- overflow check and gradient norm partials ---------------------------------------------------

GRAD_STATS_NAMES = ["grad_stats/1", "grad_stats/1000", "grad_stats/5000"]
BASE = 2


def _grad_stats_run(G, scale, path):
    N = G.size
    nwg = ops.grad_stats_workgroups(N)
    return run_op(
        ops.grad_stats,
        {
            "G": G.astype(np.float32),
            "state": {"scale": scale},
            "partials": np.full(BASE + nwg + 1, -7.0, np.float32),
            "flags": np.zeros(4, np.uint32),
        },
        ["partials", "flags"],
        N=N,
        BASE=BASE,
        path=path,
        gpu=default_gpu(),
    )


for _n in GRAD_STATS_NAMES:

    @kernel_case(_n)
    def _grad_stats_case(name, path):
        N = int(name.split("/")[1])
        G = (512 * rng_for(name, path).standard_normal(N)).astype(np.float32)
        return {"G": G, "scale": 512.0}, _grad_stats_run(G, 512.0, path)


@pytest.mark.parametrize("name", GRAD_STATS_NAMES)
def test_grad_stats(name, path):
    inp, out = run(name, path)
    N = inp["G"].size
    nwg = ops.grad_stats_workgroups(N)
    partials, bad = ref.grad_stats(inp["G"], inp["scale"], nwg)
    got = out["partials"]
    assert (got[:BASE] == -7.0).all() and got[BASE + nwg] == -7.0, "only this tensor's slots are written"
    # sums of positive terms: dot_error of the longest chain, plus the scaling and squaring
    check_close(got[BASE : BASE + nwg], partials, (dot_error(N) + 8 * U32) * partials, name)
    assert not bad and out["flags"][0] == 0


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_grad_stats_flags_nonfinite(bad, path):
    """The master-gradient site: any Inf or NaN sets FLAG_MASTER_GRAD, wherever it sits."""
    G = np.ones(700, np.float32)
    G[517] = bad
    assert _grad_stats_run(G, 1.0, path)["flags"][0] == FLAG_MASTER_GRAD
    G = np.full(700, 1e30, np.float32)  # huge but finite: no flag
    assert _grad_stats_run(G, 1e20, path)["flags"][0] == 0


# --- the scaler's verdict ---------------------------------------------------------------------

SCALER_BASE = {
    "NUM_PARTIALS": 3,
    "B": 5,
    "LR": 1e-3,
    "TOTAL": 100,
    "RING": 4,
    "WARMUP": 10,
    "INTERVAL": 3,
    "HYSTERESIS": 2,
    "MIN_SCALE": 1.0,
    "LOG_BETA1": ops.adam_log_beta(0.9),
    "LOG_BETA2": ops.adam_log_beta(0.999),
}
STATE0 = {
    "scale": 1024.0,
    "growth_tracker": 0,
    "hysteresis_left": 2,
    "iteration": 20,
    "opt_step": 19,
    "data_pos": 100,
    "skipped_total": 1,
    "min_scale_events": 0,
    "first_min_scale_iter": 0,
    "bc1": 1.0,
    "bc2": 1.0,
}
# name: (state changes, flags word, constant changes)
SCALER_SCENARIOS = {
    "clean": ({}, 0, {}),
    "growth": ({"growth_tracker": 2}, 0, {}),
    "growth_to_inf_is_refused": ({"growth_tracker": 2, "scale": 2.0**127}, 0, {}),
    "overflow_within_hysteresis": ({"growth_tracker": 2}, FLAG_H_STORE, {}),
    "overflow_backs_off": ({"hysteresis_left": 1}, FLAG_MASTER_GRAD, {}),
    "overflow_at_floor": ({"hysteresis_left": 1, "scale": 1.0}, FLAG_LOSS, {}),
    "warmup_and_clip": ({"iteration": 3, "opt_step": 3}, 0, {"CLIP": 0.5, "SCHEDULE": 0}),
    "no_scaling_never_skips": ({}, FLAG_H_STORE | FLAG_LOSS, {"SCALING": 0}),
}


for _n in SCALER_SCENARIOS:

    @kernel_case("scaler/" + _n)
    def _scaler_case(name, path):
        changes, found, consts = SCALER_SCENARIOS[name.split("/")[1]]
        c = {**SCALER_BASE, **consts}
        rng = rng_for(name, path)
        inp = {
            "state": {**STATE0, **changes},
            "found": found,
            "consts": c,
            "partials": np.abs(rng.standard_normal(c["NUM_PARTIALS"])).astype(np.float32),
            "loss_rows": np.abs(rng.standard_normal(c["B"])).astype(np.float32),
        }
        out = run_op(
            ops.scaler_step,
            {
                "state": inp["state"],
                "flags": np.array([found, 0, 0, 0], np.uint32),
                "partials": inp["partials"],
                "loss_rows": inp["loss_rows"],
                "metrics": np.full(c["RING"] * 8, 0xDEADBEEF, np.uint32),
            },
            ["state", "flags", "metrics"],
            constants=c,
            path=path,
            gpu=default_gpu(),
        )
        return inp, out


@pytest.mark.parametrize("scenario", list(SCALER_SCENARIOS))
def test_scaler_step(scenario, path):
    inp, out = run("scaler/" + scenario, path)
    c = inp["consts"]
    want, record = ref.scaler_step(inp["state"], inp["found"], inp["partials"], inp["loss_rows"], c)
    got = out["state"]
    lr_err = 0.5 * c["LR"] * 2.0**-11 + 4 * U32 * c["LR"]  # WGSL cos: 2^-11 absolute on [-pi, pi]
    # bc = 1 - beta^t from t ln(beta) with +, * only (scaler.wgsl's one_minus_pow)
    bc_err = {k: ref.BIAS_CORRECTION_ERROR * want[k] for k in ("bc1", "bc2")}
    float_err = {
        "lr": lr_err,
        "loss": dot_error(c["B"]) * want["loss"],
        "grad_norm": (dot_error(c["NUM_PARTIALS"]) + 8 * U32) * want["grad_norm"],
        # clip / scale: a few divisions; 2^-127 (scale 2^127) is subnormal, which may flush to 0
        "grad_mul": 16 * U32 * want["grad_mul"] + 2.0**-126,
        **bc_err,
    }
    for name, value in want.items():
        if name in float_err:
            check_close(got[name], value, float_err[name], f"{scenario}: state.{name}")
        else:
            assert got[name] == value, f"{scenario}: state.{name} = {got[name]}, expected {value}"
    assert out["flags"][0] == 0, "the scaler clears the flags for the next step"
    words = out["metrics"].reshape(c["RING"], 8)
    slot = inp["state"]["iteration"] % c["RING"]
    assert (np.delete(words, slot, 0) == 0xDEADBEEF).all(), "only this step's ring slot is written"
    rec = decode_records(words[slot].tobytes())[0]
    for name, value in record.items():
        if name in float_err:
            check_close(rec[name], value, float_err[name], f"{scenario}: metrics.{name}")
        else:
            assert rec[name] == value, f"{scenario}: metrics.{name} = {rec[name]}, expected {value}"


# --- AdamW ---------------------------------------------------------------------------------------

ADAM_CONSTS = {"WD": 0.01, "BETA1": 0.9, "BETA2": 0.999, "EPS": 1e-8}
ADAM_STATE = {"apply": 1, "lr": 1e-2, "grad_mul": 1 / 1024, "bc1": 0.19, "bc2": 0.0199}
ROWS, COLS = 5, 7
EPS_ROWS = 2
# adamw_copy's two paths: an odd COLS (each row's last word half padding, the override COLS) and
# an even one (the flat words, no size constant), here on the first ROWS * EVEN_COLS values
EVEN_COLS = COLS - 1
COPY_SHAPES = {"adamw_copy": (ROWS, COLS), "adamw_copy_even": (ROWS, EVEN_COLS)}


for _apply in (1, 0):

    @kernel_case(f"adamw/apply{_apply}")
    def _adamw_case(name, path):
        rng = rng_for(name, path)
        n = ROWS * COLS
        # the last EPS_ROWS rows have gradients and moments so small that sqrt(v / bc2) is about
        # eps (7e-9 against 1e-8): where the kernel adds eps matters there
        tiny = np.repeat([1.0, 1e-9], [(ROWS - EPS_ROWS) * COLS, EPS_ROWS * COLS])
        inp = {
            "P": rng.standard_normal(n).astype(np.float32),
            "G": (1024 * tiny * rng.standard_normal(n)).astype(np.float32),
            "Mo": (0.1 * tiny * rng.standard_normal(n)).astype(np.float32),
            "V": (tiny**2 * (0.01 * rng.random(n) + 1e-4)).astype(np.float32),
            "state": {**ADAM_STATE, "apply": int(name.endswith("1"))},
        }
        outs = {
            "adamw": run_op(
                ops.adamw, inp, ["P", "Mo", "V"], N=n, **ADAM_CONSTS, path=path, gpu=default_gpu()
            )
        }
        for entry, (rows, cols) in COPY_SHAPES.items():
            first = {k: v if k == "state" else v[: rows * cols] for k, v in inp.items()}
            outs[entry] = run_op(
                ops.adamw_copy,
                {**first, "Wh": np.full((rows, cols), 3.0)},
                {"P": None, "Mo": None, "V": None, "Wh": ((rows, cols), "padded")},
                ROWS=rows,
                COLS=cols,
                **ADAM_CONSTS,
                path=path,
                gpu=default_gpu(),
            )
        return inp, outs


@pytest.mark.parametrize("entry", ["adamw", *COPY_SHAPES])
def test_adamw(entry, path):
    inp, outs = run("adamw/apply1", path)
    out = outs[entry]
    P, G, Mo, V = (inp[k].astype(np.float64) for k in ("P", "G", "Mo", "V"))
    st = inp["state"]
    p, m, v = ref.adamw(P, G, Mo, V, st, ADAM_CONSTS)
    m_err, v_err, p_err = ref.adamw_error(P, G, Mo, V, st, ADAM_CONSTS)
    eps_rows = slice((ROWS - EPS_ROWS) * COLS, None)
    denom = np.sqrt(v / st["bc2"])
    assert (denom[eps_rows] < ADAM_CONSTS["EPS"]).all() and (
        denom[: eps_rows.start] > 1e3 * ADAM_CONSTS["EPS"]
    ).all()
    n = out["P"].size
    check_close(out["Mo"], m[:n], m_err[:n], f"{entry} m")
    check_close(out["V"], v[:n], v_err[:n], f"{entry} v")
    check_close(out["P"], p[:n], p_err[:n], f"{entry} P")
    if entry in COPY_SHAPES:
        rows, cols = COPY_SHAPES[entry]
        for k in ("P", "Mo", "V"):  # the same adamw_update on the same values: the same bits
            assert out[k].tobytes() == outs["adamw"][k][:n].tobytes(), f"{entry} {k} differs from adamw's"
        Wh = out["Wh"]
        pm = p[:n].reshape(rows, cols)
        check_close(Wh[:, :cols], pm, stored_bound(pm, p_err[:n].reshape(rows, cols), path), "working copy")
        if cols % 2:
            assert not Wh[:, cols].any(), "padding stays zero"


def test_adamw_skips_when_not_applied(path):
    """apply = 0 (the scaler found an overflow): parameters, moments and the copy keep every bit."""
    inp, outs = run("adamw/apply0", path)
    for entry, out in outs.items():
        n = out["P"].size
        for k in ("P", "Mo", "V"):
            assert out[k].tobytes() == inp[k][:n].tobytes(), f"{entry} changed {k}"
    for entry, (_, cols) in COPY_SHAPES.items():
        assert (outs[entry]["Wh"][:, :cols] == 3.0).all()


class _OptimizerSteps:
    """A plan of scaler_step + adamw on n parameters P (zeros), a fixed gradient G, moments Mo, V
    (zeros), with the scaler constants and AdamW hyperparameters a model's plan takes from `cfg`.
    step() clears P, runs the program and reads state, P, Mo and V back in the same submit (one
    map a step: a readback is the slow part on a CPU adapter)."""

    READ = ("state", "P", "Mo", "V")

    def __init__(self, path, cfg, G):
        import wgpu

        from webmp.engine.plan import PlanBuilder
        from webmp.engine.runtime import Runtime
        from webmp.engine.state import STATE_BYTES, STATE_FIELDS, initial_state
        from webmp.models.common import scaler_constants

        pb = PlanBuilder(path)
        pb.buffer("state", STATE_BYTES, "other", "state", (len(STATE_FIELDS),), initial_state(1.0, 1))
        pb.u32("flags", (4,), "other")
        pb.f32("partials", (1,), "other", [1.0])
        pb.f32("loss_rows", (1,), "other", [1.0])
        pb.u32("metrics", (cfg.log_every, 8), "other")
        self.n = n = len(G)
        for name, init in (("P", np.zeros(n)), ("G", G), ("Mo", np.zeros(n)), ("V", np.zeros(n))):
            pb.f32(name, (n,), "other", init)
        c = scaler_constants(cfg, 1, 1)
        ops.scaler_step(pb, "step", c, partials="partials", loss_rows="loss_rows", metrics="metrics")
        hyper = {"WD": cfg.weight_decay, "BETA1": cfg.beta1, "BETA2": cfg.beta2, "EPS": cfg.eps}
        ops.adamw(pb, "step", P="P", G="G", Mo="Mo", V="V", N=n, **hyper)
        plan = pb.kernel_plan(state="state", metrics="metrics", ring=cfg.log_every)
        self.rt = rt = Runtime(plan, bytes(pb.blob), default_gpu())
        self.sizes = [rt.buffers[k].size for k in self.READ]
        self.staging = rt.device.create_buffer(
            size=sum(self.sizes), usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
        )
        self.map_read = wgpu.MapMode.READ

    def step(self) -> dict:
        rt = self.rt
        enc = rt.device.create_command_encoder()
        enc.clear_buffer(rt.buffers["P"])
        rt.encode(enc, "step")
        off = 0
        for name, size in zip(self.READ, self.sizes, strict=True):
            enc.copy_buffer_to_buffer(rt.buffers[name], 0, self.staging, off, size)
            off += size
        rt.device.queue.submit([enc.finish()])
        self.staging.map_sync(self.map_read)
        try:
            raw = bytes(self.staging.read_mapped())
        finally:
            self.staging.unmap()
        out, off = {}, 0
        for name, size in zip(self.READ, self.sizes, strict=True):
            chunk = raw[off : off + size]
            off += size
            out[name] = decode_state(chunk) if name == "state" else np.frombuffer(chunk, np.float32)[: self.n]
        return out


ADAM_STEPS = 3000


@pytest.mark.slow  # 3000 steps each (test_adamw checks the update in the fast tier)
@pytest.mark.parametrize("beta1,beta2", [(0.9, 0.999), (0.9, 0.95)])
def test_adamw_bias_corrections_over_many_steps(beta1, beta2):
    """3000 optimizer steps (scaler_step + adamw, the state's opt_step counting on the GPU) against
    float64 AdamW with its own bias corrections 1 - beta^t (for the f32 betas the moments use):
    each step's bc1, bc2 within BIAS_CORRECTION_ERROR of the exact value, and each step's update
    (P cleared before the step, so P holds -update) and moments, from the GPU's moments before
    the step, within the f32 bounds of test_adamw. Then single steps at opt_step up to 2^24 - 1.
    `1 - pow(beta, t)` in f32 failed this: bc2 off by 1.2e-4 at t = 1 for beta2 = 0.999."""
    from webmp.config import TrainConfig

    cfg = TrainConfig(
        precision="fp32", lr=1e-2, warmup=0, schedule="constant", weight_decay=0.0, beta1=beta1,
        beta2=beta2, log_every=1, checkpoint_every=0, steps=ADAM_STEPS,
    )  # fmt: skip
    rng = np.random.default_rng(17)
    G = (rng.choice([-1, 1], 16) * 10.0 ** rng.uniform(-3, 1, 16)).astype(np.float32)
    opt = _OptimizerSteps("fp32", cfg, G)
    b1, b2, eps, lr = (float(np.float32(v)) for v in (beta1, beta2, cfg.eps, cfg.lr))
    g = G.astype(np.float64)
    Mo = V = np.zeros(len(G))
    bc_rel = ref.BIAS_CORRECTION_ERROR
    for t in range(1, ADAM_STEPS + 1):
        out = opt.step()
        st = out["state"]
        assert st["opt_step"] == t and st["apply"] == 1
        bc1, bc2 = ref.adam_bias_correction(beta1, t), ref.adam_bias_correction(beta2, t)
        check_close(st["bc1"], bc1, bc_rel * bc1, f"step {t}: bc1")
        check_close(st["bc2"], bc2, bc_rel * bc2, f"step {t}: bc2")
        m = b1 * Mo + (1 - b1) * g
        v = b2 * V + (1 - b2) * g * g
        upd = lr * (m / bc1) / (np.sqrt(v / bc2) + eps)
        m_err = 8 * U32 * (b1 * np.abs(Mo) + (1 - b1) * np.abs(g))
        v_err = 8 * U32 * (b2 * V + (1 - b2) * g * g)
        upd_err = lr / bc1 * m_err / np.sqrt(v / bc2) + np.abs(upd) * (
            0.5 * v_err / v + 24 * U32 + 1.5 * bc_rel
        )
        Mo, V = out["Mo"].astype(np.float64), out["V"].astype(np.float64)
        check_close(Mo, m, m_err, f"step {t}: m")
        check_close(V, v, v_err, f"step {t}: v")
        check_close(out["P"], -upd, upd_err, f"step {t}: update")
    # the counter far along: x = t ln(beta) down to the cutoff, and f32(t) exact below 2^24
    for t in np.unique(np.geomspace(ADAM_STEPS, 2**24 - 1, 60).astype(np.int64)):
        opt.rt.write("state", encode_state({**st, "opt_step": int(t) - 1}))
        st = opt.step()["state"]
        assert st["opt_step"] == t
        for k, beta in (("bc1", beta1), ("bc2", beta2)):
            want = ref.adam_bias_correction(beta, int(t))
            check_close(st[k], want, bc_rel * want, f"opt_step {t}: {k}")


# --- evaluation counters -------------------------------------------------------------------------


@kernel_case("eval/70x10")
def _eval_case(name, path):
    rng = rng_for(name, path)
    B, C = 70, 10
    logits = rng.standard_normal((B, C)).astype(np.float32)
    labels = rng.integers(0, C, B).astype(np.uint32)
    labels[[3, 50, 69]] = NO_LABEL
    io = {"logits": logits, "labels": labels}
    inputs = {**io, "result": np.array([5, 9], np.uint32)}
    reset = run_op(ops.eval_reset, inputs, ["result"], B=B, C=C, path=path, gpu=default_gpu())
    inputs = {**io, "result": np.array([100, 200], np.uint32)}
    count = run_op(ops.eval_count, inputs, ["result"], B=B, C=C, path=path, gpu=default_gpu())
    return io, {"reset": reset, "count": count}


def test_eval_counters(path):
    io, out = run("eval/70x10", path)
    assert out["reset"]["result"].tolist() == [0, 0]
    correct, counted = ref.eval_count(io["logits"], io["labels"])
    assert counted == 67 and correct > 0
    assert out["count"]["result"].tolist() == [100 + correct, 200 + counted], (
        "counts add to the running totals"
    )


# --- the gradient-range lens ----------------------------------------------------------------------


def _grad_hist_values(path: str) -> np.ndarray:
    """[9, 23] values (odd columns: each row's last word holds a pad the kernel must skip) at the
    bucket edges: zeros of both signs, every f16 subnormal power of two and its neighbours, the
    normal floor 2^-14 and the value below it, 2^e and the largest value below 2^(e+1) across the
    range, 65504, Inf, NaN; in fp32 also values below 2^E_MIN (an f32 subnormal), above 2^E_MAX
    and near f32's max; the rest random magnitudes of both signs."""
    f16_edges = [0.0, -0.0, 2.0**-24, 3 * 2.0**-24, 2.0**-15, 2.0**-14 - 2.0**-24, 2.0**-14, 65504.0]
    f16_edges += [np.inf, -np.inf, np.nan, 65472.0, -(2.0**15), 2.0**15 - 32]
    for e in range(-24, 16):
        f16_edges += [2.0**e, -(2.0**e) * 1.5, 2.0**e * (2 - 2.0**-10)]
    values = f16_edges
    if path == "fp32":
        values += [
            2.0**-149,
            2.0**-130,
            2.0**-60,
            2.0**-49,
            2.0**-48,
            2.0**20 * 1.99,
            2.0**21,
            2.0**100,
            3e38,
        ]
    rng = np.random.default_rng(7)
    rest = 9 * 23 - len(values)
    random = rng.choice([-1, 1], rest) * 2.0 ** rng.uniform(-30, 18, rest)
    x = np.concatenate([values, random]).reshape(9, 23)
    with np.errstate(over="ignore"):
        return ref.round_h(x, path) if path != "fp32" else x.astype(np.float32).astype(np.float64)


@kernel_case("grad_hist/edges")
def _grad_hist_case(name, path):
    x = _grad_hist_values(path)
    base, nb = 3, ops.grad_hist_buckets()
    counts = np.full(base + nb + 2, 0, np.uint32)
    out = run_op(
        ops.grad_hist,
        {"X": x, "counts": counts},
        ["counts"],
        ROWS=9,
        COLS=23,
        BASE=base,
        path=path,
        gpu=default_gpu(),
    )
    return {"X": x}, out


def test_grad_hist_counts_like_numpy(path):
    """Every value lands in the bucket of floor(log2 |x|) that numpy's frexp gives, exactly; zeros,
    f16 subnormals, the values either side of each power of two, 65504 (overflow on the f16
    paths, as the training's overflow test says; 2^15 in fp32), Inf and NaN (overflow), and the
    pads of odd rows are not counted. The counters before BASE and after the matrix's stay 0."""
    inp, out = run("grad_hist/edges", path)
    x, got = inp["X"], out["counts"]
    base, nb = 3, ops.grad_hist_buckets()
    with np.errstate(invalid="ignore"):
        want = ref.grad_hist(x, path, ops.GRAD_HIST_E_MIN, ops.GRAD_HIST_E_MAX)
    assert got[:base].tolist() == [0] * base and got[base + nb :].tolist() == [0, 0]
    assert got[base : base + nb].tolist() == want.tolist()
    assert want.sum() == x.size and want[0] >= 2 and want[-1] >= 3
    assert want[2 + (-24 - ops.GRAD_HIST_E_MIN)] > 0  # the smallest f16 subnormal has its bucket
    if path == "fp32":
        assert want[1] >= 3 and want[-2] >= 3  # below 2^E_MIN, above 2^E_MAX


# --- native and emulated f16 agree bit for bit ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(RUNS))
def test_native_matches_emulated(name, gpu):
    """Both f16 paths do the same f32 arithmetic in the same order on the same f16 values; they
    differ only in the conversion builtin that stores (vec2<f16>(v) vs pack2x16float), and both
    round operands with the same integer f16_round. On this adapter the two store conversions
    round alike, so every output is bit-identical, as prelude_emulated.wgsl promises. (WGSL lets
    each conversion pick either neighbour, so an adapter could differ by 1 f16 ulp in stores.)"""
    if not gpu.has_f16:
        pytest.skip("this adapter lacks 'shader-f16': nothing to compare the emulated path with")
    assert_same_bits(name, run(name, "native")[1], run(name, "emulated")[1])
