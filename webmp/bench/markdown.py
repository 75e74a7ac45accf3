"""docs/benchmarks.md from `webmp bench`'s JSON: the current figures, one table per area, each under
a line naming the machine (CPU model, CPU count), the adapter (name, driver) and when it ran; then
the targets, how the figures are taken, how to make the page again, and where its history is.

    python -m webmp.bench.markdown bench.json [--cold-start cold.json] [--ranks ranks.json]
        [--side-by-side tinygrad-side-by-side.jsonl] > docs/benchmarks.md

bench.json is `webmp bench --out`'s, cold.json `webmp bench --cold-start --out`'s, ranks.json
`mpirun -n N webmp bench --ranks N --out`'s, the JSON lines bench/tinygrad_side_by_side.sh's.
`make benchmarks` (bench/benchmarks.sh) makes all of them and this page. A section missing from a
JSON, or a run not given, is said where its table would be.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from .cold import PAGE_TARGET_S
from .memory import SIXTEEN_BIT
from .report import LAVAPIPE_TARGETS, TARGETS
from .sections import (
    PATH_NAMES,
    PRODUCT_NAMES,
    adapter,
    cold_section,
    first_run_section,
    first_step_section,
    levers_section,
    machine,
    matmul_section,
    memory_section,
    missing,
    num,
    profile_section,
    ran_on,
    ranks_section,
    readback_section,
    sampling_section,
    side_by_side,
    step_section,
    table,
    tiles_text,
    tiles_word,
    webmp_line,
)

NOTEBOOK_COMMIT = "68a93d65141a598739a262aab22c955e33d50fe5"  # the last notebook version of the page

# --- targets -------------------------------------------------------------------------------------------

TARGET_NAMES = {
    "host_over_floor": "host CPU per step ≤ {}x the bare replay's (the worst model)",
    "submits_per_step": "one submit per step (the worst model)",
    "activation_ratio": " and ".join(f"`{p}`" for p in SIXTEEN_BIT)
    + " activation memory ≤ {}x `fp32`'s (the worst model and format)",
    "fp8_activation_ratio": "`fp8` activation memory ≤ {}x `fp32`'s (the worst model)",
    "readbacks_per_log_interval": "readbacks in the loop: exactly steps / log_every",
    "readbacks_between_logs": "readbacks between log intervals: {}",
    "f16_over_f32_matmul": "f16 matmul ≥ {}x our fp32 at the largest square (a GPU at `--size gpu`)",
    "f16_over_torch_fp32": "f16 matmul ≥ {}x PyTorch fp32, TF32 off (a GPU at `--size gpu`)",
    "mixed_over_fp32_step_wide": "`mixed` step ≤ {}x `fp32`'s on the wide MLP (a GPU at `--size gpu`)",
}
TARGET_LIMITS = {
    "host_over_floor": TARGETS["host_over_floor"],
    "activation_ratio": TARGETS["activation_ratio"],
    "fp8_activation_ratio": TARGETS["fp8_activation_ratio"],
    "readbacks_between_logs": TARGETS["readbacks_between_logs"],
    "f16_over_f32_matmul": TARGETS["gpu_f16_over_f32"],
    "f16_over_torch_fp32": TARGETS["gpu_f16_over_torch_fp32"],
    "mixed_over_fp32_step_wide": TARGETS["gpu_mixed_over_fp32_step"],
}


def status(met: bool | None, unjudged: str) -> str:
    return {True: "**met**", False: "**NOT met**", None: unjudged}[met]


def _judge(value: float | None, limit: float, op: str, judged: bool) -> bool | None:
    if value is None or not judged:
        return None
    return value >= limit if op == ">=" else value <= limit


def _cold_rows(colds: list[dict], model: str, where: str) -> list[dict]:
    return [
        row
        for c in colds
        if (c.get("config") or {}).get("model", "mlp") == model
        for row in c.get("rows", [])
        if row["where"] == where and row["cache"] == "cold"
    ]


def _lavapipe_judged(r: dict) -> bool:
    name = ((r.get("adapter") or {}).get("name") or "").lower()
    return "llvmpipe" in name and r.get("size") == "default"


def _untuned(r: dict) -> bool:
    """Whether a bench run's matmuls ran the shipped tiles: no --tune, nothing in the tune cache."""
    tune = r.get("tune") or {}
    return tune.get("report") is None and not tune.get("tuned_classes")


