"""The gradient-range lens for every format: from one layer's counts (the log2 buckets the GPU
already counts, webmp.engine.plan.HistogramSpec's layout: zero, below 2^e_min, one per exponent
e_min..e_max, above, overflow), the share of its values that would flush to zero, be subnormal or
overflow in fp16, bf16, E4M3 and E5M2 — with no GPU work beyond the counts.

Each format is seen as a run in it would store the gradients:
- fp16 at the step's loss scale (the values as stored on the f16 paths);
- bf16 unscaled (bf16 has f32's exponent range and needs no loss scale);
- E4M3 and E5M2 each with a per-tensor scale, as Transformer Engine's delayed scaling gives it:
  a power of two 2^k that puts the layer's largest bucket just below the format's largest value
  (k = floor(log2 max) - 1 - e_top; TE's fp8_max / amax is at most 4x larger, so this view errs by
  at most two binades towards underflow).

A bucket [2^e, 2^(e+1)) seen at exponent e' = e + shift counts as underflow when e' < log2 of the
format's smallest subnormal, subnormal when e' < log2 of its smallest normal, overflow when
e' > floor(log2 max) (fp16: 2^16 and above, as rundir.histogram_shares). The lens's "below
2^e_min" bucket is taken at its top binade, e_min - 1; "above 2^e_max" at e_max + 1. The overflow
bucket (the f16 overflow test flagged it: Inf, NaN or >= 65504 as stored) is fp16's overflow; for
the other formats its values' size is unknown, so it is reported once, as `not_finite`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..engine.formats import FORMATS

# (log2 smallest subnormal, log2 smallest normal, log2 largest finite)
RANGES = {
    "fp16": (-24, -14, math.log2(65504.0)),
    **{name: (1 - f.bias - f.man_bits, 1 - f.bias, math.log2(f.max_value)) for name, f in FORMATS.items()},
}
VIEWS = {
    "fp16": "at the loss scale",
    "bf16": "unscaled",
    "e4m3": "per-tensor scale",
    "e5m2": "per-tensor scale",
}


def range_counts(
    counts: Sequence[int], e_min: int, e_max: int, view: float, fmt: str
) -> tuple[int, int, int]:
    """(underflow, subnormal, overflow) counts of a layer's buckets seen at exponent + `view` against
    the format `fmt`'s range (RANGES; fp16 adds the overflow bucket to its overflow)."""
    sub_min, normal_min, log2_max = RANGES[fmt]
    exps = [e_min - 1, *range(e_min, e_max + 1), e_max + 1]  # below, each exponent, above
    under = sub = over = 0
    for e, n in zip(exps, counts[1:-1], strict=True):
        e_view = e + view
        if e_view < sub_min:
            under += n
        elif e_view < normal_min:
            sub += n
        elif e_view > math.floor(log2_max):
            over += n
    return under, sub, over + (counts[-1] if fmt == "fp16" else 0)


def format_shares(counts: Sequence[int], e_min: int, e_max: int, shift: float) -> dict[str, dict[str, Any]]:
    """Per format (RANGES), its view's shares: underflow, subnormal, overflow, the view (VIEWS) and
    its exponent shift `shift_log2` from the stored values; and, once, not_finite. `shift` is the stored
    gradients' -log2(loss scale) (rundir.scale_shift)."""
    total = sum(counts)
    exps = [e_min - 1, *range(e_min, e_max + 1), e_max + 1]
    nonzero = [e for e, n in zip(exps, counts[1:-1], strict=True) if n]
    out: dict[str, dict[str, Any]] = {}
    for name, (_, _, log2_max) in RANGES.items():
        if name == "fp16":
            view = 0.0
        elif name == "bf16" or not nonzero:
            view = shift
        else:  # the top bucket to just below the format's largest value
            view = float(math.floor(log2_max) - 1 - nonzero[-1])
        under, sub, over = range_counts(counts, e_min, e_max, view, name)
        share = (lambda n: n / total) if total else (lambda n: 0.0)
        out[name] = {"underflow": share(under), "subnormal": share(sub), "overflow": share(over),
                     "view": VIEWS[name], "shift_log2": view}  # fmt: skip
    out["not_finite"] = {"share": counts[-1] / total if total else 0.0}
    return out
