"""Narrow number formats (shaders/formats/): bf16, E4M3 and E5M2 casts (webmp.engine.formats is
their numpy twin)."""

from __future__ import annotations

from ..engine.formats import FORMATS, NarrowFormat
from ..engine.plan import PlanBuilder
from .common import cdiv, grid


def _format(fmt: str) -> NarrowFormat:
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is not one of {sorted(FORMATS)}")
    return FORMATS[fmt]


def cast_formats(
    pb: PlanBuilder, program: str, *, x: str, codes: str, back: str, N: int, fmt: str, saturate: bool
) -> None:
    """codes = the N f32 bit patterns of x cast to `fmt` (a name of FORMATS), packed as stored (per_word
    codes a word), back = the f32 bit patterns of those codes. For tests and webmp.testing.probe: the
    formats' casts bit for bit on each path; no model dispatches it."""
    f = _format(fmt)
    pb.dispatch(
        program,
        ["formats.wgsl", "cast_formats.wgsl"],
        "cast_formats",
        {"N": N, "FORMAT": f.code, "SATURATE": int(saturate)},
        {"x": x, "codes": codes, "back": back},
        grid(cdiv(N, f.per_word)),
    )


def decode_formats(pb: PlanBuilder, program: str, *, x: str, codes: str, back: str, N: int, fmt: str) -> None:
    """back = the f32 bit patterns of the N packed `fmt` codes in codes (x unread: the file's
    binding). For tests: every code's value, NaNs and infinities included."""
    pb.dispatch(
        program,
        ["formats.wgsl", "cast_formats.wgsl"],
        "decode_formats",
        {"N": N, "FORMAT": _format(fmt).code},
        {"x": x, "codes": codes, "back": back},
        grid(N),
    )
