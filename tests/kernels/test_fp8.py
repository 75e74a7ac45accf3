"""fp8 training's kernels (shaders/formats/fp8*.wgsl) bit for bit against their numpy twin
webmp.engine.fp8, which is itself checked against ml_dtypes' casts of the scaled values: the
quantisation of h values and of f32 masters at a slot's scale (saturation, ties, subnormals, -0,
the clamped exponents, NaN and infinity in the masters), the amax each records, and the delayed
scaling's history, cursor and next scales (both amax algorithms, a margin, an overflowed amax)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from webmp.engine import fp8
from webmp.engine.formats import FORMATS
from webmp.engine.plan import pack_h, unpack_h
from webmp.engine.runtime import default_gpu
from webmp.testing.probe import run_kernel

ML = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
SRC = ["formats.wgsl", "fp8.wgsl"]


def ml_quantise(x: np.ndarray, e: int, fmt: str) -> np.ndarray:
    """The independent reference: ml_dtypes' cast of x * 2^e clipped to +-max, times 2^-e."""
    top = FORMATS[fmt].max_value
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = np.clip(x.astype(np.float64) * 2.0**e, -top, top).astype(np.float32)
        return (scaled.astype(ML[fmt]).astype(np.float64) * 2.0**-e).astype(np.float32)


def wide_values(n: int, seed: int) -> np.ndarray:
    """Values over a wide exponent range, both signs, with zeros, ties of both formats and f32
    subnormals among them."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.integers(-40, 40, n))
    ties = np.array([1.0625, 1.1875, 0.5 + 2**-5, 1.125, -1.375, 448.0, 464.0, 480.0, 57344.0, 61440.0])
    x[: len(ties)] = ties
    x[len(ties) : len(ties) + 4] = [0.0, -0.0, 1e-39, -2e-40]
    return x.astype(np.float32)


def test_numpy_twin_is_ml_dtypes():
    x = wide_values(50_000, 0)
    x = x[np.abs(x.astype(np.float64)) >= 2.0**-126]  # ml_dtypes sees f32 subnormals; the twin flushes them
    for fmt in ML:
        for e in (fp8.E_MIN, -7, 0, 5, 31, fp8.E_MAX):
            got, want = fp8.quantise(x, e, fmt), ml_quantise(x, e, fmt)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (fmt, e)


def test_scale_exponent_is_the_largest_that_fits():
    rng = np.random.default_rng(1)
    for fmt in ML:
        top = FORMATS[fmt].max_value
        for a in np.concatenate(
            [rng.uniform(0.5, 2, 50) * np.exp2(rng.integers(-60, 60, 50)), [top, 1.75, 1.7500001]]
        ):
            a32 = np.float32(a)
            e = fp8.scale_exponent(int(a32.view(np.uint32)), fmt, 0)
            assert float(a32) * 2.0**e <= top < float(a32) * 2.0 ** (e + 1), (fmt, a)
            assert fp8.scale_exponent(int(a32.view(np.uint32)), fmt, 2) == e - 2


@pytest.mark.parametrize("slot", [0, 2, 4])  # e4m3 input, e5m2 output gradient, e4m3 weight
@pytest.mark.parametrize("act", [0, 1])  # none, relu (exact in f32 on both sides)
def test_fp8_cast_matches_twin(slot, act):
    rows, cols = 37, 45  # odd: padding halves
    x = wide_values(rows * cols, 2 + slot).reshape(rows, cols)
    x = unpack_h(pack_h(x, "bf16"), rows, cols, "bf16")  # what the h buffer holds
    scale = np.array([3, -2, 7, 0, 20, -1], np.int32)
    fmt = fp8.slot_format(slot)
    out = run_kernel(
        [*SRC, "fp8_cast.wgsl"], "fp8_cast",
        {"WORDS": rows * -(-cols // 2), "COLS": cols, "ACT": act, "SLOT": slot, "RECORD": 1},
        inputs={"X": x, "scale": scale.view(np.uint32), "amax": np.full(6, 5, np.uint32)},
        outputs={"Y": (rows, cols), "amax": (6,)}, workgroups=3, path="bf16", gpu=default_gpu(),
    )  # fmt: skip
    v = np.maximum(x, 0) if act else x
    want = fp8.quantise(v, int(scale[slot]), fmt)
    assert np.array_equal(out["Y"].view(np.uint32), want.view(np.uint32))
    amax = np.full(6, 5, np.uint32)
    amax[slot] = max(5, fp8.amax_bits(v))
    assert np.array_equal(out["amax"], amax), "only the slot's amax, as a max with what it held"


def test_fp8_cast_weights_matches_twin_with_specials():
    rows, cols = 9, 31
    p = wide_values(rows * cols, 7)
    p[20:26] = np.array([np.inf, -np.inf, np.nan, 1e38, -3e38, 2.0**-130], np.float32)
    out = run_kernel(
        [*SRC, "fp8_cast_weights.wgsl"], "fp8_cast_weights",
        {"WORDS": rows * -(-cols // 2), "COLS": cols, "SLOT": 1, "RECORD": 0},
        inputs={"P": p, "scale": np.array([0, 9, 0], np.uint32), "amax": np.zeros(3, np.uint32)},
        outputs={"Wh": (rows, cols), "amax": (3,)}, workgroups=2, path="bf16", gpu=default_gpu(),
    )  # fmt: skip
    want = fp8.quantise(p, 9, "e4m3").reshape(rows, cols)
    got = out["Wh"]
    finite = np.isfinite(want)
    assert np.array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32))
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN stays NaN; +-inf saturate to +-448 * 2^-9"
    assert out["amax"].tolist() == [0, 0, 0], "RECORD 0 (an evaluation) records nothing"


@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_fp8_scales_matches_twin(algo):
    slots, length = 70, 5  # more slots than the workgroup's 64 threads
    rng = np.random.default_rng(3)
    recipe = fp8.Fp8Recipe(margin=1, amax_history_len=length, amax_compute_algo=algo, keep_ends=True)
    amax = (
        (rng.uniform(0.1, 10, slots) * np.exp2(rng.integers(-20, 20, slots)))
        .astype(np.float32)
        .view(np.uint32)
    )
    amax[[3, 10]] = [0x7F800000, 0]  # an overflowed step's amax, and a slot nothing recorded
    history = (rng.uniform(0, 10, (slots, length))).astype(np.float32).view(np.uint32)
    history[10] = 0  # nothing ever recorded: the scale stays
    scale = rng.integers(-5, 5, slots).astype(np.int32)
    out = run_kernel(
        [*SRC, "fp8_scales.wgsl"], "fp8_scales",
        {"SLOTS": slots, "LEN": length, "ALGO": fp8.ALGOS[algo], "MARGIN": 1},
        inputs={"amax": amax, "history": history, "scale": scale.view(np.uint32), "cursor": np.uint32([3])},
        outputs={"amax": (slots,), "history": (slots * length,), "scale": (slots,), "cursor": (1,)},
        workgroups=1, path="bf16", gpu=default_gpu(),
    )  # fmt: skip
    a, h, s = amax.copy(), history.copy(), scale.copy()
    cursor = fp8.update_scales(a, h, s, 3, recipe)
    assert out["cursor"].tolist() == [cursor] == [4]
    assert np.array_equal(out["history"].reshape(slots, length), h)
    assert np.array_equal(out["scale"].view(np.int32), s)
    assert not out["amax"].any(), "amax reset for the next step"
    assert h[3, 3] == 0, "a non-finite amax is recorded as 0"
