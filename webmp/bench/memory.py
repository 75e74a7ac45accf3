"""`webmp bench`'s memory section: the plans' own byte accounting per category, each reduced format
(STEP_PRECISIONS: `mixed`, `bf16`) beside `fp32`, and which activations stay 32-bit (so what the
activation ratio should be)."""

from __future__ import annotations

from ..engine.plan import Plan

# The precisions the bench's step and memory sections run, fp32 (the reference) last: the step rows,
# the memory ratios and the activation target follow.
STEP_PRECISIONS = ("mixed", "bf16", "fp8", "fp32")
REDUCED = tuple(p for p in STEP_PRECISIONS if p != "fp32")
SIXTEEN_BIT = ("mixed", "bf16")  # judged by TARGETS["activation_ratio"]; fp8 by its own


def activations_not_h(plan: Plan) -> dict[str, int]:
    """The activation buffers not stored in the activation format ("h"), by name, largest first:
    the same bytes on every precision path (f32 scores, logits, statistics, loss rows; u32 token
    ids and the embedding gradient's row order)."""
    wide = [b for b in plan["buffers"] if b["category"] == "activations" and b["dtype"] != "h"]
    return {b["name"]: b["bytes"] for b in sorted(wide, key=lambda b: -b["bytes"])}


def memory_entry(plans: dict[str, Plan]) -> dict:
    """Each plan's bytes per category ({precision: plan}, fp32 among them), each reduced format's
    activation and total ratio to fp32 (`activation_ratios`, `total_ratios`; `activation_ratio` and
    `total_ratio` are mixed's), with the activations that stay 32-bit and the activation ratio the
    fp32 plan's buffer list implies if every h activation is 16-bit (mixed's f16, bf16's bf16)."""
    fp32 = plans["fp32"]["memory"]
    wide = activations_not_h(plans["fp32"])
    rest = sum(wide.values())
    h32 = fp32["activations"] - rest
    entry: dict = {p: plan["memory"] for p, plan in plans.items()}
    reduced = [p for p in plans if p != "fp32"]
    entry["activation_ratios"] = {p: plans[p]["memory"]["activations"] / fp32["activations"] for p in reduced}
    entry["total_ratios"] = {p: sum(plans[p]["memory"].values()) / sum(fp32.values()) for p in reduced}
    if "mixed" in plans:
        entry["activation_ratio"] = entry["activation_ratios"]["mixed"]
        entry["total_ratio"] = entry["total_ratios"]["mixed"]
    entry["expected_activation_ratio"] = (h32 / 2 + rest) / (h32 + rest)
    entry["activations_not_h"] = wide
    return entry
