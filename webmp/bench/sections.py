"""The tables of docs/benchmarks.md (webmp.bench.markdown puts the page together): one per area of a
`webmp bench` JSON (matmul kernels, the training step, first steps, memory, readbacks, the profile)
and of the runs of their own (cold start, data-parallel step, tinygrad side by side), each under a
line naming the machine, the adapter and when it ran; an area missing from its JSON is said."""

from __future__ import annotations

import math
import statistics
from typing import Any

from .levers import batches_text, versus_baseline
from .matmul import CORE_TILES
from .memory import REDUCED
from .report import readback_verdict
from .step import cache_word

PRODUCT_NAMES = {"A.B": "A·B", "At.B": "Aᵀ·B", "A.Bt": "A·Bᵀ"}
PATH_NAMES = {
    "native": "native f16",
    "emulated": "emulated f16",
    "bf16": "bf16",
    "fp32": "fp32",
    "numpy_f32": "numpy f32",
    "torch_fp32": "PyTorch fp32",
    "torch_fp16": "PyTorch fp16",
}

# --- cells, tables, and where a run ran ------------------------------------------------------------


def num(x: Any, spec: str = ".2f") -> str:
    """A number as a table cell: '-' for None, NaN or anything not a number."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def table(header: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    """A markdown table; the columns in `right` (by index) align right."""
    right = right or set()
    rule = ["---:" if i in right else "---" for i in range(len(header))]
    return ["| " + " | ".join(r) + " |" for r in [header, rule, *rows]] + [""]


def machine(host: dict | None) -> str:
    if not host:
        return "machine not recorded"
    detail = [
        f"{host['cpus']} CPUs" if host.get("cpus") else None,
        host.get("cpu_id"),
        f"{host['cpu_mhz']} MHz" if host.get("cpu_mhz") else None,
        host.get("machine"),
    ]
    cpu = host.get("cpu_model") or "CPU model not recorded"
    return f"{cpu} ({', '.join(d for d in detail if d)})"


def adapter(a: dict | str | None) -> str:
    """The adapter's device and driver (a bench JSON's adapter), or its name as recorded."""
    if not a:
        return "adapter not recorded"
    if isinstance(a, str):
        return a
    if not a.get("device"):
        return a.get("name") or "adapter not recorded"
    kind = ", ".join(x for x in (a.get("backend"), a.get("type")) if x)
    return f"{a['device']}, driver {a.get('driver') or 'not recorded'} ({kind})"


def webmp_line(w: dict | None) -> str:
    if not w:
        return "webmp version not recorded"
    commit = f" at {w['commit'][:10]}" if w.get("commit") else ""
    return f"webmp {w.get('version', '?')}{commit}{' (modified)' if w.get('modified') else ''}"


def ran_on(run: dict, adapter_of: dict | str | None) -> str:
    """The line under each table: machine, adapter, date, webmp."""
    when = run.get("date") or "date not recorded"
    return f"*{machine(run.get('host'))}; {adapter(adapter_of)}; {when}; {webmp_line(run.get('webmp'))}.*"


def missing(what: str, how: str) -> list[str]:
    return [f"*Not recorded: {what}. {how}*", ""]


# --- the bench JSON's sections ---------------------------------------------------------------------


def tiles_word(r: dict) -> str:
    tune = r.get("tune") or {}
    report = tune.get("report")
    if report is not None:
        classes = sum(1 for k in report if k not in ("rows", "weights"))
        forms = ", ".join(f"{k} {report[k]['form']}" for k in ("rows", "weights") if k in report)
        return f"tuned in this run ({classes} shape classes; forms: {forms or 'not tuned'})"
    if tune.get("tuned_classes"):
        return f"the tune cache's ({tune['tuned_classes']} shape classes, tuned before the run)"
    return "no tune cache entry: the adapter class's shipped table (webmp.engine.adapters), else the defaults"


def matmul_section(r: dict) -> list[str]:
    """The bench's shapes on every path beside numpy and PyTorch, each core, the GPT's shapes."""
    out = ["## Matmul kernels", "", ran_on(r, r.get("adapter")), ""]
    rows = r.get("matmul")
    if not rows:
        return out + missing("the matmul section (`matmul`)", "`webmp bench` writes it.") + gpt_matmuls(r)
    cols = list(dict.fromkeys(k for m in rows for k in m.get("gflops", {})))
    body = [
        [m["kind"], PRODUCT_NAMES.get(m["product"], m["product"]), f"{m['M']} x {m['N']} x {m['K']}"]
        + [num(m["gflops"].get(c)) for c in cols]
        for m in rows
    ]
    out += [f"GFLOP/s at the bench's shapes (size `{r.get('size')}`), tiles: {tiles_word(r)}.", ""]
    out += table(
        ["kind", "product", "M x N x K"] + [PATH_NAMES.get(c, c) for c in cols],
        body,
        set(range(3, 3 + len(cols))),
    )
    worst = max((e for m in rows for e in m.get("error_ratio", {}).values()), default=None)
    out += [
        f"Every shape passed its check against numpy first (worst error {num(worst, '.3f')} of its "
        "tolerance).",
        "",
    ]
    cored = [m for m in rows if m.get("cores")]
    if cored:
        cores = list(CORE_TILES)
        body = [
            [f"{PRODUCT_NAMES.get(m['product'], m['product'])} {m['M']} x {m['N']} x {m['K']}", path]
            + [num(c.get(k), ".1f") for k in cores]
            for m in cored
            for path, c in m["cores"].items()
        ]
        out += ["Each core at a fixed tile choice (`webmp.bench.matmul.CORE_TILES`), GFLOP/s:", ""]
        out += table(["shape", "path", *cores], body, set(range(2, 2 + len(cores))))
    return out + gpt_matmuls(r)


def _product(row: dict) -> str:
    return ("Aᵀ" if row["trans_a"] else "A") + "·" + ("Bᵀ" if row["trans_b"] else "B")


def tiles_text(t: dict | None) -> str:
    if not t:
        return "-"
    return f"{t.get('core', 'tiled')} {t.get('TM', '?')} x {t.get('TN', '?')}"


def gpt_matmuls(r: dict) -> list[str]:
    mm = (r.get("model_matmuls") or {}).get("gpt")
    out = ["### The GPT's matmul shapes", ""]
    if not mm:
        return out + missing(
            "the GPT's matmul shapes (`model_matmuls`)", "`webmp bench` without `--models` writes them."
        )
    paths = list(mm["median_gflops"])
    rows = sorted(mm["shapes"], key=lambda s: -s["gflops"].get(paths[0], 0))
    body = [
        [
            f"{s['M']} x {s['N']} x {s['K']}"
            + (f", {s['batch']} batch-heads" if s.get("batch", 1) > 1 else ""),
            _product(s),
        ]
        + [num(s["gflops"].get(p), ".1f") for p in paths]
        + [tiles_text(s.get("tiles", {}).get(paths[0]))]
        for s in rows
    ]
    body.append(["**median**", ""] + [f"**{num(mm['median_gflops'][p])}**" for p in paths] + [""])
    out += [
        "Every distinct matmul product of the GPT's `mixed` plan with the plan's own tiles, GFLOP/s "
        "(the fastest of 5 rounds over all of them; attention's batched products timed batched):",
        "",
    ]
    return out + table(
        ["M x N x K", "product", *(PATH_NAMES.get(p, p) for p in paths), f"tiles ({paths[0]})"],
        body,
        set(range(2, 2 + len(paths))),
    )


def step_section(r: dict) -> list[str]:
    out = ["## Training step", "", ran_on(r, r.get("adapter")), ""]
    rows = r.get("train_step")
    if not rows:
        return out + missing("the training step (`train_step`)", "`webmp bench` writes it.")
    body = []
    for s in rows:
        rate = (
            f"{num(s.get('tokens_per_s'), '.0f')} tok"
            if s.get("tokens_per_s")
            else f"{num(s.get('examples_per_s'), '.0f')} ex"
        )
        body.append(
            [
                s["model"],
                s.get("shape", "-"),
                str(s.get("batch", "-")),
                s["precision"],
                s.get("f16_path", "-"),
            ]
            + [num(s.get("dispatches_per_step"), "d"), num(s.get("submits_per_step"), "g")]
            + [num(s.get("wall_ms_per_step")), rate, num(s.get("host_cpu_ms_per_step"), ".3f")]
            + [num(s.get("floor_host_cpu_ms_per_step"), ".3f"), num(s.get("host_over_floor"))]
        )
    header = ["model", "shape", "batch", "precision", "path", "dispatches", "submits", "wall ms/step"]
    header += ["per second", "host CPU ms/step", "floor ms/step", "host / floor"]
    out += table(header, body, set(range(5, 12)))
    summary = r.get("summary") or {}
    for p in REDUCED:
        ratios = [
            f"{k.removeprefix(f'{p}_over_fp32_step_')} {v:.2f}"
            for k, v in summary.items()
            if k.startswith(f"{p}_over_fp32_step_")
        ]
        if ratios or p == "mixed":
            out.append(f"`{p}` / `fp32` wall per step: {', '.join(ratios) or 'not in the summary'}.")
            out.append("")
    out += [f"Tiles: {tiles_word(r)}.", ""]
    data = r.get("data") or {}
    return out + [f"- {name}: {what}" for name, what in data.items()] + ([""] if data else [])


def first_step_section(r: dict) -> list[str]:
    out = ["## Time to the first step, in the bench process", "", ran_on(r, r.get("adapter")), ""]
    rows = r.get("first_step")
    if not rows:
        return out + missing("the first steps (`first_step`)", "`webmp bench` writes them.")
    body = [
        [f["model"], f["precision"], num(f.get("kernels"), "d")]
        + [num(f.get(k)) for k in ("plan_s", "runtime_s", "first_step_s", "total_s")]
        + [cache_word(f) if "mesa_cache_warm" in f else "-"]
        for f in rows
    ]
    header = ["model", "precision", "kernels", "plan s", "runtime s", "step 1 s", "total s", "shader cache"]
    out += table(header, body, set(range(2, 7)))
    return out + [
        "Measured after the models before it, in one process; a new process each: Cold start below.",
        "",
    ]


def memory_section(r: dict) -> list[str]:
    out = ["## Memory by category", "", ran_on(r, r.get("adapter")), ""]
    mem = r.get("memory")
    if not mem:
        return out + missing("memory (`memory`)", "`webmp bench` writes it.")
    formats = [p for p in (*REDUCED, "fp32") if any(p in m for m in mem.values())]
    reduced = [p for p in formats if p != "fp32"]
    cats = list(dict.fromkeys(c for m in mem.values() for c in m["fp32"]))
    header = ["model", "bytes (the plans' accounting)", *(f"`{p}`" for p in formats)]
    header += [f"`{p}` / `fp32`" for p in reduced]
    body = []
    for n, m in mem.items():
        for cat in cats:
            b = m["fp32"].get(cat)
            cells = [n, cat] + [num(m[p].get(cat), "d") if p in m else "-" for p in formats]
            for p in reduced:
                a = m[p].get(cat) if p in m else None
                ratio = num(a / b, ".3f") if a is not None and b else "-"
                cells.append(f"**{ratio}**" if cat == "activations" else ratio)
            body.append(cells)
    out += table(header, body, set(range(3, len(header))))
    for n in mem:
        wide = ", ".join(f"`{k}` {v}" for k, v in mem[n].get("activations_not_h", {}).items())
        out.append(
            f"- {n}: activations 32-bit in every format: {wide or 'none'}; every other one 16-bit gives "
            f"{num(mem[n].get('expected_activation_ratio'), '.4f')}."
        )
    return out + [""]


def levers_section(r: dict) -> list[str]:
    """The GPT's memory levers (`--memory`): a row per context and lever, its bytes by category."""
    out = ["## Memory levers (`webmp bench --memory`)", "", ran_on(r, r.get("adapter")), ""]
    lv = r.get("levers")
    if not lv:
        return out + missing("the memory levers (`levers`)", "`webmp bench --memory` writes them.")
    mib = 2**20
    timed = ", ".join(f"{T}: {n}" for T, n in lv["steps_timed"].items()) or "none"
    cats = list(dict.fromkeys(c for row in lv["rows"] if row["memory"] for c in row["memory"]))
    body = []
    for row in lv["rows"]:
        mem, ms = versus_baseline(row, lv["rows"])
        cells = [str(row["context"]), str(row.get("batch", lv["batch"])), f"`{row['lever']}`"]
        cells += [num(row["memory"][c] / mib, ".2f") if row["memory"] else "-" for c in cats]
        total = sum(row["memory"].values()) / mib if row["memory"] else None
        cells += [num(total, ".2f"), num(mem, ".3f")]
        if row["refused"]:
            cells += ["refused", "-"]
        else:
            untimed = f"one rank of {row['ranks']}" if row.get("ranks", 1) > 1 else "not timed"
            cells += [num(row["ms_per_step"], ".1f") if row["ms_per_step"] else untimed, num(ms)]
        body.append(cells)
    header = ["context", "batch", "lever", *(f"{c} MiB" for c in cats), "total MiB", "total / baseline"]
    header += ["ms / optimizer step", "step / baseline"]
    out += [
        f"The GPT ({', '.join(f'{k} {v}' for k, v in lv['config'].items())}) on the `{lv['path']}` path, "
        f"every entry of a context at one effective batch ({batches_text(lv)}); GPU bytes from the "
        f"plan's accounting (a dry "
        f"run); the step time the median of N optimizer steps after a first (each round one step of "
        f"each lever in turn), N at each timed context: {timed}. The levers:",
        "",
    ]
    out += [f"- `{name}`: `{flags}`" for name, flags in lv["levers"].items()] + [""]
    out += table(header, body, set(range(3, len(header))))
    refusals = [
        f"- {row['context']} `{row['lever']}`: {row['refused']}" for row in lv["rows"] if row["refused"]
    ]
    if refusals:
        out += [
            f"Refused (the adapter binds at most {lv['adapter_limit']} bytes a buffer):",
            "",
            *refusals,
            "",
        ]
    return out