def train_medians(r: dict) -> dict[str, float]:
    """The median GFLOP/s over a run's training shapes, per path."""
    train = [m for m in r.get("matmul") or [] if m.get("kind") == "train"]
    paths = dict.fromkeys(p for m in train for p in m.get("gflops", {}))
    return {p: statistics.median(m["gflops"][p] for m in train if p in m["gflops"]) for p in paths}


def untuned_section(u: dict | None) -> list[str]:
    """The bench's training shapes from a run with an empty tune cache (`--untuned`)."""
    out = ["### The training shapes without tuning", ""]
    if u is None:
        return out + missing(
            "a run with an empty tune cache",
            "`WEBMP_TUNE_CACHE=empty.json webmp bench --models digits --out untuned.json`, then "
            "`--untuned untuned.json` here (bench/benchmarks.sh does).",
        )
    out += [ran_on(u, u.get("adapter")), ""]
    if not _untuned(u):
        out += ["*That run was tuned (its tune cache held entries): not an untuned run.*", ""]
    train = [m for m in u.get("matmul") or [] if m.get("kind") == "train"]
    cols = [c for c in dict.fromkeys(k for m in train for k in m.get("gflops", {})) if c in PATH_NAMES]
    body = [
        [PRODUCT_NAMES.get(m["product"], m["product"]), f"{m['M']} x {m['N']} x {m['K']}"]
        + [num(m["gflops"].get(c)) for c in cols]
        + [tiles_text((m.get("tiles") or {}).get("native") or {})]
        for m in train
    ]
    medians = train_medians(u)
    body.append(["**median**", ""] + [f"**{num(medians.get(c))}**" for c in cols] + [""])
    out += [
        f"`webmp bench` with an empty tune cache (size `{u.get('size')}`): every product with the "
        f"tiles a first run uses ({tiles_word(u)}).",
        "",
    ]
    return out + table(
        ["product", "M x N x K"] + [PATH_NAMES[c] for c in cols] + ["tiles (native)"],
        body,
        set(range(2, 2 + len(cols))),
    )


def matmul_targets(r: dict, u: dict | None = None) -> list[list[str]]:
    """lavapipe's matmul targets: the GPT's shapes' medians, and issue 28's bars (tuned: the GPT's
    shapes; untuned, from a run with an empty tune cache, `u` where given, else `r` itself: the
    bench's training shapes)."""
    judged = _lavapipe_judged(r)
    unjudged = "not judged (set for lavapipe at the default size)"
    medians = ((r.get("model_matmuls") or {}).get("gpt") or {}).get("median_gflops", {})
    tuned_here = (r.get("tune") or {}).get("report") is not None
    plain = u if u is not None else r
    untuned, untuned_medians = _lavapipe_judged(plain) and _untuned(plain), train_medians(plain)
    rows = []
    for path, key in (("native", "gpt_matmul_median_native"), ("fp32", "gpt_matmul_median_fp32")):
        limit, value = LAVAPIPE_TARGETS[key], medians.get(path)
        rows.append(
            [
                f"median GFLOP/s over the GPT's matmul shapes, {PATH_NAMES[path]} ≥ {limit:g}",
                num(value),
                status(_judge(value, limit, ">=", judged), unjudged),
            ]
        )
    # issue 28's bars: tuned, the GPT's shapes; untuned (shipped tiles), the bench's training shapes
    limit, value = LAVAPIPE_TARGETS["gpt_matmul_median_tuned_native"], medians.get("native")
    rows.append(
        [
            f"median GFLOP/s over the GPT's matmul shapes tuned in the run, {PATH_NAMES['native']} "
            f"≥ {limit:g}",
            num(value),
            status(_judge(value, limit, ">=", judged and tuned_here), "not judged (needs `--tune`)"),
        ]
    )
    for path, key in (
        ("native", "train_matmul_median_untuned_native"),
        ("fp32", "train_matmul_median_untuned_fp32"),
    ):
        limit, value = LAVAPIPE_TARGETS[key], untuned_medians.get(path)
        rows.append(
            [
                f"median GFLOP/s over the bench's training shapes without tuning, {PATH_NAMES[path]} "
                f"≥ {limit:g}",
                num(value),
                status(
                    _judge(value, limit, ">=", untuned),
                    "not judged (needs a run with an empty tune cache, no `--tune`: `--untuned`)",
                ),
            ]
        )
    return rows


