"""The matmul kernels (webmp/ops/matmuls.py) against their numpy references on each storage path, at
shapes that are not multiples of any tile or workgroup size: every variant, core and tile shape, the
plan's choices of stores and B loads (c_quads, b_pairs, b_quads), the subgroup core's single K
loop where the subgroup layout is known (SG_LAYOUT), activations on load and the
rounding they get (round_h), the store's overflow flag. How the bounds are derived: kernel_cases.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import FLAG_H_STORE, Cases, assert_same_bits, rand_h, rng_for, stored_bound

from webmp import ops
from webmp.engine.runtime import default_gpu
from webmp.ops import matmuls
from webmp.testing import reference as ref
from webmp.testing.probe import run_matmul, run_op
from webmp.testing.reference import U32, check_close

# Every kernel run is a registered case, cached per path (kernel_cases.Cases).
CASES = Cases()
kernel_case, run = CASES.case, CASES.run


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
    # SiLU and Tanh (ACT_CODES 3, 4) on load and in the dgrad epilogue
    "fwd_silu": ("matmul_fwd", 0, 0, 3, 0),
    "logits_NT_tanh": ("matmul_logits", 0, 1, 4, 0),
    "dgrad_silu": ("matmul_dgrad", 0, 1, 0, 3),
    "dgrad_tanh": ("matmul_dgrad", 0, 1, 0, 4),
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


# the fast tier keeps fwd_gelu (every core, both stores); the other variants (3-20 s each here) are slow
BITS_CASES = [
    "fwd_gelu",
    *(pytest.param(c, marks=pytest.mark.slow) for c in ("logits_TT_relu", "wgrad_gelu", "dgrad_gelu")),
]


@pytest.mark.parametrize("case", BITS_CASES)
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


@pytest.mark.parametrize("case", BITS_CASES)
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
            m.setattr(matmuls, "c_quads", lambda *a: False)
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
    """B_PAIRS reads two words of op(B) a load (shaders/matmuls/matmul_reg.wgsl): only a register core
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


def test_one_k_loop_only_where_the_subgroups_are_known():
    """SG_LAYOUT = 1 (matmul_reg_a_sg.wgsl compiles k_loop alone) only for the subgroup core, where
    the plan knows the device's subgroup width (a runtime's own lavapipe: its SIMD width) and every
    subgroup of the tiles' workgroup is threads of one row of C, at least min(TM, 8) of them."""
    from webmp.engine.adapters import AdapterInfo
    from webmp.engine.plan import PlanBuilder
    from webmp.engine.subgroups import shares_rows, subgroup_width

    lvp = AdapterInfo(vendor="llvmpipe", device="llvmpipe (LLVM 15.0.6, 256 bits)", subgroups=True)
    assert subgroup_width(lvp) == 8
    assert (
        subgroup_width(
            AdapterInfo(vendor="llvmpipe", device="llvmpipe (LLVM 15.0.6, 128 bits)", subgroups=True)
        )
        == 4
    )
    assert subgroup_width(AdapterInfo(vendor="llvmpipe", device="llvmpipe (LLVM 15.0.6, 256 bits)")) == 0
    assert subgroup_width(AdapterInfo(vendor="nvidia", device="RTX", subgroups=True, vendor_id=0x10DE)) == 0
    assert subgroup_width(None) == 0
    t = {"core": "reg_sg", "WG_X": 8, "WG_Y": 4, "TM": 16, "TN": 8}
    assert shares_rows(8, t) and shares_rows(4, {**t, "TM": 4}) and shares_rows(8, {**t, "WG_X": 16})
    assert not shares_rows(0, t)  # unknown
    assert not shares_rows(8, {**t, "WG_X": 4})  # a subgroup spans two rows of threads
    assert not shares_rows(4, t)  # 4 lanes hold 4 of the 8 words a step shares
    for width, core, want in ((8, "reg_sg", 1), (0, "reg_sg", 0), (8, "reg", 0)):
        pb = PlanBuilder("native")
        pb.subgroup_width = width
        pb.u32("flags", (4,), "other")
        pb.h("A", 4, 8), pb.h("B", 8, 8), pb.h("C", 4, 8)
        ops.matmul(pb, "p", "matmul_plain", A="A", B="B", C="C", M=4, N=8, K=8, tiles={**t, "core": core})
        (k,) = pb.kernels.values()
        assert k["constants"].get("SG_LAYOUT", 0) == want, (width, core)


