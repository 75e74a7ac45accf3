"""What a `webmp bench` run says: its targets, the headline ratios and verdicts it reaches on them
(summarize: the JSON's `summary`), and the table it prints (format_table)."""

from __future__ import annotations

import math
from typing import Any

from .levers import batches_text, lever_line
from .matmul import CORE_TILES
from .memory import REDUCED, SIXTEEN_BIT, attention_line
from .readbacks import readback_line
from .sampling import sampling_line
from .step import cache_word

TARGETS = {
    "host_over_floor": 1.2,
    "activation_ratio": 0.55,
    "fp8_activation_ratio": 0.30,
    "readbacks_between_logs": 0,
    # measured only where a GPU is present (see docs/benchmarks.md)
    "gpu_f16_over_f32": 2.0,
    "gpu_f16_over_torch_fp32": 0.5,
    "gpu_mixed_over_fp32_step": 0.6,
}

# Set for Mesa's lavapipe at the default size (issue 10), judged where docs/benchmarks.md is made
# (webmp.bench.markdown): the median GFLOP/s over the GPT's matmul shapes with its plan's tiles, the
# GPT's first step with a cold Mesa shader cache, its step against tinygrad's on the same adapter.
LAVAPIPE_TARGETS = {
    "gpt_matmul_median_native": 45.0,
    "gpt_matmul_median_fp32": 30.0,
    # issue 28: tuned, the GPT's shapes; untuned, the bench's training shapes; a first run's step
    "gpt_matmul_median_tuned_native": 60.0,
    "train_matmul_median_untuned_native": 45.0,
    "train_matmul_median_untuned_fp32": 30.0,
    "first_run_step_ratio": 1.25,
    "gpt_cold_first_step_s": 15.0,
    "tinygrad_step_ratio": 0.25,
}

# --- verdicts ----------------------------------------------------------------------------------------


def _target(value, op: str, limit, met: bool | None = None, worst: str | None = None) -> dict:
    if met is None:
        met = {"<=": value <= limit, ">=": value >= limit, "==": value == limit}[op]
    t = {"value": value, "target": f"{op} {limit:g}", "met": met}
    if worst is not None:
        t["worst"] = worst
    return t


def step_verdicts(row: dict) -> dict[str, bool]:
    """A train_step row's own targets: host CPU within TARGETS of the floor, one submit per step."""
    return {
        "host_over_floor": row["host_over_floor"] <= TARGETS["host_over_floor"],
        "submits_per_step": row["submits_per_step"] == 1,
    }


def readback_verdict(rb: dict) -> bool:
    """Exactly the maps the schedule asks for in the loop (Runtime.readbacks agreeing), none between."""
    return (
        rb["readbacks_in_loop"] == rb["runtime_readbacks_in_loop"] == rb["expected_readbacks"]
        and rb["readbacks_between_logs"] == TARGETS["readbacks_between_logs"]
    )


def _headline(r: dict) -> dict[str, Any]:
    """The matmul ratios at the largest square, and mixed / fp32 wall per step of each model."""
    s: dict[str, Any] = {}
    f16 = "native" if r["adapter"]["shader_f16"] else "emulated"
    biggest = max((m for m in r["matmul"] if m["kind"] == "square"), key=lambda m: m["M"])
    g = biggest["gflops"]
    s["largest_square"] = biggest["M"]
    s["f16_over_f32_matmul"] = g[f16] / g["fp32"]
    s["f16_over_numpy_f32"] = g[f16] / g["numpy_f32"]
    if "torch_fp32" in g:
        s["f16_over_torch_fp32"] = g[f16] / g["torch_fp32"]
    for name in dict.fromkeys(row["model"] for row in r["train_step"]):
        rows = {row["precision"]: row for row in r["train_step"] if row["model"] == name}
        for p in (p for p in REDUCED if p in rows):
            s[f"{p}_over_fp32_step_{name}"] = rows[p]["wall_ms_per_step"] / rows["fp32"]["wall_ms_per_step"]
    return s