def lavapipe_targets(
    r: dict, colds: list[dict], tinygrad: float | None, u: dict | None = None
) -> list[list[str]]:
    """The targets set for Mesa's lavapipe at the default size, and the page's cold start."""
    tuned_here = (r.get("tune") or {}).get("report") is not None
    gpt_cold = [row["plan_to_first_step_s"] for row in _cold_rows(colds, "gpt", "native")]
    page, gpt_page = (
        [
            row["plan_to_first_step_s"]
            for row in _cold_rows(colds, model, "page")
            if "swiftshader" not in row.get("browser", "")
        ]
        for model in ("mlp", "gpt")
    )
    rows = matmul_targets(r, u)
    first = r.get("first_run") or {}
    value = first.get("ratio")
    rows.append(
        [
            f"the GPT's step with an empty tune cache ≤ {LAVAPIPE_TARGETS['first_run_step_ratio']:g}x the "
            "tuned one (First run)",
            num(value),
            status(
                _judge(
                    value, LAVAPIPE_TARGETS["first_run_step_ratio"], "<=", _lavapipe_judged(r) and tuned_here
                ),
                "not judged (needs `--tune`: a tuned table to compare with)",
            ),
        ]
    )
    limit = LAVAPIPE_TARGETS["gpt_cold_first_step_s"]
    value = max(gpt_cold) if gpt_cold else None
    rows.append(
        [
            f"the GPT's first step ≤ {limit:g} s from a cold start, natively (Cold start)",
            num(value),
            status(_judge(value, limit, "<=", True), "not measured: `webmp bench --cold-start gpt`"),
        ]
    )
    pages = (
        ("the page's first step (default MLP)", page, "`webmp bench --cold-start`"),
        ("the page's first GPT step (issue 28)", gpt_page, "`webmp bench --cold-start gpt`"),
    )
    for what, values, how in pages:
        value = max(values) if values else None
        rows.append(
            [
                f"{what} ≤ {PAGE_TARGET_S:g} s from a cold start, lavapipe Chromium",
                num(value),
                status(_judge(value, PAGE_TARGET_S, "<=", True), f"not measured: {how}, lavapipe Chromium"),
            ]
        )
    limit = LAVAPIPE_TARGETS["tinygrad_step_ratio"]
    rows.append(
        [
            f"the GPT's `mixed` step ≤ {limit:g}x tinygrad's, same adapter (the worst batch)",
            num(tinygrad, ".3f"),
            status(_judge(tinygrad, limit, "<=", True), "not measured: Side by side with tinygrad"),
        ]
    )
    return rows


def targets_section(r: dict, colds: list[dict], tinygrad: float | None, u: dict | None = None) -> list[str]:
    out = ["## Targets", "", ran_on(r, r.get("adapter")), ""]
    body = []
    for key, t in ((r.get("summary") or {}).get("targets") or {}).items():
        name = TARGET_NAMES.get(key, key).format(f"{TARGET_LIMITS[key]:g}" if key in TARGET_LIMITS else "")
        worst = f" ({t['worst']})" if t.get("worst") else ""
        body.append(
            [
                name,
                num(t.get("value"), ".3f") + worst,
                status(t.get("met"), "not judged (a GPU at `--size gpu`)"),
            ]
        )
    body += lavapipe_targets(r, colds, tinygrad, u)
    return out + table(["target", "this run", "status"], body)


# --- the page ------------------------------------------------------------------------------------------