def readback_section(r: dict) -> list[str]:
    out = ["## Readbacks in the training loop", "", ran_on(r, r.get("adapter")), ""]
    rbs = r.get("readbacks")
    if not rbs:
        return out + missing("readbacks (`readbacks`)", "`webmp bench` writes them.")
    body = [
        [
            name,
            str(rb["steps"]),
            str(rb["log_every"]),
            str(rb["readbacks_in_loop"]),
            str(rb["expected_readbacks"]),
        ]
        + [str(rb["runtime_readbacks_in_loop"]), str(rb["readbacks_between_logs"])]
        + [str(len(rb.get("reads_after_training", []))), "pass" if readback_verdict(rb) else "FAIL"]
        for name, rb in rbs.items()
    ]
    header = ["model", "steps", "log_every", "reads in the loop", "the schedule's", "Runtime.readbacks"]
    header += ["between log intervals", "buffers read after training", "verdict"]
    out += table(header, body, set(range(1, 8)))
    return out + [
        "After training the loop reads the state, the evaluation and the checkpoint's buffers once.",
        "",
    ]


def sampling_section(r: dict) -> list[str]:
    out = ["## Sampling", "", ran_on(r, r.get("adapter")), ""]
    rows = r.get("sampling")
    if not rows:
        return out + missing("sampling (`sampling`)", "`webmp bench` writes it.")
    body = [
        [
            row["setting"], str(row["tokens"]), str(row["context"]),
            num(row["cached"]["tokens_per_s"], ".1f"), num(row["window"]["tokens_per_s"], ".1f"),
            num(row["speedup"]), "yes" if row["same_tokens"] else "NO",
            f"{num(row['cached']['setup_s'])} / {num(row['window']['setup_s'])}",
        ]
        for row in rows
    ]  # fmt: skip
    header = ["generation", "tokens", "context", "tok/s, caches", "tok/s, window only", "speedup"]
    header += ["same tokens", "setup s (caches / window)"]
    out += table(header, body, set(range(1, 6)))
    return out + [
        "Text generation with the GPT's shape from initial weights, after a one-token prompt, at the",
        "default temperature and seed: tokens per second of the replay (best of 3; setup, the plan, its",
        "pipelines and uploads, apart). With the caches (webmp/models/net_sample.py) a token drawn while",
        "the text fits in the context runs one position (`sample_row`); past the context every token",
        "runs the whole window (the positions shift), as every token does window-only.",
        "",
    ]


