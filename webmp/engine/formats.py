"""Number formats narrower than f16 — bf16, E4M3 (float8_e4m3fn), E5M2 (float8_e5m2) — as the GPU
casts to and from them (shaders/formats/formats.wgsl), in numpy integer arithmetic on f32 bit
patterns: the host's twin of those casts (packing weights, reading a buffer, the lens's ranges).

A cast rounds to nearest, ties to even; NaN becomes the format's NaN with its sign (the payload
dropped); a value past the largest finite one becomes, with `saturate`, that value (infinities
too), else the format's infinity (bf16, E5M2) or NaN (E4M3, which has none); -0 stays -0. These
are ml_dtypes' casts bit for bit (its saturating cast: np.clip to +-max first; tests check both
against ml_dtypes over every boundary and a large sample of bit patterns).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NarrowFormat:
    name: str
    code: int  # the WGSL constant FORMAT_*
    exp_bits: int
    man_bits: int
    bias: int
    max_finite: int  # the largest finite code (sign clear)
    overflow: int  # the code past max_finite: infinity, or NaN where the format has none
    nan: int  # the NaN a cast returns (sign clear)
    has_inf: bool

    @property
    def width(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def per_word(self) -> int:
        """Codes a u32 word holds (the first in the low bits)."""
        return 32 // self.width

    @property
    def max_value(self) -> float:
        return float(narrow_to_f32(np.array([self.max_finite]), self).item())


FORMATS = {
    "bf16": NarrowFormat("bf16", 0, 8, 7, 127, 0x7F7F, 0x7F80, 0x7FC0, True),
    "e4m3": NarrowFormat("e4m3", 1, 4, 3, 7, 0x7E, 0x7F, 0x7F, False),
    "e5m2": NarrowFormat("e5m2", 2, 5, 2, 15, 0x7B, 0x7C, 0x7E, True),
}


def f32_bits_to_narrow(bits: np.ndarray, fmt: NarrowFormat, saturate: bool = False) -> np.ndarray:
    """The codes (uint32, sign at bit exp_bits + man_bits) of the f32 bit patterns `bits`."""
    b = np.asarray(bits, np.uint32).astype(np.int64)
    sign = (b >> 31) << (fmt.exp_bits + fmt.man_bits)
    e, m = (b >> 23) & 0xFF, b & 0x7FFFFF
    sig = np.where(e == 0, m, m | 0x800000)
    te = np.maximum(e, 1) - 127 + fmt.bias
    shift = np.minimum(23 - fmt.man_bits + np.maximum(1 - te, 0), 31)
    code = ((np.maximum(te, 1) - 1) << fmt.man_bits) + (sig >> shift)
    lost, half = sig & ((1 << shift) - 1), 1 << (shift - 1)
    code = code + ((lost > half) | ((lost == half) & (code & 1 == 1)))
    past = fmt.max_finite if saturate else fmt.overflow
    code = np.where(code > fmt.max_finite, past, code)
    code = np.where(e == 0xFF, np.where(m != 0, fmt.nan, past), code)
    return (sign | code).astype(np.uint32)


def narrow_to_f32(codes: np.ndarray, fmt: NarrowFormat) -> np.ndarray:
    """The f32 values of format codes (exact: each is an f32)."""
    c = np.asarray(codes, np.int64)
    w = fmt.exp_bits + fmt.man_bits
    neg, mag = (c >> w) & 1, c & ((1 << w) - 1)
    e, m = mag >> fmt.man_bits, mag & ((1 << fmt.man_bits) - 1)
    normal = np.ldexp(1.0 + m / 2.0**fmt.man_bits, e - fmt.bias)
    value = np.where(e == 0, np.ldexp(m / 2.0**fmt.man_bits, 1 - fmt.bias), normal)
    if fmt.has_inf:
        value = np.where(mag == fmt.overflow, np.inf, value)
        value = np.where(mag > fmt.overflow, np.nan, value)
    else:
        value = np.where(mag == fmt.nan, np.nan, value)
    return np.where(neg == 1, -value, value).astype(np.float32)


def pack_codes(codes: np.ndarray, fmt: NarrowFormat) -> np.ndarray:
    """uint32 words of per_word codes each, the first in the low bits (the last word zero-padded)."""
    c = np.asarray(codes, np.uint32).ravel()
    n = -(-len(c) // fmt.per_word) * fmt.per_word
    rows = np.concatenate([c, np.zeros(n - len(c), np.uint32)]).reshape(-1, fmt.per_word)
    shifts = (np.arange(fmt.per_word) * fmt.width).astype(np.uint32)
    return np.bitwise_or.reduce(rows << shifts, axis=1).astype(np.uint32)