METHOD = """\
## How the figures are taken

- **Side by side, as ratios.** Every figure of a table comes from one run on one adapter, and the
  JSON names the host and the adapter. The development machines are shared 2-vCPU VMs whose speed
  drifts by up to 2x over minutes with what else their host runs, and whose hosts differ by up to
  5x (the same kernels on a 2.0 GHz Xeon and a 2.6 GHz EPYC): compare ratios within a run (mixed /
  fp32, host / floor, webmp / tinygrad), not absolute numbers across hosts or runs.
- **Matmuls.** Each shape is first checked against a float64 numpy reference on random data in
  [-1, 1]; then many dispatches are recorded in one compute pass, submitted once and waited for
  once; a figure is the fastest of such batches taken in rounds over all the shapes, interleaved,
  so that a slow minute hits every shape alike: 5 rounds over the bench's shapes, paths and cores
  (before 2026-12-07, three batches of each shape back to back), 5 over the GPT's shapes.
  numpy is the better of BLAS's own threading and one thread.
- **Steps.** Wall time per step: blocks of our real step loop (`Runtime.run`, the metrics ring read
  every `log_every`), each then waited for. Host CPU per step: the Python thread's CPU time
  (`time.thread_time`; on a CPU adapter the driver's threads do the "GPU" work in this process), our
  step and a *floor* step (the same dispatch list replayed with bare wgpu-py calls: one encoder, one
  pass, one submit) alternating; medians over the pairs whose step of ours did not map the metrics
  ring (the mean with the reads is in the JSON).
- **First steps.** lavapipe compiles a pipeline's shaders at its first dispatch and keeps them in
  Mesa's on-disk cache, so a cold cache shows in "step 1". In the bench process the cache is warm
  where this process wrote at most 32 bytes per kernel meanwhile (`/proc/self/io`); `--cold-start`
  gives each measurement a new process and a cache folder of its own, empty for "cold".
- **Memory** is the plan's own accounting (`plan["memory"]`), not a measurement; **readbacks** are
  counted by wrapping `Runtime.run` and `Runtime.read` in the real training loop
  (`webmp.train.loop.Trainer`).
- **Tiles.** Untuned, every matmul uses the shipped table of its adapter's class
  (`webmp.engine.adapters`: lavapipe and SwiftShader measured, a documented heuristic for GPUs),
  else the default tiles; `webmp bench --tune` times candidate
  cores and tile shapes per shape class (path, transposes, M, N, K rounded up to powers of 4), each
  checked first, and caches the fastest per adapter (`$WEBMP_TUNE_CACHE`, else
  `~/.cache/webmp/tune.json`), with the row kernels' and the GPT's weights' forms; a cache entry
  wins over the shipped table. Every choice computes the same bits, so tuning never moves a curve.
- **Targets**: the bench's own (`webmp.bench.report.TARGETS`: host overhead, submits, activation
  memory, readbacks; the GPU ones judged only on a GPU at `--size gpu`) and those set for lavapipe
  (`LAVAPIPE_TARGETS`, and the page's cold start in `webmp.bench.cold`).
"""

VULKAN_DRIVER = """\
## Vulkan driver

Debian 12's own Mesa is 22.3; its `bookworm-backports` archive has Mesa 25, which `scripts/setup.sh`
installs on Debian 12 (`WEBMP_NO_BACKPORTS=1` keeps the release's). Step time with an empty tune
cache, each figure the better of two measurements in a process of its own, the drivers alternating
(`bench/vulkan_drivers.py`, 2026-12-03, the project's 2-vCPU VM; the second round shared the
machine with other work):

| Vulkan driver | digits MLP, ms a step | default GPT, ms a step |
|---|---|---|
| Debian 12 Mesa 22.3.6 lavapipe | 24.3 | 1614.7 |
| bookworm-backports Mesa 25.0.7 lavapipe | 7.9 | 357.8 |
| Mesa 25.0.7 lavapipe of the test harness (`shared/tools/webgpu-cpu`) | 6.5 | 350.3 |

Mesa 25's lavapipe is 3x faster on the MLP and 4.5x on the GPT; the backports' package and the
harness's build of the same version are alike within this machine's noise. A run on a lavapipe
older than Mesa 25 says so in its log.
"""

