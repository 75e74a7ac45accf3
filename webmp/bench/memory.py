"""`webmp bench`'s memory section: the plans' own byte accounting per category, `mixed` beside
`fp32`, and which activations stay 32-bit (so what the activation ratio should be)."""

from __future__ import annotations

from ..engine.plan import Plan


def activations_not_h(plan: Plan) -> dict[str, int]:
    """The activation buffers not stored in the activation format ("h"), by name, largest first:
    the same bytes on every precision path (f32 scores, logits, statistics, loss rows; u32 token
    ids and the embedding gradient's row order)."""
    wide = [b for b in plan["buffers"] if b["category"] == "activations" and b["dtype"] != "h"]
    return {b["name"]: b["bytes"] for b in sorted(wide, key=lambda b: -b["bytes"])}


def memory_entry(mixed: Plan, fp32: Plan) -> dict:
    """Both plans' bytes per category and their ratios, with the activations that stay 32-bit and the
    activation ratio the fp32 plan's buffer list implies if every h activation halves in mixed."""
    a, b = mixed["memory"], fp32["memory"]
    wide = activations_not_h(fp32)
    rest = sum(wide.values())
    h32 = b["activations"] - rest
    return {
        "mixed": a,
        "fp32": b,
        "activation_ratio": a["activations"] / b["activations"],
        "expected_activation_ratio": (h32 / 2 + rest) / (h32 + rest),
        "activations_not_h": wide,
        "total_ratio": sum(a.values()) / sum(b.values()),
    }