def _lavapipe_with_subgroups():
    gpu = default_gpu()
    if not (gpu.has_subgroups and "llvmpipe" in gpu.name):
        pytest.skip("the layout these plans assume is lavapipe's (its SIMD width, x fastest)")
    return gpu


def test_one_k_loop_gives_the_two_loops_bits(path, monkeypatch):
    """With SG_LAYOUT = 1 the subgroup core's kernels give the bits of the kernels that choose their
    K loop at run time (the same k_loop runs), at a shape of no block's multiples, every transpose."""
    gpu = _lavapipe_with_subgroups()
    tiles = [t for t in CORE_TILES if t["core"] == "reg_sg" and t["WG_X"] % 8 == 0]
    for case in ("fwd_gelu", "logits_TT_relu"):
        variant, A, B, opts = _bits_case(case, path, 37, 47, 67, seed=5)
        for t in tiles:
            want = run_matmul(variant, A, B, **opts, tiles=t, path=path, gpu=gpu)
            with monkeypatch.context() as m:
                m.setattr(matmuls, "shares_rows", lambda width, tiles: True)
                got = run_matmul(variant, A, B, **opts, tiles=t, path=path, gpu=gpu)
            assert_same_bits(f"{case} {t}", got, want)


def test_a_runs_own_lavapipe_plans_take_one_k_loop():
    """A plan for the runtime's own lavapipe (TileTable.for_adapter with its adapter info: the
    shipped subgroup-core tiles) gives every subgroup-core matmul SG_LAYOUT = 1; one with the same
    shipped tiles but no device of its own (what a page's plans get) gives none."""
    from webmp.config import TrainConfig
    from webmp.data.text import load_training_data
    from webmp.engine.tiles import TileTable
    from webmp.models import build_plan

    gpu = _lavapipe_with_subgroups()
    cfg = TrainConfig(model="mlp", batch_size=32, hidden=[48])
    path = "native" if gpu.has_f16 else "emulated"
    own = TileTable.for_adapter(gpu.name, gpu.info)
    for tiles, want in ((own, 1), (TileTable({}, gpu.name, own.shipped), 0)):
        plan, _ = build_plan(cfg, load_training_data(cfg), path, tiles, dry=True)
        sg = [k for k in plan["kernels"] if "matmul_reg_a_sg.wgsl" in k["sources"]]
        assert sg and {k["constants"].get("SG_LAYOUT", 0) for k in sg} == {want}


def test_a_wrong_subgroup_layout_is_refused(monkeypatch):
    """A plan whose SG_LAYOUT kernels assume subgroups this device does not have (here 4 threads
    along x, where lavapipe's subgroup of 8 spans two rows) is refused before any pipeline, by the
    runtime's probe: the fallback loop those kernels lack would be needed."""
    gpu = _lavapipe_with_subgroups()
    variant, A, B, opts = _bits_case("fwd_gelu", "native" if gpu.has_f16 else "emulated", 9, 16, 8, seed=1)
    monkeypatch.setattr(matmuls, "shares_rows", lambda width, tiles: True)
    t = {"core": "reg_sg", "WG_X": 4, "WG_Y": 4, "TM": 4, "TN": 4}
    with pytest.raises(
        RuntimeError, match=r"SG_LAYOUT = 1.*4 x 4 workgroup's subgroups have 8\+ lanes spanning"
    ):
        run_matmul(variant, A, B, **opts, tiles=t, path="native" if gpu.has_f16 else "emulated", gpu=gpu)


@kernel_case("matmul/act_on_load/4096")
def _act_on_load_case(name, path):
    a = np.linspace(-12, 12, 4096)
    a = ref.round_h(a, path)
    return {"a": a}, {
        k: run_matmul(
            "matmul_wgrad", a[None, :], np.ones((1, 1)), trans_a=1, a_act=k, path=path, gpu=default_gpu()
        )["C"][:, 0]
        for k in (1, 2, 3, 4)
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


# --- native and emulated f16 agree bit for bit ---------------------------------------------------

test_native_matches_emulated = CASES.native_matches_emulated()
