"""The bf16, E4M3 and E5M2 casts (shaders/formats/formats.wgsl, webmp.engine.formats its numpy twin)
bit for bit against ml_dtypes' numpy types, at every boundary and over a large sample of f32 bit
patterns, on each path: codes (as stored, packed) and the f32 values they stand for."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from webmp import ops
from webmp.engine.formats import FORMATS, NarrowFormat, f32_bits_to_narrow, narrow_to_f32, pack_codes
from webmp.engine.runtime import default_gpu
from webmp.testing.probe import run_op

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