def first_run_section(r: dict) -> list[str]:
    out = ["## First run against the tuned step", "", ran_on(r, r.get("adapter")), ""]
    f = r.get("first_run")
    if not f:
        return out + missing(
            "the first-run comparison (`first_run`)", "`webmp bench` writes it (with a GPT)."
        )
    body = [
        ["first run (an empty tune cache)", num(f["first_run_ms"]), f["first_run_tiles"]],
        [f"tuned ({tiles_word(r)})", num(f["tuned_ms"]), f["tuned_tiles"]],
    ]
    out += table(["tiles", "ms a step", "tiles used"], body, {1})
    return out + [
        f"First run / tuned: **{num(f['ratio'])}x** (target ≤ {f['target_ratio']:g}x). The default "
        f"{f['model']} (`{f['path']}`, batch {f['batch_size']}, context {f['context']}) with the tiles "
        "`webmp train` builds with when the tune cache is empty (the adapter class's shipped table) and "
        "with the tune cache's, in one process: the fastest of "
        f"{f['blocks']} alternating blocks of {f['steps_per_block']} steps each (webmp/bench/first_run.py).",
        "",
    ]


def profile_section(r: dict) -> list[str]:
    out = ["## GPU time per kernel (`--profile`)", "", ran_on(r, r.get("adapter")), ""]
    prof = r.get("profile")
    if not prof:
        return out + missing("a profile (`profile`)", "`webmp bench --profile` writes it.")
    body = []
    for key, p in prof.items():
        if not p:
            body.append([key, "-", "the adapter has no timestamp-query"])
            continue
        total = p["gpu_us_per_step"] or 1
        top = list(p["families"].items())[:6]
        body.append(
            [key, num(p["gpu_us_per_step"] / 1e3), ", ".join(f"{k} {100 * v / total:.1f} %" for k, v in top)]
        )
    return out + table(["program", "GPU ms/step", "largest kernel families (share)"], body, {1})