REGENERATE = """\
## Making this page

```sh
make benchmarks     # bench/benchmarks.sh: all of the below, then this page (8-9 min on 2 cores)
webmp bench --tune --tune-budget 300 --profile --out bench.json   # matmuls to profile, and targets
                    # (with --memory, MEMORY=1 for make: the GPT's memory levers, ~10 min more)
WEBMP_TUNE_CACHE=empty.json webmp bench --models digits --out untuned.json  # the shipped tiles
webmp bench --cold-start --out cold-mlp.json; webmp bench --cold-start gpt --out cold-gpt.json
mpirun -n 2 webmp bench --ranks 2 --out ranks.json                # the data-parallel step
OUT=sbs.jsonl bench/tinygrad_side_by_side.sh 16                   # after its `setup`, once
python -m webmp.bench.markdown bench.json --cold-start cold-mlp.json --cold-start cold-gpt.json \\
    --ranks ranks.json --side-by-side sbs.jsonl --untuned untuned.json > docs/benchmarks.md
```

Run it on an otherwise idle machine: the figures are only as quiet as the host. `--size gpu` (4096³
matmuls, a 4096-wide MLP) is for real GPUs; `bench/gpu.sh prepare` then `bench/gpu.sh OUT` runs it on
an offline GPU machine (its header says how). From Python: `webmp.bench.cli.run_bench(size,
profile=, tune_first=, models=)` returns the JSON's dict (format `webmp-bench/3`).
"""

HISTORY = f"""\
## History

Until {NOTEBOOK_COMMIT[:7]} this page was the notebook of six measuring passes (2026-11-30 to
2026-12-02, on three hosts): the matmul kernels' design and why on lavapipe, what was tried and
reverted, and each pass's figures. It is in git: `git show {NOTEBOOK_COMMIT[:7]}:docs/benchmarks.md`.
Its sections, which comments in the code cite by name: "The matmul kernels", "Row kernels",
"Auto-tune", "Results on this machine" (the first pass), "The GPT step", "Fusions", "The GPT step
with the tuned kernels (issue 10)", "Matmul kernels, second pass" to "fifth pass", "Sixth pass",
"The page's own tuning pass", "Side by side with tinygrad", "Data-parallel step on 2 ranks", "Cold
start", "Targets" and "Running on a GPU machine without internet".

Issue 28's "before" is the page at 445ea9e (`git show 445ea9e:docs/benchmarks.md`, 2026-12-03, this
host, Mesa 25.0.7): the GPT's shapes tuned, median 21.87 GFLOP/s native f16 and 15.36 fp32; the
GPT's cold start 13.50 s natively and 17.50 s in the page (107 kernels, one evaluation pipeline a
chunk); the default MLP's page cold start 8.54 s. From the issue's own measurements then:
`webmp train --model gpt` 327 ms a step with no tune cache against 171.5 ms tuned (the old default
tiles were the register core's 4x4 blocks), and sampling without attention caches (the "window"
columns of "Sampling" above are that sampler, timed beside the cached one).

The page's cold start before 2026-12-07 is the page at 0d362b2 (`git show 0d362b2:docs/benchmarks.md`,
2026-12-04, this host): the GPT's 7.67 s and the default MLP's 5.20 s from the plan to the first
step. Then (docs/architecture.md "The page's quick tier" and the loader files): the matmuls' dead
loader code out of Chromium's pipeline creation (9.99 -> 6.73 s measured back to back on a slow
hour of this host), the precompile's pipelines made as its loop reaches them (-> 5.44-5.68 s),
the kernel files in one request (0.35 s -> 12 ms), and the quick tier (4 alternating runs each:
median 4.93 s against 5.97 s without). Until 2026-12-07 the untuned training shapes were only
judged from a bench run's own table, each shape's batches back to back (30.9 GFLOP/s native f16
with an empty cache on 2026-12-04, 44.9 timed interleaved the same day).
"""