def _step_targets(steps: list[dict]) -> dict[str, dict]:
    """Host over floor and submits per step: the worst model's, named."""
    if not steps:
        return {}
    w = max(steps, key=lambda row: row["host_over_floor"])
    host = _target(
        w["host_over_floor"], "<=", TARGETS["host_over_floor"], worst=f"{w['model']} {w['precision']}"
    )
    w = max(steps, key=lambda row: abs(row["submits_per_step"] - 1))
    submits = _target(w["submits_per_step"], "==", 1, worst=f"{w['model']} {w['precision']}")
    return {"host_over_floor": host, "submits_per_step": submits}


def _memory_targets(memory: dict) -> dict[str, dict]:
    if not memory:
        return {}
    out = {}
    for key, formats in (("activation_ratio", SIXTEEN_BIT), ("fp8_activation_ratio", ("fp8",))):
        ratios = [
            (f"{name} {p}", r)
            for name, m in memory.items()
            for p, r in activation_ratios(m).items()
            if p in formats
        ]
        if ratios:
            worst, ratio = max(ratios, key=lambda kv: kv[1])
            out[key] = _target(ratio, "<=", TARGETS[key], worst=worst)
    return out


def activation_ratios(m: dict) -> dict[str, float]:
    """A memory entry's activation ratio to fp32 per reduced format (a bench JSON from before bf16
    has mixed's alone)."""
    return m.get("activation_ratios") or {"mixed": m["activation_ratio"]}


def _readback_targets(readbacks: dict) -> dict[str, dict]:
    if not readbacks:
        return {}
    # reads in the loop over what the schedule asks for (N / log_every): 1 where exactly those
    name, rb = max(readbacks.items(), key=lambda kv: kv[1]["readbacks_in_loop"] / kv[1]["expected_readbacks"])
    between = sum(x["readbacks_between_logs"] for x in readbacks.values())
    return {
        "readbacks_per_log_interval": _target(
            rb["readbacks_in_loop"] / rb["expected_readbacks"],
            "==",
            1,
            met=all(readback_verdict(x) for x in readbacks.values()),
            worst=name,
        ),
        "readbacks_between_logs": _target(between, "==", TARGETS["readbacks_between_logs"]),
    }


def _gpu_targets(r: dict, s: dict) -> dict[str, dict]:
    """The GPU targets, judged (met not None) only on a GPU at the 'gpu' size."""
    on_gpu = r["adapter"]["type"] not in ("CPU", "cpu")
    gpu_targets = {
        "f16_over_f32_matmul": ("gpu_f16_over_f32", ">="),
        "f16_over_torch_fp32": ("gpu_f16_over_torch_fp32", ">="),
        "mixed_over_fp32_step_wide": ("gpu_mixed_over_fp32_step", "<="),
    }
    targets: dict[str, dict] = {}
    for key, (tkey, op) in gpu_targets.items():
        if key not in s:
            continue
        t = _target(s[key], op, TARGETS[tkey])
        t["target"] += " (on a GPU, at the 'gpu' size)"
        if not (on_gpu and r["size"] == "gpu"):
            t["met"] = None
        targets[key] = t
    return targets


def summarize(r: dict) -> dict:
    """Headline ratios and the targets, each with the value measured in this run; a target over
    several models reports the worst of them (and names it)."""
    s = _headline(r)
    s["targets"] = {
        **_step_targets(r["train_step"]),
        **_memory_targets(r["memory"]),
        **_readback_targets(r["readbacks"]),
        **_gpu_targets(r, s),
    }
    return s


# --- the printed table ---------------------------------------------------------------------------------