# --- the other runs --------------------------------------------------------------------------------


def compiled_on(row: dict) -> str:
    """The devices that compiled the step's kernels before it (webmp.engine.precompile: where the
    driver compiles at first dispatch; their seconds are in 'pipelines s'), '-' where none did."""
    pre = row.get("precompile") or {}
    helpers = pre.get("helpers", 0)
    if not helpers:
        return "-"
    by = pre.get("by_helpers", pre.get("byHelpers", 0))
    return f"{helpers + 1} devices ({by} of {pre.get('kernels')} by helpers)"


def cold_section(c: dict | None) -> list[str]:
    out = ["## Cold start: plan to first finished step (`webmp bench --cold-start`)", ""]
    if not c or not c.get("rows"):
        return out + missing(
            "a cold-start run",
            "`webmp bench --cold-start --out cold.json`, then `--cold-start cold.json` here.",
        )
    out += [ran_on(c, c["rows"][0].get("adapter")), ""]
    body = [
        [row["where"], row["cache"], num(row.get("kernels"), "d"), num(row.get("tuning_s"))]
        + [
            num(row.get(a, row.get(b)))
            for a, b in (("plan_s", "plan_and_blob_s"), ("runtime_s", "compile_s"))
        ]
        + [compiled_on(row)]
        + [num(row.get("first_step_s")), num(row.get("plan_to_first_step_s")), row.get("adapter", "-")]
        for row in c["rows"]
    ]
    header = [
        "where",
        "Mesa cache",
        "kernels",
        "tuning s",
        "plan s",
        "pipelines s",
        "compiled on",
        "step 1 s",
        "plan to first step s",
        "adapter",
    ]
    fields = ", ".join(f"{k}={v!r}" for k, v in (c.get("config") or {}).items())
    what = f"`TrainConfig({fields})`" if fields else "The default MLP"
    tiles = (
        "natively as `webmp train` starts with an empty tune cache: first-use tuning (its seconds in "
        "'tuning s'), the adapter class's shipped tiles for what it did not tune; in the page those "
        "of the class its browser reports (webmp.engine.adapters)"
        if any("tuning_s" in row for row in c["rows"])
        else "default tiles"
    )
    out += [f"{what} (`mixed`, {tiles}), each row a new process with a shader cache folder of its own:"]
    out += [""]
    browsers = sorted({row["browser"] for row in c["rows"] if row.get("browser")})
    note = [
        "",
        f"The page's browser: {', '.join(f'`{b}`' for b in browsers)}. The lavapipe Chromium of "
        "shared/tools/webgpu-cpu reports its adapter as SwiftShader but runs on lavapipe; Debian's "
        "Chromium runs on SwiftShader.",
    ]
    if any(row.get("quick_tier") for row in c["rows"]):
        note[-1] += (
            " The page's first steps ran the plan's quick tier (webmp/engine/tiers.py: the same steps "
            "with the matmuls' 4 x 4 register blocks, which compile in about half the time) while its "
            "helper compiled the plan's own kernels."
        )
    return out + table(header, body, {2, 3, 4, 5, 7, 8}) + (note if browsers else [])


