"""The bf16, E4M3 and E5M2 casts (shaders/formats/formats.wgsl, webmp.engine.formats its numpy twin)
bit for bit against ml_dtypes' numpy types, at every boundary and over a large sample of f32 bit
patterns, on each path: codes (as stored, packed) and the f32 values they stand for. Then the bf16
storage path (shaders/common/prelude_bf16.wgsl, `--precision bf16`): its rounding is ml_dtypes'
bf16 cast bit for bit (the round_h inspection kernel; values as f32, so only finite ones: WGSL may
assume f32 NaN away), its packed words pack_h's, and a matmul on it the float64 product of
bf16-rounded operands within f32 accumulation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from webmp import ops
from webmp.engine.formats import FORMATS, NarrowFormat, f32_bits_to_narrow, narrow_to_f32, pack_codes
from webmp.engine.plan import pack_h, unpack_h
from webmp.engine.runtime import default_gpu
from webmp.testing import reference as ref
from webmp.testing.probe import run_matmul, run_op

ML = {"bf16": (ml_dtypes.bfloat16, np.uint16), "e4m3": (ml_dtypes.float8_e4m3fn, np.uint8),
      "e5m2": (ml_dtypes.float8_e5m2, np.uint8)}  # fmt: skip
CASES = [(name, sat) for name in FORMATS for sat in (False, True)]


def expected_codes(bits: np.ndarray, fmt: NarrowFormat, saturate: bool) -> np.ndarray:
    """ml_dtypes' cast of the f32s (its saturating cast: clipped to +-max first; NaN stays NaN)."""
    t, u = ML[fmt.name]
    x = bits.view(np.float32)
    if saturate:
        x = np.clip(x, -fmt.max_value, fmt.max_value)
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(t).view(u).astype(np.uint32)


def expected_back(codes: np.ndarray, fmt: NarrowFormat) -> np.ndarray:
    t, u = ML[fmt.name]
    return codes.astype(u).view(t).astype(np.float32).view(np.uint32)


def boundaries(fmt: NarrowFormat) -> np.ndarray:
    """Every code's value, the midpoints between neighbours (ties) and one f32 ulp either side, the
    subnormal range's edges, the largest finite value and past it, infinities, NaNs with payloads,
    +-0, f32's subnormals and extremes; both signs."""
    codes = np.arange(1 << (fmt.width - 1), dtype=np.uint32)
    with np.errstate(invalid="ignore"):
        values = narrow_to_f32(codes, fmt).astype(np.float64)
    values = values[np.isfinite(values)]
    values = np.concatenate([values, [fmt.max_value * 2, fmt.max_value * (1 + 2.0**-fmt.man_bits)]])
    mids = (values[:-1] + values[1:]) / 2  # exact in f64; in f32 for these formats
    with np.errstate(over="ignore"):  # bf16's largest value doubled: infinity, as wanted
        pts = np.concatenate([values, mids]).astype(np.float32)
    near = np.concatenate([pts, np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(0))])
    bits = near.view(np.uint32)
    special = np.array([0x7F800000, 0x7F800001, 0x7FC00000, 0x7FBFFFFF, 0x7FFFFFFF, 0x00000001,
                        0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x3F800000, 0x0], np.uint32)  # fmt: skip
    both = np.concatenate([bits, special])
    return np.concatenate([both, both | np.uint32(0x80000000)])


