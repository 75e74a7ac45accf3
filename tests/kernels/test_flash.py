"""The fused (flash-style) attention kernels (webmp/ops/flash.py) against their float64 reference
and against the three-kernel form (webmp/ops/attention.py), on each storage path, at T = 1, 7, 64
and 257 (several key tiles, a partial last tile, a second workgroup of queries).

Tolerances (webmp/testing/reference/flash.py derives each bound from the kernels' rounding points):
the fused form rounds only O and dqkv to the activation format and keeps the unnormalised weights,
P and dS in f32, where the three-kernel form stores P and dS in h before the products that read
them; so each form is checked against the exact values with its own bound, and the two forms
against each other with the sum of their bounds (the triangle inequality). On the f16 paths the
three-kernel form's P and dS stores dominate that sum (~1e-3 relative); on fp32 both bounds are
f32 reassociation and exp/log ulps (~1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import FLAG_H_STORE, Cases, rand_h, rng_for

from webmp import ops
from webmp.engine.runtime import default_gpu
from webmp.testing import reference as ref
from webmp.testing.probe import run_op
from webmp.testing.reference import check_close

# "BxTxHxd"; flash_tile(d) keys a tile: d = 6, 8 -> 64, d = 32 -> 32 (T = 257: 9 tiles, the last
# holding one key; 5 workgroups of queries, the last with one)
SHAPES = ["1x1x2x4", "2x7x3x6", "2x64x2x8", "1x257x2x32"]
SENTINEL = 7.0  # dqkv where a kernel must not write
CASES = Cases()


def parse(shape):
    B, T, H, d = map(int, shape.split("x"))
    return {"B": B, "T": T, "H": H, "d": d}


def _op(launcher, inputs, outputs, path, shape, **kw):
    return run_op(launcher, inputs, outputs, path=path, gpu=default_gpu(), **shape, **kw)


def forward(qkv, path, shape):
    """flash_attention_fwd: O, lse, flags."""
    B, T, H, d = shape["B"], shape["T"], shape["H"], shape["d"]
    outputs = {"O": (B * T, H * d), "lse": (B * H * T,), "flags": None}
    return _op(ops.flash_attention_fwd, {"qkv": qkv, "flags": np.zeros(4, np.uint32)}, outputs, path, shape)


def fused(qkv, dO, path, shape, dqkv=None):
    """The fused forward and backward: O, lse, Dsum, dqkv, flags (dqkv starts as `dqkv`)."""
    B, T, H, d = shape["B"], shape["T"], shape["H"], shape["d"]
    rows, D = B * T, H * d
    fwd = forward(qkv, path, shape)
    Dsum = _op(ops.flash_bwd_dot, {"O": fwd["O"], "dO": dO}, {"Dsum": (B * H * T,)}, path, shape)["Dsum"]
    out = {"dqkv": np.zeros((rows, 3 * D)) if dqkv is None else dqkv, "flags": fwd["flags"]}
    grads = {"qkv": qkv, "dO": dO, "lse": fwd["lse"], "Dsum": Dsum}
    for entry in ("flash_bwd_dkv", "flash_bwd_dq"):
        out = _op(ops.flash_bwd_grads, {**grads, **out}, list(out), path, shape, variant=entry)
    return {"O": fwd["O"], "lse": fwd["lse"], "Dsum": Dsum, **out}


def unfused(qkv, dO, path, shape):
    """The three-kernel form (scores, softmax, values; dv, dp, softmax backward, dq, dk)."""
    B, T, H, d = shape["B"], shape["T"], shape["H"], shape["d"]
    rows, sq, D = B * T, B * H * T, H * d
    flags = np.zeros(4, np.uint32)
    S = _op(ops.attention_matmul, {"qkv": qkv}, {"S": (sq, T)}, path, shape, variant="scores")["S"]
    P = _op(ops.attn_softmax_fwd, {"S": S, "flags": flags}, {"P": (sq, T)}, path, shape)["P"]
    O = _op(
        ops.attention_matmul,
        {"P": P, "qkv": qkv, "flags": flags},
        {"O": (rows, D)},
        path,
        shape,
        variant="values",
    )
    out = {"dqkv": np.zeros((rows, 3 * D)), "flags": flags}
    out = _op(ops.attention_matmul, {"P": P, "dO": dO, **out}, list(out), path, shape, variant="dv")
    dP = _op(ops.attention_matmul, {"dO": dO, "qkv": qkv}, {"dP": (sq, T)}, path, shape, variant="dp")["dP"]
    dS = _op(ops.attn_softmax_bwd, {"P": P, "dP": dP, "flags": flags}, {"dS": (sq, T)}, path, shape)["dS"]
    for product in ("dq", "dk"):
        out = _op(
            ops.attention_matmul, {"dS": dS, "qkv": qkv, **out}, list(out), path, shape, variant=product
        )
    return {"O": O["O"], "dqkv": out["dqkv"]}


for _s in SHAPES:

    @CASES.case(f"flash/{_s}")
    def _flash_case(name, path):
        shape = parse(name.split("/")[1])
        B, T, H, d = shape.values()
        rng = rng_for(name, path)
        qkv, dO = rand_h(rng, (B * T, 3 * H * d), path, 2.0), rand_h(rng, (B * T, H * d), path)
        return {"qkv": qkv, "dO": dO}, {
            "fused": fused(qkv, dO, path, shape),
            "unfused": unfused(qkv, dO, path, shape),
        }


@pytest.mark.parametrize("shape", SHAPES)
def test_flash_against_reference_and_unfused(shape, path):
    """O, lse, Dsum and dqkv within their derived bounds of float64 attention, and O and dqkv within
    the sum of both forms' bounds of the three-kernel form's."""
    check_against_reference(shape, path)


@pytest.mark.parametrize("shape", SHAPES)
def test_flash_bf16(shape):
    """The same on the bf16 path (prelude_bf16.wgsl: stores round to bf16, unit roundoff 2^-8; the
    bounds take store_error("bf16"))."""
    check_against_reference(shape, "bf16")


def check_against_reference(shape, path):
    inp, out = CASES.run(f"flash/{shape}", path)
    dims = parse(shape)
    got, other = out["fused"], out["unfused"]
    qkv, dO = inp["qkv"], inp["dO"]
    want = ref.flash_attention(qkv, dO, got["O"], **dims)
    e_fwd = ref.flash_fwd_error(qkv, **dims, bc=ops.flash_tile(dims["d"]), path=path)
    e_bwd = ref.flash_bwd_error(qkv, dO, got["O"], e_fwd, **dims, path=path)
    check_close(got["O"], want["O"], e_fwd["O"], "O")
    check_close(got["lse"], want["lse"], e_fwd["lse"], "lse")
    check_close(got["Dsum"], want["Dsum"], ref.dot_error(dims["d"]) * want["Dsum_abs"] + 2.0**-126, "Dsum")
    check_close(got["dqkv"], want["dqkv"], e_bwd["dqkv"], "dqkv")
    assert got["flags"][0] == 0
    e_unf = ref.unfused_attention_error(qkv, dO, **dims, path=path)
    check_close(got["O"], other["O"], e_fwd["O"] + e_unf["O"], "O: fused vs three-kernel")
    check_close(got["dqkv"], other["dqkv"], e_bwd["dqkv"] + e_unf["dqkv"], "dqkv: fused vs three-kernel")


test_native_matches_emulated = CASES.native_matches_emulated()


def test_flash_writes_only_its_thirds(path):
    """flash_bwd_dkv writes dqkv's k and v thirds and flash_bwd_dq its q third, nothing else (the
    rows past T of a workgroup included): a sentinel elsewhere survives."""
    shape = parse("2x7x3x6")
    B, T, H, d = shape.values()
    D = H * d
    rng = rng_for("flash/thirds", path)
    qkv, dO = rand_h(rng, (B * T, 3 * D), path), rand_h(rng, (B * T, D), path)
    fwd = forward(qkv, path, shape)
    Dsum = _op(ops.flash_bwd_dot, {"O": fwd["O"], "dO": dO}, {"Dsum": (B * H * T,)}, path, shape)["Dsum"]
    grads = {"qkv": qkv, "dO": dO, "lse": fwd["lse"], "Dsum": Dsum, "flags": np.zeros(4, np.uint32)}
    for entry, written in (("flash_bwd_dkv", (1, 2)), ("flash_bwd_dq", (0,))):
        start = np.full((B * T, 3 * D), SENTINEL)
        out = _op(ops.flash_bwd_grads, {**grads, "dqkv": start}, ["dqkv"], path, shape, variant=entry)["dqkv"]
        for part in range(3):
            third = out[:, part * D : (part + 1) * D]
            assert (third != SENTINEL).any() if part in written else (third == SENTINEL).all(), (entry, part)


def test_flash_causal_mask(path):
    """Changing the key and value at position t of batch 0 changes no bit of the outputs (and lse) of
    earlier queries, nor of the other batch, and changes those from query t on."""
    shape = parse("2x70x2x8")  # two workgroups of queries
    B, T, H, d = shape.values()
    D, t = H * d, 40
    qkv = rand_h(rng_for("flash/causal", path), (B * T, 3 * D), path)
    changed = qkv.copy()
    changed[t, D:] += 1.0
    outs = [forward(x, path, shape) for x in (qkv, changed)]
    same = np.ones(B * T, bool)
    same[t:T] = False
    assert np.array_equal(outs[0]["O"][same], outs[1]["O"][same])
    assert (outs[0]["O"][t:T] != outs[1]["O"][t:T]).any(axis=1).all()
    lse = [o["lse"].reshape(B, H, T) for o in outs]
    assert np.array_equal(lse[0][:, :, :t], lse[1][:, :, :t]) and np.array_equal(lse[0][1], lse[1][1])


def test_flash_store_overflow(path):
    """dV at key 0 = sum_i P_i0 dO_i with equal scores (P_i0 = 1 / (i + 1)) and dO = 40000: 1.04e5,
    beyond f16 (flagged), an ordinary value in fp32."""
    shape = parse("1x7x1x4")
    T, d = 7, 4
    qkv, dO = np.zeros((T, 3 * d)), np.full((T, d), 40000.0)
    out = fused(qkv, dO, path, shape)
    if path == "fp32":
        assert out["flags"][0] == 0
        dv0 = 40000 * np.sum(1 / np.arange(1, T + 1))  # each weight exp(0) / (i + 1): one division's ulp
        check_close(out["dqkv"][0, 2 * d], dv0, (ref.dot_error(T) + 4 * ref.U32) * dv0)
    else:
        assert out["flags"][0] == FLAG_H_STORE


def test_flash_checks_its_shape():
    from webmp.engine.plan import PlanBuilder

    pb = PlanBuilder("native")
    with pytest.raises(ValueError, match="even"):
        ops.flash_attention_fwd(pb, "p", qkv="q", O="O", lse="l", B=1, T=4, H=2, d=5)
    with pytest.raises(ValueError, match="exceeds"):
        ops.flash_attention_fwd(pb, "p", qkv="q", O="O", lse="l", B=1, T=4, H=1, d=130)
    assert ops.flash_supported(1024, 4, 32) is None
