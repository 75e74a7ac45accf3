"""Property-based kernel tests (hypothesis) over shapes and values at the edges of the formats:
+-65504 (f16 max) and values just above it, f16 subnormals (2^-24 .. 2^-14), signed zeros, and
Inf/NaN where a kernel must flag them, on both f16 paths (native, emulated) and fp32 where the
property is not f16-specific.

Examples are derandomized (a fixed seed derived from each test) and never read from or written
to an example database, so CI runs the same inputs every time; a failure prints the falsifying
example. Each example is a GPU dispatch (milliseconds on lavapipe); shapes that are override
constants (N of round_h, M, N, K of a matmul) compile a pipeline per shape, so the value-only
properties use fixed sizes and the matmul property keeps its example count small.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_cases import softmax_run, stored_bound

from webmp import ops
from webmp.testing import reference as ref
from webmp.testing.probe import run_matmul, run_op
from webmp.testing.reference import F16_MAX, U32, check_close, dot_error

# hypothesis runs many GPU dispatches an example (~15 s in all): in `make test`, not `make check`

FLAG_H_STORE, FLAG_MASTER_GRAD, FLAG_LOSS = 1, 2, 4
F32_MAX = float(np.finfo(np.float32).max)

settings.register_profile(
    "kernels",
    derandomize=True,  # the same examples on every run: CI is deterministic
    database=None,
    deadline=None,  # a dispatch (or a pipeline compile) takes longer than hypothesis' 200 ms
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
KERNELS = settings.get_profile("kernels")


def examples(n: int) -> settings:
    return settings(KERNELS, max_examples=n)


# --- value strategies ----------------------------------------------------------------------------

F16_SUB_MIN, F16_NORMAL_MIN = 2.0**-24, 2.0**-14
F16_EDGES = [
    0.0,
    -0.0,
    F16_SUB_MIN,
    -F16_SUB_MIN,
    3 * F16_SUB_MIN,
    F16_NORMAL_MIN - F16_SUB_MIN,  # the largest subnormal
    F16_NORMAL_MIN,
    -F16_NORMAL_MIN,
    1.0,
    -1.0,
    F16_MAX,
    -F16_MAX,
    F16_MAX - 32,  # the next f16 below the maximum
    -(F16_MAX - 32),
    32768.0,
    -32768.0,
]
NONFINITE = [np.inf, -np.inf, np.nan]


FINITE_F16 = st.integers(-0x7BFF, 0x7BFF).map(
    lambda i: float(np.uint16(abs(i) | (0x8000 if i < 0 else 0)).view(np.float16))
)


def f16_values(nonfinite: bool = False) -> st.SearchStrategy[float]:
    """f16-representable values: the edges above, subnormals, and any finite f16 (Inf/NaN too
    with nonfinite=True)."""
    parts = [
        st.sampled_from(F16_EDGES),
        st.integers(-1023, 1023).map(lambda i: i * F16_SUB_MIN),  # subnormals and +-0
        FINITE_F16,  # any finite f16, by its bits
        st.floats(-4.0, 4.0).map(lambda v: float(np.float16(v))),
    ]
    if nonfinite:
        parts.append(st.sampled_from(NONFINITE))
    return st.one_of(*parts)


def f32_values(max_abs: float = F32_MAX, nonfinite: bool = False) -> st.SearchStrategy[float]:
    """f32 values near the f16 edges (just above 65504, the rounding boundary 65520, halfway
    between f16 subnormals), f16 values, and any f32 up to max_abs."""
    max_abs = float(np.float32(max_abs))  # hypothesis wants bounds f32 holds exactly
    near = [F16_MAX, 65519.0, 65520.0, 65536.0, 1e5, F16_NORMAL_MIN, 0.5 * F16_SUB_MIN, 1.5 * F16_SUB_MIN]
    near_edges = st.sampled_from(near + [np.nextafter(np.float32(v), np.float32(np.inf)) for v in near]).map(
        float
    )
    parts = [
        f16_values(),
        st.tuples(near_edges, st.sampled_from([1.0, -1.0])).map(lambda t: t[0] * t[1]),
        st.floats(-max_abs, max_abs, width=32).map(float),
        st.floats(-8.0, 8.0, width=32),
    ]
    if nonfinite:
        parts.append(st.sampled_from(NONFINITE))
    return st.one_of(*parts)


def bits_equal(a, b) -> np.ndarray:
    """Elementwise: the same f32 bits (so -0 != +0), or both NaN."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


