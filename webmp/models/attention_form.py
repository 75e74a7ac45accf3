"""Which form of causal self-attention a plan takes (TrainConfig.attention): the three-kernel form
(webmp/ops/attention.py, the scores and probabilities as [B*H*T, T] buffers) or the fused one
(webmp/ops/flash.py: no [T, T] buffer, P recomputed in the backward pass)."""

from __future__ import annotations

from ..config import TrainConfig
from ..engine.plan import Plan
from ..engine.tiles import TileTable, attention_class
from ..ops import flash_supported


def scores_bytes(B: int, T: int, H: int) -> int:
    """The three-kernel form's largest buffer: S, f32 [B*H*T, T]."""
    return 4 * B * H * T * T


def attention_form(
    choice: str, tiles: TileTable, path: str, B: int, T: int, H: int, d: int
) -> tuple[str, str]:
    """("fused" or "unfused", why) for `choice` (TrainConfig.attention) and B windows of T positions,
    H heads of size d. auto: fused where S would exceed the adapter's largest binding
    (tiles.buffer_limit) or where the tune cache measured fused faster for the attention class
    (tiles.attention), else the three-kernel form; a resumed run's auto keeps its checkpoint's
    form (tiles.kept_attention), which another tune cache or adapter might not choose. ValueError
    when fused is asked for a shape the fused kernels cannot run."""
    why_not = flash_supported(T, H, d, B)
    if choice == "fused":
        if why_not:
            raise ValueError(f"attention fused: {why_not}")
        return "fused", "asked for (--attention fused)"
    if choice == "unfused":
        return "unfused", "asked for (--attention unfused)"
    if choice != "auto":
        raise ValueError(f"attention must be auto, fused or unfused, not {choice!r}")
    need, limit = scores_bytes(B, T, H), tiles.buffer_limit
    kept = tiles.kept_attention
    if (kept == "unfused" and need <= limit) or (kept == "fused" and not why_not):
        return kept, "the checkpoint's form: a resumed run keeps it (--attention auto), for the same bits"
    if need > limit and not why_not:
        return "fused", (
            f"the three-kernel form's scores S would take {need} bytes, above this adapter's "
            f"maxStorageBufferBindingSize {limit}"
        )
    cls = attention_class(path, T, d)
    if tiles.attention.get(cls) == "fused" and not why_not:
        return "fused", f"the tune cache measured it faster for {cls}"
    if tiles.attention.get(cls) == "unfused":
        return "unfused", f"the tune cache measured it faster for {cls}"
    return "unfused", "the default"


def describe_attention(form: str, why: str) -> str:
    """The run log's line (after "webmp: "; the page's log prints it as it is)."""
    name = "fused (flash-style)" if form == "fused" else "three-kernel (S, P, PV)"
    return f"attention: {name}: {why}"


def attention_entry(form: str, why: str) -> dict[str, str]:
    """The plan's and summary.json's `attention`: the form, why, and the log's line."""
    return {"form": form, "why": why, "line": describe_attention(form, why)}


def plan_attention_form(plan: Plan) -> str | None:
    """ "fused" or "unfused", the form the plan's attention takes (None: the plan has none): the
    GPT's plan says (its `attention`); a token network's is read off its kernels."""
    if "attention" in plan:
        return plan["attention"]["form"]
    entries = {k["entry"] for k in plan["kernels"]}
    if "flash_fwd" in entries:
        return "fused"
    return "unfused" if entries & {"attn_softmax_fwd", "attn_softmax_fwd_thread"} else None


def plan_attention(plan: Plan, cfg: TrainConfig) -> dict[str, str] | None:
    """The plan's attention form, why and the log's line (attention_entry; None: the plan has no
    attention): the GPT's plan says (its `attention`); a token network's form is read off its
    kernels, its why is the flag."""
    if "attention" in plan:
        return plan["attention"]
    form = plan_attention_form(plan)
    return None if form is None else attention_entry(form, f"--attention {cfg.attention}")
