"""The attention kernels (webmp/ops/attention.py) against their float64 references, on each
storage path (native f16, emulated f16, fp32), at shapes that are not powers of two, T = 1 included.

Shapes are "BxTxHxd" (batch, context, heads, head size). Every product is one batched dispatch over
the B*H batch-heads, reading heads out of qkv [B*T, 3D] and the [B*H*T, T] squares; the tests check
each against webmp.testing.reference with the bounds derived there (bmm_error: dot_error(K) of the
magnitudes; attn_softmax_*_error) and, for f16 stores, stored_bound (one f16 rounding). The end-to-end
test chains those bounds: each stage's bound, given its inputs' bounds, bounds the next stage's
input error (bmm_error's da/db, the softmaxes' S_err, P_err, dP_err), and the f32 SCALE is within
U32 of 1/sqrt(d).
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import FLAG_H_STORE, Cases, rand_h, rng_for, stored_bound

from webmp import ops
from webmp.engine import tiles as engine_tiles
from webmp.engine.runtime import default_gpu
from webmp.testing import reference as ref
from webmp.testing.probe import run_op
from webmp.testing.reference import U32, check_close

SMALL_TILES = {"WG_X": 4, "WG_Y": 4, "TM": 4, "TN": 4, "BK": 8}  # 16 x 16 tiles, K slices of 8
# T = 37 with 16 x 16 tiles: 3 x 3 tiles a product and 5 K slices (dv, values: K = T), per batch-head
# (The end-to-end test adds T = 13, d = 10 for every kernel.)
# The register-blocked core (no workgroup memory; with subgroups where the adapter has them) reads
# the batched operands its own way: 8 x 8 blocks of rows and columns.
REG_TILES = {"WG_X": 8, "WG_Y": 2, "TM": 8, "TN": 8}
# 16-row blocks reading op(B) two words a load: with d = 8 every batch of qkv and dO starts on an
# even word, so the non-transposed B operands (V, K, Q, dO) are read in pairs.
PAIR_TILES = {"WG_X": 8, "WG_Y": 2, "TM": 16, "TN": 8, "B_PAIRS": 1}
# The small-shape default (tiles.SMALL_TILES): the register core with the sizes and the batch
# layouts read from the args uniform at run time (RUNTIME_DIMS).
PRODUCT_SHAPES = [
    "2x7x3x6", "2x1x2x4", "2x37x2x6/small", "2x37x2x6/reg", "2x37x2x6/runtime", "2x7x3x6/runtime",
    "2x37x2x8/pairs",
]  # fmt: skip
# T = 70 > 64 threads: rows that take each thread twice
SOFTMAX_SHAPES = ["2x7x3x6", "2x1x2x4", "1x70x2x4"]
SENTINEL = 7.0  # what dqkv holds where a backward product must not write
PRODUCTS = ops.ATTENTION_PRODUCTS


def parse(shape: str):
    dims, *rest = shape.split("/")
    B, T, H, d = map(int, dims.split("x"))
    if rest in (["reg"], ["pairs"]):
        tiles = REG_TILES if rest == ["reg"] else PAIR_TILES
        return B, T, H, d, {"core": "reg_sg" if default_gpu().has_subgroups else "reg", **tiles}
    if rest == ["runtime"]:
        return B, T, H, d, dict(engine_tiles.SMALL_TILES)
    return B, T, H, d, (SMALL_TILES if rest else None)


def dims(B, T, H, d):
    return {"B": B, "T": T, "H": H, "d": d}


def buffer_shapes(B, T, H, d):
    D = H * d
    return {"qkv": (B * T, 3 * D), "dqkv": (B * T, 3 * D), "O": (B * T, D), "dO": (B * T, D)}


# Every kernel run is a registered case, cached per path (kernel_cases.Cases).
CASES = Cases()
kernel_case, run = CASES.case, CASES.run
NAMES: list[str] = []  # the cases in registration order


def case(name):
    NAMES.append(name)
    return kernel_case(name)


def _op(launcher, inputs, outputs, path, shape, **kw):
    return run_op(launcher, inputs, outputs, path=path, gpu=default_gpu(), **shape, **kw)


# --- the batched products ----------------------------------------------------------------------


def _product_case(name, path):
    product, shape = name.split("/", 2)[1:]
    B, T, H, d, tiles = parse(shape)
    _, (a, _), (b, _), (out_name, _), _, _ = PRODUCTS[product]
    rng = rng_for(name, path)
    rows, shapes = B * H * T, buffer_shapes(B, T, H, d)
    inputs = {k: rand_h(rng, shapes.get(k, (rows, T)), path) for k in (a, b)}
    if out_name in ("S", "dP"):  # f32, no flags
        outputs = {out_name: (rows, T)}
    else:
        inputs["flags"] = np.zeros(4, np.uint32)
        if out_name == "dqkv":
            inputs["dqkv"] = np.full(shapes["dqkv"], SENTINEL)
        outputs = {out_name: shapes[out_name], "flags": None}
    extra = {"tiles": tiles} if tiles else {}
    return inputs, _op(
        ops.attention_matmul, inputs, outputs, path, dims(B, T, H, d), variant=product, **extra
    )


PRODUCT_NAMES = [f"product/{p}/{s}" for p in PRODUCTS for s in PRODUCT_SHAPES]
for _name in PRODUCT_NAMES:
    case(_name)(_product_case)


@pytest.mark.parametrize("name", PRODUCT_NAMES)
def test_product(name, path):
    inp, out = run(name, path)
    product, shape = name.split("/", 2)[1:]
    B, T, H, d, _ = parse(shape)
    out_name, kind = PRODUCTS[product][3]
    part = ops.HEAD_PARTS.get(kind, 0)
    a, b = ref.attention_operands(product, inp, B, T, H, d)
    exact, err = ref.bmm(a, b), ref.bmm_error(a, b)
    got = out[out_name]
    if out_name in ("S", "dP"):
        check_close(ref.attn_squares(got, B, H, T), exact, err, name)  # f32, every entry computed
        return
    check_close(ref.attn_heads(got, B, T, H, d, part), exact, stored_bound(exact, err, path), name)
    if out_name == "dqkv":
        D = H * d
        others = np.delete(got, np.s_[part * D : (part + 1) * D], 1)
        assert (others == SENTINEL).all(), "only this product's third of dqkv is written"
    assert out["flags"][0] == 0, "no value here comes near the f16 range"


def test_attention_matmul_checks_its_arguments():
    from webmp.engine.plan import PlanBuilder

    with pytest.raises(ValueError, match="even head size"):
        ops.attention_matmul(PlanBuilder("native"), "p", "scores", qkv="qkv", S="S", B=1, T=4, H=2, d=5)
    with pytest.raises(ValueError, match="takes the buffers"):
        ops.attention_matmul(PlanBuilder("native"), "p", "scores", qkv="qkv", O="S", B=1, T=4, H=2, d=4)


def test_product_store_overflow(path):
    """dV = P^T dO with uniform causal rows and dO = 40000: dV at key 0 is 40000 * (1 + 1/2 + ... +
    1/7) = 1.04e5, beyond f16 (flagged, stored as the f16 max or Inf) but an ordinary f32 value."""
    B, T, H, d = 1, 7, 1, 4
    P = np.where(ref.causal(T), 1.0 / np.arange(1, T + 1)[:, None], 0.0)
    inputs = {
        "P": ref.round_h(P, path),
        "dO": np.full((T, d), 40000.0),
        "dqkv": np.zeros((T, 3 * d)),
        "flags": np.zeros(4, np.uint32),
    }
    out = _op(ops.attention_matmul, inputs, ["dqkv", "flags"], path, dims(B, T, H, d), variant="dv")
    dv0 = out["dqkv"][0, 2 * d]
    expected = 40000.0 * ref.round_h(P, path)[:, 0].sum()
    if path == "fp32":
        assert out["flags"][0] == 0
        check_close(dv0, expected, ref.dot_error(T) * expected)
    else:
        assert out["flags"][0] == FLAG_H_STORE
        assert dv0 in (ref.F16_MAX, np.inf), dv0


# --- the causal softmax, forward and backward --------------------------------------------------


def _scores(rng, B, T, H, d):
    """Scores whose scaled values have standard deviation 3."""
    return (3 * np.sqrt(d) * rng.standard_normal((B * H * T, T))).astype(np.float32)


for _s in SOFTMAX_SHAPES:

    @case(f"softmax_fwd/{_s}")
    def _softmax_fwd_case(name, path):
        B, T, H, d, _ = parse(name.split("/", 1)[1])
        S = _scores(rng_for(name, path), B, T, H, d)
        inputs = {"S": S, "flags": np.zeros(4, np.uint32)}
        outputs = {"P": ((B * H * T, T), "padded"), "flags": None}
        return inputs, _op(ops.attn_softmax_fwd, inputs, outputs, path, dims(B, T, H, d))

    @case(f"softmax_bwd/{_s}")
    def _softmax_bwd_case(name, path):
        B, T, H, d, _ = parse(name.split("/", 1)[1])
        rng = rng_for(name, path)
        S = ref.attn_squares(_scores(rng, B, T, H, d), B, H, T)
        vis = ref.causal(T)
        # P as the forward stores it, but with garbage where masked: the kernel must not read it
        P = np.where(vis, ref.round_h(ref.attn_softmax_fwd(S, ops.attention_scale(d)), path), 0.75)
        dP = np.where(vis, rng.standard_normal(P.shape), 1e30).astype(np.float32)
        inputs = {"P": P.reshape(-1, T), "dP": dP.reshape(-1, T), "flags": np.zeros(4, np.uint32)}
        outputs = {"dS": ((B * H * T, T), "padded"), "flags": None}
        return inputs, _op(ops.attn_softmax_bwd, inputs, outputs, path, dims(B, T, H, d))


def _check_rows(got, T, path, name):
    """The padding half of odd rows and the masked entries are exact zeros; returns the [.., T]
    values."""
    if T % 2:
        assert not got[:, T].any(), f"{name}: padding stays zero"
    got = got[:, :T]
    assert not got.reshape(-1, T, T)[:, ~ref.causal(T)].any(), f"{name}: masked entries are 0"
    return got


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
def test_softmax_fwd(shape, path):
    name = f"softmax_fwd/{shape}"
    inp, out = run(name, path)
    B, T, H, d, _ = parse(shape)
    S = ref.attn_squares(inp["S"], B, H, T)
    scale = ops.attention_scale(d)  # the f32 SCALE the kernel holds
    P = ref.attn_softmax_fwd(S, scale)
    err = stored_bound(P, ref.attn_softmax_fwd_error(S, scale), path)
    got = _check_rows(out["P"], T, path, name)
    check_close(ref.attn_squares(got, B, H, T), P, err, name)
    assert out["flags"][0] == 0


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
def test_softmax_bwd(shape, path):
    name = f"softmax_bwd/{shape}"
    inp, out = run(name, path)
    B, T, H, d, _ = parse(shape)
    P, dP = (ref.attn_squares(inp[k], B, H, T) for k in ("P", "dP"))
    scale = ops.attention_scale(d)
    dS = ref.attn_softmax_bwd(P, dP, scale)
    err = stored_bound(dS, ref.attn_softmax_bwd_error(P, dP, scale), path)
    got = _check_rows(out["dS"], T, path, name)
    check_close(ref.attn_squares(got, B, H, T), dS, err, name)
    assert out["flags"][0] == 0


def _bits(out: dict) -> dict:
    """Every output as its raw 32-bit patterns (h outputs are unpacked to f32 exactly)."""

    def raw(v):
        return np.ascontiguousarray(v, np.float32 if np.asarray(v).dtype.kind == "f" else None).view(
            np.uint32
        )

    return {k: raw(v) for k, v in out.items()}


def _forms_agree(launcher, inputs, outputs, path, shape):
    """Runs both row-kernel forms on the same inputs; asserts every output is bit-identical."""
    wg, th = (_bits(_op(launcher, inputs, outputs, path, shape, rows=r)) for r in ops.ROW_FORMS)
    for k in wg:
        diff = np.flatnonzero(wg[k] != th[k])
        assert not diff.size, f"{k}: the thread form differs at {diff.size} entries, first {diff[:5]}"


# T = 1, 7 and 70 > 64 (a row takes a lane twice; the thread form's grid needs two workgroups a
# batch-head, the second partly past the end), odd T for the padding half
@pytest.mark.parametrize(
    "shape", [pytest.param(SOFTMAX_SHAPES[1], marks=pytest.mark.slow), SOFTMAX_SHAPES[0], SOFTMAX_SHAPES[2]]
)
def test_softmax_thread_form_bit_identical(shape, path):
    """rows="thread" (a thread a row, the workgroup tree run serially) gives the workgroup form's bits,
    forward and backward, P and dS with their padding and masked zeros, and the flags."""
    B, T, H, d, _ = parse(shape)
    rng = rng_for(f"softmax_rows/{shape}", path)
    S = _scores(rng, B, T, H, d)
    rows = (B * H * T, T)
    flags = np.zeros(4, np.uint32)
    _forms_agree(
        ops.attn_softmax_fwd,
        {"S": S, "flags": flags},
        {"P": (rows, "padded"), "flags": None},
        path,
        dims(B, T, H, d),
    )
    P = ref.round_h(ref.attn_softmax_fwd(ref.attn_squares(S, B, H, T), ops.attention_scale(d)), path)
    dP = (100 * rng.standard_normal(P.shape)).astype(np.float32)
    inputs = {"P": P.reshape(rows), "dP": dP.reshape(rows), "flags": flags}
    _forms_agree(
        ops.attn_softmax_bwd, inputs, {"dS": (rows, "padded"), "flags": None}, path, dims(B, T, H, d)
    )


@pytest.mark.parametrize("rows", ops.ROW_FORMS)
@pytest.mark.parametrize("T", [7, 70])
def test_softmax_rows_write_only_their_rows(T, rows, path):
    """P and dS one row longer than the B*H*T rows, that row a sentinel: no thread past a batch-head's
    last row (the thread form's grid has ceil(T / 64) * 64 a batch-head) writes the row after it,
    which in a model is the next batch-head's row 0, forward or backward, workgroup or thread form."""
    B, H, d = 1, 2, 4
    n = B * H * T
    rng = rng_for(f"softmax_guard/{T}", path)
    S = _scores(rng, B, T, H, d)
    sentinel = np.full((n + 1, T), SENTINEL, np.float32)
    fwd = {"S": S, "P": sentinel, "flags": np.zeros(4, np.uint32)}
    out = _op(ops.attn_softmax_fwd, fwd, {"P": ((n + 1, T), "padded")}, path, dims(B, T, H, d), rows=rows)
    assert (out["P"][n, :T] == SENTINEL).all(), "P's row after the last was written"
    P = _check_rows(out["P"][:n], T, path, "P")
    dP = rng.standard_normal((n, T)).astype(np.float32)
    bwd = {"P": P, "dP": dP, "dS": sentinel, "flags": np.zeros(4, np.uint32)}
    out = _op(ops.attn_softmax_bwd, bwd, {"dS": ((n + 1, T), "padded")}, path, dims(B, T, H, d), rows=rows)
    assert (out["dS"][n, :T] == SENTINEL).all(), "dS's row after the last was written"


def test_row_forms_checked():
    with pytest.raises(ValueError, match="rows must be one of"):
        _op(
            ops.attn_softmax_fwd,
            {"S": np.zeros((1, 1), np.float32)},
            {"P": (1, 1)},
            "fp32",
            dims(1, 1, 1, 2),
            rows="warp",
        )


def _softmax(S, path, d=4):
    T = S.shape[1]
    inputs = {"S": S.astype(np.float32), "flags": np.zeros(4, np.uint32)}
    return _op(ops.attn_softmax_fwd, inputs, {"P": (T, T), "flags": None}, path, dims(1, T, 1, d))


def test_softmax_large_logits(path):
    """The maximum is subtracted before scaling and exp: a constant added to every score changes no
    bit of P (the differences stay exact in f32), and scores of +-1e30 give an exact one-hot row
    where exp(S / sqrt(d)) would overflow."""
    rng = np.random.default_rng(5)
    S = np.round(64 * rng.standard_normal((9, 9))) / 64  # on a grid that 16384 + S keeps exact
    base, shifted = _softmax(S, path), _softmax(S + 16384.0, path)
    assert np.array_equal(base["P"], shifted["P"]) and shifted["flags"][0] == 0
    S = np.full((5, 5), -1e30)
    S[:, 0] = 1e30
    S[3, 2] = 2e30
    out = _softmax(S, path)
    expected = np.zeros((5, 5))
    expected[:, 0] = 1.0
    expected[3] = [0, 0, 1, 0, 0]
    assert np.array_equal(out["P"], expected) and out["flags"][0] == 0


def test_softmax_bwd_store_overflow(path):
    """dS = P (dP - c) / sqrt(d) = +-0.5 (1e6 - 5e5) / 2 = +-1.25e5 in the second row: flagged on the
    f16 paths, an ordinary value in fp32."""
    T, d = 2, 4
    P = np.array([[1.0, 0.0], [0.5, 0.5]])
    dP = np.array([[3.0, 0.0], [0.0, 1e6]], np.float32)
    inputs = {"P": P, "dP": dP, "flags": np.zeros(4, np.uint32)}
    out = _op(ops.attn_softmax_bwd, inputs, {"dS": (T, T), "flags": None}, path, dims(1, T, 1, d))
    if path == "fp32":
        assert out["flags"][0] == 0
        assert out["dS"].tolist() == [[0.0, 0.0], [-1.25e5, 1.25e5]]
    else:
        assert out["flags"][0] == FLAG_H_STORE


# --- the composition: forward and backward of causal multi-head attention --------------------------

E2E = "2x13x3x10"


def _forward(qkv, path, shape):
    B, T, H, d = shape["B"], shape["T"], shape["H"], shape["d"]
    rows, flags = B * H * T, np.zeros(4, np.uint32)
    S = _op(ops.attention_matmul, {"qkv": qkv}, {"S": (rows, T)}, path, shape, variant="scores")["S"]
    sm = _op(ops.attn_softmax_fwd, {"S": S, "flags": flags}, {"P": (rows, T), "flags": None}, path, shape)
    vals = {"P": sm["P"], "qkv": qkv, "flags": sm["flags"]}
    O = {"O": (B * T, H * d), "flags": None}
    return sm["P"], _op(ops.attention_matmul, vals, O, path, shape, variant="values")


@case(f"e2e/{E2E}")
def _e2e_case(name, path):
    B, T, H, d, _ = parse(E2E)
    shape = dims(B, T, H, d)
    rng = rng_for(name, path)
    qkv, dO = rand_h(rng, (B * T, 3 * H * d), path), rand_h(rng, (B * T, H * d), path)
    P, fwd = _forward(qkv, path, shape)
    rows = B * H * T
    out = {"dqkv": np.zeros((B * T, 3 * H * d)), "flags": fwd["flags"]}  # dqkv and flags carry on
    out = _op(ops.attention_matmul, {"P": P, "dO": dO, **out}, list(out), path, shape, variant="dv")
    dP = _op(ops.attention_matmul, {"dO": dO, "qkv": qkv}, {"dP": (rows, T)}, path, shape, variant="dp")["dP"]
    sm_io = {"P": P, "dP": dP, "flags": out["flags"]}
    sm = _op(ops.attn_softmax_bwd, sm_io, {"dS": (rows, T), "flags": None}, path, shape)
    out["flags"] = sm["flags"]
    for product in ("dq", "dk"):
        out = _op(
            ops.attention_matmul, {"dS": sm["dS"], "qkv": qkv, **out}, list(out), path, shape, variant=product
        )
    return {"qkv": qkv, "dO": dO}, {"O": fwd["O"], **out}


def test_attention_end_to_end(path):
    """O and dQ, dK, dV of the six products and two softmaxes against float64 attention. The bound
    chains the stages' bounds: the scores' f32 error feeds the softmax (S_err), the stored P's error
    the products with P and the softmax backward (P_err), dP's the softmax backward; the f32 SCALE
    is within U32 of 1/sqrt(d)."""
    inp, out = run(f"e2e/{E2E}", path)
    B, T, H, d, _ = parse(E2E)
    qkv, dO = inp["qkv"], inp["dO"]
    want = ref.attention(qkv, dO, **dims(B, T, H, d))
    q, k, v = (ref.attn_heads(qkv, B, T, H, d, i) for i in range(3))
    g = ref.attn_heads(dO, B, T, H, d)
    t = np.swapaxes
    scale = 1 / np.sqrt(d)
    e_S = ref.bmm_error(q, t(k, -1, -2))
    e_P = stored_bound(want["P"], ref.attn_softmax_fwd_error(want["S"], scale, e_S, U32), path)
    e_O = stored_bound(want["P"] @ v, ref.bmm_error(want["P"], v, da=e_P), path)
    e_dV = stored_bound(
        t(want["P"], -1, -2) @ g, ref.bmm_error(t(want["P"], -1, -2), g, da=t(e_P, -1, -2)), path
    )
    e_dP = ref.bmm_error(g, t(v, -1, -2))
    e_dS_f32 = ref.attn_softmax_bwd_error(want["P"], want["dP"], scale, e_P, e_dP, U32)
    dS = want["dS"]
    e_dS = stored_bound(dS, e_dS_f32, path)
    e_dQ = stored_bound(dS @ k, ref.bmm_error(dS, k, da=e_dS), path)
    e_dK = stored_bound(t(dS, -1, -2) @ q, ref.bmm_error(t(dS, -1, -2), q, da=t(e_dS, -1, -2)), path)
    check_close(out["O"], want["O"], ref.attn_merge(e_O), "O")
    check_close(out["dqkv"], want["dqkv"], ref.attn_merge(e_dQ, e_dK, e_dV), "dqkv")
    assert out["flags"][0] == 0


def test_causal_mask(path):
    """Changing the key and value at position t of batch 0 changes no bit of the outputs of earlier
    queries of batch 0 (nor of batch 1), and does change the outputs from query t on."""
    B, T, H, d = 2, 7, 3, 6
    shape, D, t = dims(B, T, H, d), H * d, 4
    qkv = rand_h(rng_for("causal", path), (B * T, 3 * D), path)
    changed = qkv.copy()
    changed[t, D:] += 1.0  # batch 0, position t: every head's k and v
    O, O2 = _forward(qkv, path, shape)[1]["O"], _forward(changed, path, shape)[1]["O"]
    same = np.ones(B * T, bool)
    same[t:T] = False
    assert np.array_equal(O[same], O2[same]), "earlier queries (and the other batch) see no change"
    assert (O[t:T] != O2[t:T]).any(axis=1).all(), "queries from t on see the new key and value"


# --- one query row against a cache (text generation's one-position program) ---------------------

ROW_SHAPES = ["1x7x3x6", "1x70x2x4", "1x1x2x4"]  # T = 70 > 64 lanes: a lane takes two keys


@pytest.mark.parametrize("tiles", ["row", "default"])
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_row_attention_is_the_windows_row(shape, tiles, path):
    """attention_row_matmul (scores, values) and attn_softmax_row for the query of row min(n, T) - 1
    against a cache holding the window's q, k, v rows up to it and other values after it (stale
    rows): the scores of its visible keys, its P row and its O row are the window's (the products
    of test_product, the softmax of test_softmax_fwd: float64-checked there) bit for bit, on the
    row tiles and on the default tiles, n = 1 .. T and beyond (the last row); and attention_row
    (the sampler's one dispatch a layer) gives those bits and puts the row into the cache."""
    B, T, H, d, _ = parse(shape)
    D, flags, window = H * d, np.zeros(4, np.uint32), dims(B, T, H, d)
    rng = rng_for(f"row/{shape}", path)
    qkv = rand_h(rng, (T, 3 * D), path)
    P, fwd = _forward(qkv, path, window)
    S = _op(ops.attention_matmul, {"qkv": qkv}, {"S": (H * T, T)}, path, window, variant="scores")["S"]
    extra = {"tiles": engine_tiles.ROW_TILES} if tiles == "row" else {}
    heads = {"T": T, "H": H, "d": d}
    for n in sorted({1, 2, (T + 1) // 2, T, T + 3}):
        i = min(n, T) - 1
        cache = qkv.copy()
        cache[i + 1 :] = rand_h(rng, (T - i - 1, 3 * D), path)
        row = {"qkv": qkv[i : i + 1], "cache": cache}
        S1 = _op(ops.attention_row_matmul, row, {"S": (H, T)}, path, heads, variant="scores", **extra)["S"]
        assert np.array_equal(S1[:, : i + 1], S.reshape(H, T, T)[:, i, : i + 1]), f"scores, n = {n}"
        seq_len = np.array([n], np.uint32)
        sm = _op(
            ops.attn_softmax_row,
            {"S": S1, "seq_len": seq_len, "flags": flags},
            {"P": (H, T), "flags": None},
            path,
            heads,
        )
        assert np.array_equal(sm["P"], P.reshape(H, T, T)[:, i]), f"P, n = {n}"
        vals = {"P": sm["P"], "cache": cache, "flags": flags}
        O1 = _op(
            ops.attention_row_matmul,
            vals,
            {"O": (1, D), "flags": None},
            path,
            heads,
            variant="values",
            **extra,
        )
        assert np.array_equal(O1["O"], fwd["O"][i : i + 1]), f"O, n = {n}"
        assert sm["flags"][0] == O1["flags"][0] == 0
        # attention_row: the put, the products and the softmax above in one dispatch, from a cache
        # whose row i is stale too (it puts the row there itself)
        stale = cache.copy()
        stale[i] = rand_h(rng, (1, 3 * D), path)[0]
        one = _op(
            ops.attention_row,
            {"qkv": qkv[i : i + 1], "cache": stale, "seq_len": seq_len, "flags": flags},
            {"cache": (T, 3 * D), "S": (H, T), "P": (H, T), "O": (1, D), "flags": None},
            path,
            heads,
        )
        assert np.array_equal(one["cache"], cache), f"attention_row's put, n = {n}"
        assert np.array_equal(one["S"][:, : i + 1], S1[:, : i + 1]), f"attention_row's scores, n = {n}"
        assert np.array_equal(one["P"], sm["P"]), f"attention_row's P, n = {n}"
        assert np.array_equal(one["O"], O1["O"]), f"attention_row's O, n = {n}"
        assert one["flags"][0] == 0


def test_row_products_check_their_arguments():
    from webmp.engine.plan import PlanBuilder

    pb = PlanBuilder("native")
    with pytest.raises(ValueError, match="unknown row product"):
        ops.attention_row_matmul(pb, "p", "dq", cache="c", qkv="q", S="S", T=4, H=2, d=4)
    with pytest.raises(ValueError, match="'scores' takes qkv and S"):
        ops.attention_row_matmul(pb, "p", "scores", cache="c", P="q", S="S", T=4, H=2, d=4)
    with pytest.raises(ValueError, match="even head size"):
        ops.attn_softmax_row(pb, "p", S="S", P="P", seq_len="n", T=4, H=2, d=5)


# --- native and emulated f16 agree bit for bit ---------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_native_matches_emulated(name, gpu):
    """As for the other kernels (kernel_cases.Cases.native_matches_emulated): both f16 paths do
    the same f32 arithmetic on the same f16 values, and on this adapter their store conversions
    round alike."""
    if not gpu.has_f16:
        pytest.skip("this adapter lacks 'shader-f16': nothing to compare the emulated path with")
    native, emulated = run(name, "native")[1], run(name, "emulated")[1]
    assert native.keys() == emulated.keys()
    for key, a in native.items():
        b = emulated[key]  # compare bits (also tells -0 from +0)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (
            f"{name} {key}: {int((a != b).sum())} differ"
        )