# --- (a) the f16 store ---------------------------------------------------------------------------

ROUND_N = 64  # one pipeline per path: every example fills the same N values


@examples(60)
@given(x=st.lists(f32_values(), min_size=ROUND_N, max_size=ROUND_N))
@pytest.mark.parametrize("path", ["native", "emulated"])
def test_round_h_is_numpy_rne(gpu, path, x):
    """h_round (common.wgsl's f16_round) is numpy's f32 -> f16 round-to-nearest-even, bit for bit
    (signed zeros included), on every f32 that rounds to a finite f16 (|x| < 65520)."""
    if path == "native" and not gpu.has_f16:
        pytest.skip("no shader-f16")
    x = np.array(x, np.float32)
    x = np.where(np.abs(x) < 65520.0, x, np.float32(0.0)).astype(np.float32)
    got = run_op(ops.round_h, {"x": x}, {"out": x.shape}, N=ROUND_N, path=path, gpu=gpu)["out"]
    want = x.astype(np.float16).astype(np.float32)
    bad = np.flatnonzero(~bits_equal(got, want))
    assert not len(bad), (
        f"{path}: {x[bad[:4]].tolist()} -> {got[bad[:4]].tolist()}, numpy {want[bad[:4]].tolist()}"
    )


ADD_M, ADD_N = 3, 7  # odd columns: the padding half of each row's last word must stay 0


@examples(60)
@given(
    a=st.lists(f16_values(nonfinite=True), min_size=ADD_M * ADD_N, max_size=ADD_M * ADD_N),
    y=st.lists(f16_values(nonfinite=True), min_size=ADD_M * ADD_N, max_size=ADD_M * ADD_N),
)
@pytest.mark.parametrize("path", ["native", "emulated", "fp32"])
def test_add_h_store_and_flag(gpu, path, a, y):
    """add_h stores f32(a + y) in the activation format: values that fit equal numpy's
    round-to-nearest-even of the f32 sum bit for bit (signed zeros, subnormals), and
    FLAG_H_STORE is raised exactly when some sum has |v| >= 65504 (f16 paths) or is Inf/NaN."""
    if path == "native" and not gpu.has_f16:
        pytest.skip("no shader-f16")
    A = np.array(a, np.float64).reshape(ADD_M, ADD_N)
    Y = np.array(y, np.float64).reshape(ADD_M, ADD_N)
    out = run_op(
        ops.add_h,
        {"A": A, "Y": Y, "flags": np.zeros(4, np.uint32)},
        {"Y": ((ADD_M, ADD_N), "padded"), "flags": (4,)},
        M=ADD_M,
        N=ADD_N,
        path=path,
        gpu=gpu,
    )
    with np.errstate(invalid="ignore", over="ignore"):
        v = A.astype(np.float32) + Y.astype(np.float32)  # the kernel adds in f32
    limit = np.float32(F16_MAX) if path != "fp32" else np.float32(np.inf)
    over = ~(np.abs(v) < limit)  # NaN counts as over
    assert out["flags"][0] == (FLAG_H_STORE if over.any() else 0), (
        f"flags {out['flags'][0]}, sums overflowing: {v[over].tolist()}"
    )
    assert not out["Y"][:, ADD_N].any(), "the padding half stays zero"
    got = out["Y"][:, :ADD_N]
    with np.errstate(over="ignore"):
        want = v if path == "fp32" else v.astype(np.float16).astype(np.float32)
    ok = bits_equal(got, want) | over
    bad = np.argwhere(~ok)
    assert not len(bad), "; ".join(
        f"{A[i, j]!r} + {Y[i, j]!r} = {v[i, j]!r} stored {got[i, j]!r}, numpy {want[i, j]!r}"
        for i, j in bad[:4]
    )


# --- (b) matmul ----------------------------------------------------------------------------------


@st.composite
def matmul_inputs(draw):
    M, N, K = (draw(st.integers(1, 40)) for _ in range(3))
    values = f16_values(nonfinite=draw(st.booleans()))
    # mostly O(1) values, with the edges mixed in at some rate hypothesis picks
    mixed = st.one_of(st.floats(-2.0, 2.0).map(lambda v: float(np.float16(v))), values)
    A = draw(st.lists(mixed, min_size=M * K, max_size=M * K))
    B = draw(st.lists(mixed, min_size=K * N, max_size=K * N))
    return np.array(A, np.float64).reshape(M, K), np.array(B, np.float64).reshape(K, N)