def ranks_section(d: dict | None) -> list[str]:
    out = ["## Data-parallel step (`mpirun -n N webmp bench --ranks N`)", ""]
    if not d or not d.get("models"):
        return out + missing(
            "a data-parallel run",
            "`mpirun -n 2 webmp bench --ranks 2 --out ranks.json`, then `--ranks ranks.json` here.",
        )
    first = next(iter(d["models"].values()))
    out += [ran_on(d, first.get("adapter")), ""]
    parts = ("grads_ms", "readback_ms", "allreduce_ms", "upload_ms", "update_ms", "step_ms")
    body = [
        [name, str(m.get("ranks", d.get("ranks"))), num(m.get("fused_bytes"), "d")]
        + [num(m.get(k)) for k in parts]
        + [f"{num(100 * m['comm_share'], '.1f')} %" if "comm_share" in m else "-"]
        for name, m in d["models"].items()
    ]
    header = [
        "model",
        "ranks",
        "fused bytes",
        "grads",
        "readback",
        "all-reduce",
        "upload",
        "update",
        "step",
        "comm share",
    ]
    out += [f"Size `{d.get('size')}`, per step after the first, rank 0, ms:", ""]
    return out + table(header, body, set(range(1, 10)))


def side_by_side(rows: list[dict] | None) -> tuple[list[str], float | None]:
    """The tinygrad section, and the worst webmp / tinygrad ratio (None without a run)."""
    out = ["## Side by side with tinygrad (`bench/tinygrad_side_by_side.sh`)", ""]
    ours = [r for r in rows or [] if r.get("tool") == "webmp"]
    theirs = [r for r in rows or [] if r.get("tool") == "tinygrad"]
    if not ours or not theirs:
        how = (
            "`bench/tinygrad_side_by_side.sh setup` once, then `OUT=sbs.jsonl "
            "bench/tinygrad_side_by_side.sh 16`, then `--side-by-side sbs.jsonl` here."
        )
        return out + missing("a side-by-side run", how), None
    t = theirs[0]
    ta = t.get("adapter") or {}
    out += [ran_on(ours[0], ours[0].get("adapter")), ""]
    body, worst = [], None
    for b in sorted({r["step"]["batch"] for r in ours}):
        w = [r for r in ours if r["step"]["batch"] == b]
        tg = [r for r in theirs if r["dims"]["batch_size"] == b]
        if not tg:
            continue
        ws = statistics.median(r["step"]["wall_ms_per_step"] for r in w) / 1e3
        ts = statistics.median(r["step_s_median"] for r in tg)
        worst = max(worst or 0.0, ws / ts)
        body.append(
            [str(b), num(ws, ".3f"), f"{num(ts, '.3f')} ({num(tg[0].get('step_s_block_mean'), '.3f')})"]
            + [
                f"**{ws / ts:.3f}**",
                f"{num(w[0]['first_step']['total_s'], '.1f')} ({cache_word(w[0]['first_step'])})",
            ]
            + [num(tg[0].get("time_to_first_step_s"), ".1f")]
        )
    dims = {k: "?" for k in ("n_layer", "n_head", "d_model", "context", "vocab")} | t.get("dims", {})
    out += [
        f"webmp `mixed` against tinygrad {t.get('tinygrad_version', '?')} (float32, its WEBGPU device on "
        f"{ta.get('device', '?')}, {ta.get('description', '')}), the GPT at L{dims['n_layer']} "
        f"H{dims['n_head']} D{dims['d_model']} T{dims['context']} V{dims['vocab']}; "
        f"tinygrad's time the median of {t.get('steps', '?')} steps each waited for (a block's mean beside):",
        "",
    ]
    header = [
        "batch",
        "webmp s/step",
        "tinygrad s/step (block mean)",
        "webmp / tinygrad",
        "webmp first step s",
        "tinygrad first step s",
    ]
    return out + table(header, body, set(range(0, 6))), worst