def runs_table(
    r: dict, colds: list[dict], ranks: dict | None, sbs: list[dict] | None, untuned: dict | None = None
) -> list[str]:
    """One row per run the page is made from: what ran, when, on which machine and adapter."""
    tune = " --tune" if (r.get("tune") or {}).get("report") is not None else ""
    prof = " --profile" if r.get("profile") else ""
    runs: list[tuple[str, dict, Any]] = [
        (f"`webmp bench --size {r.get('size')}{tune}{prof}`", r, r.get("adapter"))
    ]
    if untuned:
        runs.append(("`webmp bench` (an empty tune cache)", untuned, untuned.get("adapter")))
    for c in colds:
        gpt = (c.get("config") or {}).get("model") == "gpt"
        rows = c.get("rows") or [{}]
        runs.append((f"`webmp bench --cold-start{' gpt' if gpt else ''}`", c, rows[0].get("adapter")))
    if ranks:
        models = list((ranks.get("models") or {}).values()) or [{}]
        runs.append((f"`webmp bench --ranks {ranks.get('ranks')}`", ranks, models[0].get("adapter")))
    ours = [x for x in sbs or [] if x.get("tool") == "webmp"]
    if ours:
        runs.append(("`bench/tinygrad_side_by_side.sh`", ours[0], ours[0].get("adapter")))
    body = [
        [what, run.get("date") or "-", machine(run.get("host")), adapter(a), webmp_line(run.get("webmp"))]
        for what, run, a in runs
    ]
    return table(["run", "when", "machine", "adapter", "webmp"], body)


def render(
    r: dict,
    colds: list[dict] | None = None,
    ranks: dict | None = None,
    sbs: list[dict] | None = None,
    untuned: dict | None = None,
) -> str:
    colds = colds or []
    tinygrad, ratio = side_by_side(sbs)
    out = [
        "# Benchmarks",
        "",
        'Made by `python -m webmp.bench.markdown` from `webmp bench`\'s JSON (see "Making this page"); edit',
        "the generator (webmp/bench/markdown.py), not this file. How the figures are taken and what the",
        'targets are: "How the figures are taken"; what came before: "History".',
        "",
    ]
    out += runs_table(r, colds, ranks, sbs, untuned)
    out += matmul_section(r) + untuned_section(untuned)
    out += step_section(r) + first_step_section(r) + memory_section(r) + levers_section(r)
    out += readback_section(r) + sampling_section(r) + first_run_section(r) + profile_section(r)
    out += [line for c in colds for line in cold_section(c)] if colds else cold_section(None)
    out += ranks_section(ranks) + tinygrad + targets_section(r, colds, ratio, untuned)
    return "\n".join(out) + "\n" + METHOD + "\n" + VULKAN_DRIVER + "\n" + REGENERATE + "\n" + HISTORY


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m webmp.bench.markdown", description=__doc__.split("\n")[0])
    p.add_argument("bench", type=Path, help="`webmp bench --out`'s JSON")
    p.add_argument(
        "--cold-start",
        type=Path,
        action="append",
        default=[],
        help="`webmp bench --cold-start`'s JSON (repeatable)",
    )
    p.add_argument("--ranks", type=Path, help="`webmp bench --ranks N`'s JSON")
    p.add_argument("--side-by-side", type=Path, help="bench/tinygrad_side_by_side.sh's JSON lines")
    p.add_argument(
        "--untuned", type=Path, help="`webmp bench`'s JSON from a run with an empty tune cache, no --tune"
    )
    a = p.parse_args(argv)
    ranks = json.loads(a.ranks.read_text()) if a.ranks else None
    sbs = (
        [json.loads(line) for line in a.side_by_side.read_text().splitlines() if line.strip()]
        if a.side_by_side
        else None
    )
    colds = [json.loads(f.read_text()) for f in a.cold_start]
    untuned = json.loads(a.untuned.read_text()) if a.untuned else None
    sys.stdout.write(render(json.loads(a.bench.read_text()), colds, ranks, sbs, untuned))
    return 0


if __name__ == "__main__":
    sys.exit(main())