def _pass(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def _matmul_table(r: dict) -> list[str]:
    cols = list(dict.fromkeys(k for m in r["matmul"] for k in m["gflops"]))
    out = ["matmul GFLOP/s (checked against numpy before timing)"]
    out.append(f"{'kind':6} {'product':7} {'M x N x K':>17} " + " ".join(f"{c:>11}" for c in cols))
    for m in r["matmul"]:
        shape = f"{m['M']}x{m['N']}x{m['K']}"
        out.append(
            f"{m['kind']:6} {m['product']:7} {shape:>17} "
            + " ".join(f"{m['gflops'][c]:11.2f}" if c in m["gflops"] else f"{'-':>11}" for c in cols)
        )
    out += ["", "matmul GFLOP/s by core (a fixed tile choice each: bench.matmul.CORE_TILES), per path"]
    cores = list(CORE_TILES)
    for m in (m for m in r["matmul"] if m["cores"]):
        shape = f"{m['M']}x{m['N']}x{m['K']}"
        cells = "  ".join(
            f"{path} " + "/".join(f"{c.get(k, math.nan):.1f}" for k in cores)
            for path, c in m["cores"].items()
        )
        out.append(f"{m['kind']:6} {m['product']:7} {shape:>17}  ({'/'.join(cores)})  {cells}")
    for name, mm in r.get("model_matmuls", {}).items():
        med = "  ".join(f"{p} {g:.2f}" for p, g in mm["median_gflops"].items())
        out.append(
            f"{name}: median GFLOP/s over its {len(mm['shapes'])} matmul shapes (the plan's tiles): {med}"
        )
    return out


def _step_table(r: dict) -> list[str]:
    out = [
        "training step: wall per step of our loop, examples (MLP) or tokens (GPT) per second; host CPU "
        "per step of our loop and the bare replay (medians of alternating steps, metrics reads left "
        "out); target host/floor <= "
        f"{TARGETS['host_over_floor']:g} and 1 submit per step",
        f"{'model':30} {'prec':5} {'path':8} {'disp':>4} {'subm':>4} {'wall ms':>9} {'per s':>13} "
        f"{'host ms':>8} {'floor ms':>8} {'host/floor':>10} {'target':>6}",
    ]
    for s in r["train_step"]:
        model = f"{s['model']} {s['shape']} b{s['batch']}"
        rate = f"{s['tokens_per_s']:.0f} tok" if s["tokens_per_s"] else f"{s['examples_per_s']:.0f} ex"
        out.append(
            f"{model:30} {s['precision']:5} {s['f16_path']:8} {s['dispatches_per_step']:4} "
            f"{s['submits_per_step']:4g} {s['wall_ms_per_step']:9.2f} {rate:>13} "
            f"{s['host_cpu_ms_per_step']:8.3f} {s['floor_host_cpu_ms_per_step']:8.3f} "
            f"{s['host_over_floor']:10.2f} {_pass(all(step_verdicts(s).values())):>6}"
        )
    return out


def _first_step_table(r: dict) -> list[str]:
    out = [
        "time to the first step (s): plan build, runtime creation (pipelines), first step submitted and "
        "finished",
        f"{'model':30} {'prec':5} {'kernels':>7} {'plan':>6} {'runtime':>7} {'step 1':>7} {'total':>7}  "
        "shader cache",
    ]
    for f in r.get("first_step", []):
        model = f"{f['model']} {f['shape']}"
        out.append(
            f"{model:30} {f['precision']:5} {f['kernels']:7} {f['plan_s']:6.2f} {f['runtime_s']:7.2f} "
            f"{f['first_step_s']:7.2f} {f['total_s']:7.2f}  {cache_word(f)}"
        )
    return out


def _memory_table(r: dict) -> list[str]:
    precisions = [p for p in (*REDUCED, "fp32") if any(p in m for m in r["memory"].values())]
    reduced = [p for p in precisions if p != "fp32"]
    out = [
        f"memory (bytes, from the plan); target activations "
        f"{'/'.join(p for p in reduced if p in SIXTEEN_BIT)} / fp32 <= {TARGETS['activation_ratio']:g} "
        f"each, fp8 / fp32 <= {TARGETS['fp8_activation_ratio']:g}",
        f"{'model':8} {'category':16} "
        + " ".join(f"{p:>12}" for p in precisions)
        + " "
        + " ".join(f"{p + '/fp32':>10}" for p in reduced),
    ]
    for name, m in r["memory"].items():
        for cat in m["fp32"]:
            b = m["fp32"][cat]
            cells = [f"{m[p][cat]:12d}" if p in m else f"{'-':>12}" for p in precisions]
            ratios = [f"{m[p][cat] / b if b else 0:10.3f}" if p in m else f"{'-':>10}" for p in reduced]
            verdict = ""
            if cat == "activations":
                ratios_of = activation_ratios(m)
                met = all(v <= TARGETS["activation_ratio"] for p, v in ratios_of.items() if p in SIXTEEN_BIT)
                verdict = f" 16-bit {_pass(met)}"
                if "fp8" in ratios_of:
                    verdict += f", fp8 {_pass(ratios_of['fp8'] <= TARGETS['fp8_activation_ratio'])}"
            out.append(f"{name:8} {cat:16} " + " ".join(cells) + " " + " ".join(ratios) + verdict)
        wide = ", ".join(f"{k} {v}" for k, v in m["activations_not_h"].items())
        out.append(
            f"{name:8} activations not 16-bit (the same bytes in every format): {wide}; if every other "
            f"activation halves, the ratio is {m['expected_activation_ratio']:.4f}"
        )
    return out


def _profile_tables(r: dict) -> list[str]:
    out: list[str] = []
    for key, p in (r.get("profile") or {}).items():
        if not p:
            out.append(f"profile {key}: adapter has no timestamp-query")
            continue
        out += [
            "",
            f"profile {key}: {p['gpu_us_per_step']:.1f} us GPU per step (one pass per dispatch)",
            f"{'kernel':16} {'shape':18} {'us/step':>10} {'share':>6}",
        ]
        out += [
            f"{k['kernel']:16} {k['shape']:18} {k['us_per_step']:10.1f} {100 * k['share']:5.1f}%"
            for k in p["kernels"]
        ]
    return out


def _summary_lines(s: dict) -> list[str]:
    out = ["", "headline"]
    out += [f"  {k}: {v:.3f}" for k, v in s.items() if isinstance(v, float)]
    out += ["", "targets"]
    for k, t in s["targets"].items():
        verdict = {True: "met", False: "NOT met", None: "not measured here (needs a GPU at --size gpu)"}[
            t["met"]
        ]
        worst = f", worst: {t['worst']}" if "worst" in t else ""
        out.append(f"  {k}: {t['value']:.3f} (target {t['target']}{worst}): {verdict}")
    return out


def format_table(r: dict) -> str:
    out = [f"webmp bench — {r['adapter']['name']} — {r['date']} — size {r['size']}", ""]
    out += _matmul_table(r) + [""] + _step_table(r) + [""] + _first_step_table(r) + [""]
    out += _memory_table(r)
    out += ["", "readbacks in the training loop (webmp.train.loop.Trainer)"]
    for name, rb in r["readbacks"].items():
        out.append(f"  {readback_line(name, rb)}: {_pass(readback_verdict(rb))}")
    if r.get("sampling"):
        out += ["", "sampling (the gpt's shape, a one-token prompt; tokens per second of the replay)"]
        out += [f"  {sampling_line(row)}" for row in r["sampling"]]
    if r.get("attention_memory"):
        out += ["", "attention: fused vs three-kernel (the gpt's shape; memory from the plan)"]
        out += [f"  {attention_line(row)}" for row in r["attention_memory"]]
    if r.get("levers"):
        lv = r["levers"]
        out += ["", f"memory levers (the gpt's shape, {batches_text(lv)}; memory from the plan)"]
        out += [f"  {name}: {flags}" for name, flags in lv["levers"].items()]
        out += [f"  {lever_line(row, lv['rows'])}" for row in lv["rows"]]
    out += _profile_tables(r) + _summary_lines(r["summary"])
    out.append(f"\n{r['seconds']} s in all")
    return "\n".join(out)
