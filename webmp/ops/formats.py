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


FP8_SOURCES = ["formats.wgsl", "fp8.wgsl"]
FP8_BUFFERS = ("fp8_scale", "fp8_amax", "fp8_history", "fp8_cursor")  # webmp.models.common declares them


def fp8_cast(
    pb: PlanBuilder, program: str, *, X: str, Y: str, rows: int, cols: int, slot: int, act: int, record: bool
) -> None:
    """Y = X (h [rows, cols], activation `act` applied first) quantised at slot's scale to its
    format (webmp.engine.fp8), in the activation format; with `record` its amax into fp8_amax."""
    words = rows * cdiv(cols, 2)
    pb.dispatch(
        program,
        [*FP8_SOURCES, "fp8_cast.wgsl"],
        "fp8_cast",
        {"WORDS": words, "COLS": cols, "ACT": act, "SLOT": slot, "RECORD": int(record)},
        {"X": X, "Y": Y, "scale": "fp8_scale", "amax": "fp8_amax"},
        grid(words),
    )


def fp8_cast_weights(
    pb: PlanBuilder, program: str, *, P: str, Wh: str, rows: int, cols: int, slot: int, record: bool
) -> None:
    """Wh (h [rows, cols]) = the f32 master P quantised at slot's scale (E4M3); `record`: its amax."""
    words = rows * cdiv(cols, 2)
    pb.dispatch(
        program,
        [*FP8_SOURCES, "fp8_cast_weights.wgsl"],
        "fp8_cast_weights",
        {"WORDS": words, "COLS": cols, "SLOT": slot, "RECORD": int(record)},
        {"P": P, "Wh": Wh, "scale": "fp8_scale", "amax": "fp8_amax"},
        grid(words),
    )


def fp8_scales(pb: PlanBuilder, program: str, *, slots: int, length: int, algo: int, margin: int) -> None:
    """Each slot's amax into its history, the next scales (delayed scaling), amax reset: one workgroup."""
    pb.dispatch(
        program,
        [*FP8_SOURCES, "fp8_scales.wgsl"],
        "fp8_scales",
        {"SLOTS": slots, "LEN": length, "ALGO": algo, "MARGIN": margin},
        {"amax": "fp8_amax", "history": "fp8_history", "scale": "fp8_scale", "cursor": "fp8_cursor"},
        [1],
    )
