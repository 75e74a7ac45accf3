"""fp8 training's per-tensor delayed scaling (shaders/formats/fp8.wgsl, fp8_cast*.wgsl, fp8_scales.wgsl)
in numpy integer arithmetic: the host's twin, bit for bit, and the recipe a plan carries.

`--precision fp8` quantises each fp8 layer's input and weight to E4M3 and its output gradient to
E5M2 where its matmuls read them. Each such tensor (a *slot*: three a layer, in that order) has a
scale 2^e: the value stored is round_fp8(x * 2^e) * 2^-e, exact in the bf16 activation format, so
the matmul computes what an fp8 GEMM and its descaling compute. e follows Transformer Engine's
`DelayedScaling`: after each step the step's amax goes into the slot's history (amax_history_len
entries), and the next scale is fp8_max / amax / 2^margin with amax the history's max or the most
recent value, here rounded down to a power of two (so no value saturates at the amax that set it,
and no GEMM needs an epilogue). Differences from Transformer Engine, each on purpose: the power of
two; a non-finite amax is recorded as 0 (TE keeps the scale but the inf stays in the history for
amax_history_len steps); the scale starts at 1 as TE's does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .formats import FORMATS, f32_bits_to_narrow, narrow_to_f32

E_MIN, E_MAX = -111, 100  # fp8.wgsl's FP8_E_MIN / FP8_E_MAX
SLOT_KINDS = ("input", "weight", "grad_output")  # a layer's three slots, in order
SLOT_FORMATS = {"input": "e4m3", "weight": "e4m3", "grad_output": "e5m2"}
ALGOS = {"max": 0, "most_recent": 1}  # fp8_scales.wgsl's ALGO


@dataclass(frozen=True)
class Fp8Recipe:
    """What a plan's fp8 layers follow (summary.json's "fp8")."""

    margin: int
    amax_history_len: int
    amax_compute_algo: str
    keep_ends: bool
    layers: tuple[str, ...] = ()  # the layers quantised, in slot order (slots 3i, 3i+1, 3i+2)

    def describe(self) -> dict:
        d = asdict(self)
        d["layers"] = list(self.layers)
        d["formats"] = {"forward": "e4m3 (inputs, weights)", "backward": "e5m2 (output gradients)"}
        d["scaling"] = "delayed, per tensor, power of two"
        return d


def describe_fp8(recipe: dict, loss_scaling: bool) -> str:
    """A run's fp8 recipe in a sentence (the log's; recipe: Fp8Recipe.describe's)."""
    layers = recipe["layers"]
    ends = "the first and last Linear layers in bf16" if recipe["keep_ends"] else "every Linear layer in fp8"
    scaling = (
        f"margin {recipe['margin']}, amax history {recipe['amax_history_len']}, {recipe['amax_compute_algo']}"
    )
    loss = "the dynamic loss scale on top" if loss_scaling else "no loss scale (a non-finite step is skipped)"
    return (
        f"fp8 matmuls in {len(layers)} layer(s) ({', '.join(layers)}): inputs and weights E4M3, output "
        f"gradients E5M2, each tensor's scale a power of two from delayed scaling ({scaling}); {ends}, "
        f"attention's score and value products, normalisation and embeddings in bf16; {loss}"
    )


def slot_format(slot: int) -> str:
    return SLOT_FORMATS[SLOT_KINDS[slot % 3]]


def quantise(x: np.ndarray, e: int, fmt: str) -> np.ndarray:
    """fp8_quantise_bits on float32 values: round(x * 2^e) to `fmt`, saturating, times 2^-e."""
    f = FORMATS[fmt]
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.int64)
    sign, field = b & 0x80000000, (b >> 23) & 0xFF
    shifted = field + e
    moved = (b & 0x807FFFFF) | (np.clip(shifted, 0, 255) << 23)
    scaled = np.where(shifted < 1, sign, np.where(shifted > 254, sign | 0x7F800000, moved))
    scaled = np.where(field == 0, sign, np.where(field == 255, b, scaled))
    q = narrow_to_f32(f32_bits_to_narrow(scaled.astype(np.uint32), f, saturate=True), f)
    qb = q.view(np.uint32).astype(np.int64)
    qf = (qb >> 23) & 0xFF
    out = np.where((qf == 0) | (qf == 255), qb, (qb & 0x807FFFFF) | (np.clip(qf - e, 0, 255) << 23))
    return out.astype(np.uint32).view(np.float32)


def scale_exponent(amax_bits: int, fmt: str, margin: int) -> int:
    """fp8_scale_exponent: the largest e with amax * 2^e <= the format's max, less margin, clamped."""
    p = 15 if fmt == "e5m2" else 8
    field = amax_bits >> 23
    if field == 0:
        return E_MAX
    over = 1 if (amax_bits & 0x7FFFFF) > 0x600000 else 0
    return int(np.clip(p - (field - 127) - over - margin, E_MIN, E_MAX))


def amax_bits(x: np.ndarray) -> int:
    """What fp8_cast records: the largest |x|'s bits (0 for an empty or all-zero tensor)."""
    b = np.asarray(x, np.float32).view(np.uint32) & np.uint32(0x7FFFFFFF)
    return int(b.max()) if b.size else 0


def update_scales(
    amax: np.ndarray, history: np.ndarray, scale: np.ndarray, cursor: int, recipe: Fp8Recipe
) -> int:
    """fp8_scales on host arrays (amax [slots] bits, history [slots, len] bits, scale [slots] e), in
    place; returns the next cursor."""
    for s in range(len(amax)):
        a = int(amax[s])
        a = 0 if a >= 0x7F800000 else a
        amax[s] = 0
        history[s, cursor] = a
        m = int(history[s].max()) if recipe.amax_compute_algo == "max" else a
        if m:
            scale[s] = scale_exponent(m, slot_format(s), recipe.margin)
    return (cursor + 1) % recipe.amax_history_len
