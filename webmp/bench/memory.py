"""`webmp bench`'s memory section: the plans' own byte accounting per category, each reduced format
(STEP_PRECISIONS: `mixed`, `bf16`) beside `fp32`, and which activations stay 32-bit (so what the
activation ratio should be)."""

from __future__ import annotations

from ..engine.plan import Plan, memory_by_category

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


ATTENTION_CONTEXTS = (64, 256, 1024)  # the contexts for the attention's memory rows
TIMED_CONTEXTS = (64, 256)  # a step of the default GPT at 1024 takes ~20 s on lavapipe: not timed


def attention_memory(
    gpu, config: dict, corpus, path: str, timed: bool = True, steps: int = 3, log=print
) -> list[dict]:
    """Per context of ATTENTION_CONTEXTS and attention form (fused, unfused): the GPT `config`'s
    plan's bytes by category (a dry run), its largest buffer, whether that fits the adapter's
    largest binding, and (timed, contexts TIMED_CONTEXTS, where it fits) the median ms a
    train_step over `steps` steps after a first one (one submit and a state read each)."""
    from statistics import median
    from time import perf_counter

    from ..config import TrainConfig
    from ..engine.runtime import Runtime
    from ..engine.tiles import TileTable
    from ..models import build_plan, plan_buffers

    limit = min(gpu.limits.get("maxStorageBufferBindingSize", 0), gpu.limits.get("maxBufferSize", 0))
    rows = []
    for T in ATTENTION_CONTEXTS:
        for form in ("unfused", "fused"):
            cfg = TrainConfig(**{**config, "context": T, "attention": form})
            bufs = plan_buffers(cfg, corpus, path)
            largest = max(bufs, key=lambda b: b["bytes"])
            row: dict = {
                "context": T, "attention": form, "memory": memory_by_category(bufs),
                "largest": {"name": largest["name"], "bytes": largest["bytes"]},
                "fits": largest["bytes"] <= limit, "ms_per_step": None,
            }  # fmt: skip
            if timed and row["fits"] and T in TIMED_CONTEXTS:
                plan, blob = build_plan(cfg, corpus, path, TileTable.for_adapter(gpu.name, gpu.info))
                rt = Runtime(plan, blob, gpu, first=["train_step"])
                times = []
                for _ in range(steps + 1):
                    t0 = perf_counter()
                    rt.run("train_step")
                    rt.read("state")
                    times.append(perf_counter() - t0)
                row["ms_per_step"] = round(1e3 * median(times[1:]), 1)
            log(attention_line(row))
            rows.append(row)
    return rows


def attention_line(row: dict) -> str:
    """One attention memory row as the bench prints it."""
    mib = 2**20
    step = f"{row['ms_per_step']:8.1f} ms/step" if row["ms_per_step"] is not None else f"{'-':>8} ms/step"
    fits = "" if row["fits"] else " (refused: above the adapter's largest binding)"
    return (
        f"context {row['context']:5d} {row['attention']:8} "
        f"activations {row['memory']['activations'] / mib:8.1f} MiB, "
        f"total {sum(row['memory'].values()) / mib:8.1f} MiB, largest {row['largest']['name']} "
        f"{row['largest']['bytes'] / mib:.1f} MiB{fits}; {step}"
    )