def sample(fmt: NarrowFormat, n: int = 1 << 16) -> np.ndarray:
    """Random f32 bit patterns, half of them anywhere (NaNs and infinities included), half with
    exponents around the format's range."""
    rng = np.random.default_rng(sum(map(ord, fmt.name)))
    anywhere = rng.integers(0, 1 << 32, n // 2, dtype=np.uint64).astype(np.uint32)
    lo, hi = 127 - fmt.bias - fmt.man_bits - 3, 127 + (1 << fmt.exp_bits) - fmt.bias + 2
    exps = rng.integers(max(lo, 0), min(hi, 255), n // 2).astype(np.uint32)
    near = (
        (rng.integers(0, 2, n // 2).astype(np.uint32) << 31)
        | (exps << 23)
        | rng.integers(0, 1 << 23, n // 2).astype(np.uint32)
    )
    return np.concatenate([anywhere, near])


@pytest.mark.parametrize("name,saturate", CASES)
def test_numpy_twin_is_ml_dtypes(name, saturate):
    fmt = FORMATS[name]
    bits = np.concatenate([boundaries(fmt), sample(fmt, 1 << 20)])
    codes = f32_bits_to_narrow(bits, fmt, saturate)
    want = expected_codes(bits, fmt, saturate)
    bad = np.flatnonzero(codes != want)
    assert not len(bad), [(hex(bits[i]), hex(codes[i]), hex(want[i])) for i in bad[:5]]
    with np.errstate(invalid="ignore"):
        back = narrow_to_f32(codes, fmt).view(np.uint32)
    assert np.array_equal(back, expected_back(codes, fmt))


@pytest.mark.parametrize("name,saturate", CASES)
def test_gpu_casts_are_ml_dtypes(name, saturate, path):
    fmt = FORMATS[name]
    bits = np.concatenate([boundaries(fmt), sample(fmt)])
    n = len(bits) - 3  # a last word that is only partly used
    bits = bits[:n]
    words = -(-n // fmt.per_word)
    out = run_op(
        ops.cast_formats, {"x": bits}, {"codes": (words,), "back": (n,)},
        path=path, gpu=default_gpu(), N=n, fmt=name, saturate=saturate,
    )  # fmt: skip
    want = expected_codes(bits, fmt, saturate)
    assert np.array_equal(out["codes"], pack_codes(want, fmt)), "codes, packed as stored"
    assert np.array_equal(out["back"], expected_back(want, fmt)), "the codes' f32 values"


@pytest.mark.parametrize("name", FORMATS)
def test_gpu_decodes_every_code(name, path):
    """Every code of the format (NaNs and infinities, subnormals, both zeros) to its f32 value."""
    fmt = FORMATS[name]
    codes = np.arange(1 << fmt.width, dtype=np.uint32)
    out = run_op(
        ops.decode_formats, {"x": np.zeros(1, np.uint32), "codes": pack_codes(codes, fmt)},
        {"back": (len(codes),)}, path=path, gpu=default_gpu(), N=len(codes), fmt=name,
    )  # fmt: skip
    assert np.array_equal(out["back"], expected_back(codes, fmt))


def test_the_formats_ranges():
    """What the formats are: largest finite values, and the saturating casts' overflow."""
    assert [FORMATS[n].max_value for n in ("e4m3", "e5m2")] == [448.0, 57344.0]
    assert FORMATS["bf16"].max_value == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    big = np.array([1e30, -np.inf], np.float32).view(np.uint32)
    assert f32_bits_to_narrow(big, FORMATS["e4m3"], True).tolist() == [0x7E, 0xFE]
    assert f32_bits_to_narrow(big, FORMATS["e4m3"], False).tolist() == [0x7F, 0xFF]  # NaN: no inf
    assert f32_bits_to_narrow(big, FORMATS["e5m2"], False).tolist() == [0x7C, 0xFC]
    with pytest.raises(ValueError, match="not one of"):
        run_op(ops.cast_formats, {"x": big}, {"codes": (1,), "back": (2,)}, N=2, fmt="fp4", saturate=False)


# --- the bf16 storage path ------------------------------------------------------------------------


def test_h_round_is_ml_dtypes_bf16():
    """Every boundary of bf16 (ties, subnormals, the largest finite value and past it) and sampled
    f32 bit patterns, finite ones: h_round on the bf16 path is ml_dtypes' cast and back."""
    bits = np.concatenate([boundaries(FORMATS["bf16"]), sample(FORMATS["bf16"])])
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    got = run_op(ops.round_h, {"x": x}, {"out": x.shape}, N=len(x), path="bf16", gpu=default_gpu())["out"]
    with np.errstate(over="ignore"):
        want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert not len(bad), [(float(x[i]), float(got[i]), float(want[i])) for i in bad[:4]]
    assert np.array_equal(ref.round_h(x, "bf16"), want.astype(np.float64))


def test_pack_h_round_trips():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((5, 7)) * 2.0 ** rng.integers(-100, 100, (5, 7))).astype(np.float32)
    back = unpack_h(pack_h(a, "bf16"), 5, 7, "bf16")
    assert np.array_equal(back, a.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert len(pack_h(a, "bf16")) == 5 * 4 * 4  # two a word, odd rows padded: as the f16 paths


def test_matmul_on_the_bf16_path():
    """C = A·W + b stored in bf16: the float64 product of the bf16 operands, then one bf16 rounding;
    the f32 accumulation over K = 48 terms is far below bf16's half ulp (2^-9 relative), so C is
    the rounded exact product or a neighbour (a double rounding near a tie)."""
    rng = np.random.default_rng(11)
    A = ref.round_h(rng.standard_normal((33, 48)), "bf16")
    W = ref.round_h(rng.standard_normal((48, 20)), "bf16")
    b = rng.standard_normal(20).astype(np.float32)
    out = run_matmul("matmul_fwd", A, W, bias=b, path="bf16", gpu=default_gpu())
    exact = A @ W + b
    got = out["C"].astype(np.float64)
    ulp = np.abs(ref.round_h(exact, "bf16")) * 2.0**-7
    assert np.all(np.abs(got - exact) <= ulp), np.max(np.abs(got - exact) / ulp)
    assert np.mean(got == ref.round_h(exact, "bf16")) > 0.95
    assert not out["flags"].any()