@examples(12)
@given(AB=matmul_inputs())
@pytest.mark.parametrize("path", ["native", "emulated", "fp32"])
def test_matmul_fwd_bound_or_flag(gpu, path, AB):
    """matmul_fwd at random shapes (1..40, odd included) on values with f16 extremes: each stored
    output is within matmul_error's bound (plus the store) of the exact product, unless it
    overflows; FLAG_H_STORE is set when some output certainly overflows (|exact| - bound >= 65504,
    or a non-finite input), and clear when none can (|exact| + bound < 65504)."""
    if path == "native" and not gpu.has_f16:
        pytest.skip("no shader-f16")
    A, B = AB
    M, N = A.shape[0], B.shape[1]
    out = run_matmul("matmul_fwd", A, B, padded=True, path=path, gpu=gpu)
    flag = int(out["flags"][0])
    assert flag in (0, FLAG_H_STORE)
    if N % 2:
        assert not out["C"][:, N].any(), "the padding half of odd rows must stay zero"
    if not (np.isfinite(A).all() and np.isfinite(B).all()):
        assert flag == FLAG_H_STORE, "a non-finite operand makes some output non-finite"
        return
    exact = ref.matmul(A, B, path=path)
    err = ref.matmul_error(A, B, path=path)
    limit = F16_MAX if path != "fp32" else F32_MAX
    surely_over = np.abs(exact) - err >= limit
    maybe_over = np.abs(exact) + err >= limit
    if surely_over.any():
        assert flag == FLAG_H_STORE, f"{int(surely_over.sum())} outputs overflow, flag clear"
    elif not maybe_over.any():
        assert flag == 0, f"no output can overflow (max |exact| {np.abs(exact).max():.6g}), flag set"
    C = out["C"][:, :N]
    fits = ~maybe_over
    check_close(C[fits], exact[fits], stored_bound(exact, err, path)[fits], f"matmul {M}x{N}x{A.shape[1]}")


# --- (c) softmax cross-entropy --------------------------------------------------------------------

SM_B, SM_C = 4, 5
SM_LIMIT = 1e38  # |logits| below this: the loss (<= 2e38 + log C) stays finite in f32


@examples(40)
@given(
    z=st.lists(f32_values(SM_LIMIT), min_size=SM_B * SM_C, max_size=SM_B * SM_C),
    labels=st.lists(st.integers(0, SM_C - 1), min_size=SM_B, max_size=SM_B),
    scale=st.sampled_from([1.0, 1024.0, 32768.0]),
)
@pytest.mark.parametrize("path", ["native", "emulated", "fp32"])
def test_softmax_xent_finite_logits(gpu, path, z, labels, scale):
    """Finite logits (huge magnitudes included): the loss is within softmax_xent_error, dlogits
    within its bound plus the store, and no flag is raised (|dlogits| <= scale / B < 65504)."""
    if path == "native" and not gpu.has_f16:
        pytest.skip("no shader-f16")
    logits = np.array(z, np.float32).reshape(SM_B, SM_C).astype(np.float64)
    lab = np.array(labels)
    out = softmax_run(logits, lab, scale, path, gpu)
    loss, dl, bad = ref.softmax_xent(logits, lab, scale)
    assert not bad
    loss_err, f32_err = ref.softmax_xent_error(logits, lab, scale)
    check_close(out["loss_rows"], loss, loss_err, "loss")
    check_close(out["dlogits"][:, :SM_C], dl, stored_bound(dl, f32_err, path), "dlogits")
    assert not out["dlogits"][:, SM_C].any(), "padding stays zero"
    assert out["flags"][0] == 0


@examples(25)
@given(
    z=st.lists(f32_values(SM_LIMIT), min_size=SM_B * SM_C, max_size=SM_B * SM_C),
    where=st.lists(
        st.tuples(st.integers(0, SM_B - 1), st.integers(0, SM_C - 1), st.sampled_from([np.inf, np.nan])),
        min_size=1,
        max_size=3,
    ),
    labels=st.lists(st.integers(0, SM_C - 1), min_size=SM_B, max_size=SM_B),
)
@pytest.mark.parametrize("path", ["native", "emulated", "fp32"])
def test_softmax_xent_flags_nonfinite_logits(gpu, path, z, where, labels):
    """A +Inf or NaN logit in a labelled row makes that row's loss non-finite: FLAG_LOSS. (-Inf
    off the label is a zero probability with a finite loss: not flagged, as in the reference.)"""
    if path == "native" and not gpu.has_f16:
        pytest.skip("no shader-f16")
    logits = np.array(z, np.float32).reshape(SM_B, SM_C)
    for r, c, v in where:
        logits[r, c] = v
    out = softmax_run(logits, np.array(labels), 1.0, path, gpu)
    assert out["flags"][0] & FLAG_LOSS, f"flags {out['flags'][0]}"


# --- (d) master-gradient overflow check: grad_stats, then the scaler's verdict --------------------

GS_SIZES = [1, 257, 700]  # one scaler pipeline each (NUM_PARTIALS); 257: two workgroups' blocks
GS_BASE = 1
SCALER = {
    "NUM_PARTIALS": 0,  # set per size
    "B": 2,
    "LR": 1e-3,
    "TOTAL": 100,
    "RING": 2,
    "WARMUP": 0,
    "INTERVAL": 3,
    "HYSTERESIS": 1,
    "MIN_SCALE": 1.0,
    "LOG_BETA1": ops.adam_log_beta(0.9),
    "LOG_BETA2": ops.adam_log_beta(0.999),
}
STATE = {
    "scale": 1024.0,
    "growth_tracker": 0,
    "hysteresis_left": 1,  # an overflow backs the scale off at once
    "iteration": 5,
    "opt_step": 5,
    "data_pos": 10,
    "skipped_total": 0,
    "min_scale_events": 0,
    "first_min_scale_iter": 0,
    "bc1": 1.0,
    "bc2": 1.0,
}


@st.composite
def master_grads(draw):
    N = draw(st.sampled_from(GS_SIZES))
    G = np.array(draw(st.lists(f32_values(1e18), min_size=N, max_size=N)), np.float32)
    for i, v in draw(st.lists(st.tuples(st.integers(0, N - 1), st.sampled_from(NONFINITE)), max_size=3)):
        G[i] = v
    return G


@examples(40)
@given(G=master_grads())
@pytest.mark.parametrize("path", ["native", "emulated", "fp32"])
def test_grad_stats_and_scaler_on_nonfinite(gpu, path, G):
    """grad_stats sets FLAG_MASTER_GRAD exactly when some master gradient is Inf or NaN (huge
    finite values, subnormals and signed zeros do not), its partials are right when all are
    finite, and the scaler then skips the step and backs the scale off exactly in that case."""
    if path == "native" and not gpu.has_f16:
        pytest.skip("no shader-f16")
    N = G.size
    nwg = ops.grad_stats_workgroups(N)
    scale = STATE["scale"]
    gs = run_op(
        ops.grad_stats,
        {
            "G": G,
            "state": {"scale": scale},
            "partials": np.zeros(GS_BASE + nwg, np.float32),
            "flags": np.zeros(4, np.uint32),
        },
        ["partials", "flags"],
        N=N,
        BASE=GS_BASE,
        path=path,
        gpu=gpu,
    )
    partials, bad = ref.grad_stats(G, scale, nwg)
    found = int(gs["flags"][0])
    assert found == (FLAG_MASTER_GRAD if bad else 0), f"flags {found}, non-finite: {bad}"
    if not bad:
        # relative f32 rounding, plus what f32 cannot hold: each square below the normal range
        # (2^-126) may be flushed to 0 or kept subnormal, an absolute error under 2^-126 per term
        tiny = N * 2.0**-126
        check_close(
            gs["partials"][GS_BASE:], partials, (dot_error(N) + 8 * U32) * partials + tiny, "partials"
        )

    c = {**SCALER, "NUM_PARTIALS": GS_BASE + nwg}
    loss_rows = np.ones(c["B"], np.float32)
    sc = run_op(
        ops.scaler_step,
        {
            "state": STATE,
            "flags": gs["flags"],
            "partials": gs["partials"],
            "loss_rows": loss_rows,
            "metrics": np.zeros(c["RING"] * 8, np.uint32),
        },
        ["state", "flags"],
        constants=c,
        path=path,
        gpu=gpu,
    )
    want, _ = ref.scaler_step(STATE, found, gs["partials"], loss_rows, c)
    got = sc["state"]
    exact = ("apply", "scale", "skipped_total", "hysteresis_left", "growth_tracker", "opt_step", "found_inf")
    for k in exact:
        assert got[k] == want[k], f"state.{k} = {got[k]}, expected {want[k]} (found {found})"
    assert got["apply"] == (0 if bad else 1)
    assert sc["flags"][0] == 0, "the scaler clears the flags"
