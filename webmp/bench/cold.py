"""`webmp bench --cold-start [gpt]`: from a run's plan to its first finished step (the default MLP's, or
TrainConfig(model="gpt")'s), natively and in the page, with the GPU driver's shader cache cold and
then warm. Natively as `webmp train` starts with an empty tune cache (the adapter class's shipped
tiles, first-use tuning first: its seconds count), in the page with the shipped tiles of the class
its browser reports (the page's plans: webmp.engine.adapters).
The JSON names the host and webmp's commit (webmp.bench.machine).

lavapipe compiles a pipeline's shaders when it is first dispatched and keeps them in Mesa's on-disk
cache ($MESA_SHADER_CACHE_DIR), so a first step on a new machine (or after a driver update) pays
for every kernel of the plan. Each measurement here starts a new process with a cache directory
of its own: empty for "cold", the one the cold run filled for "warm".

- native: a `python` subprocess tunes (webmp.tune.first_use, an empty tune cache of its own),
  builds the plan, creates the wgpu-py runtime and runs one step (tuning_s, plan_s, runtime_s,
  first_step_s; plan_to_first_step_s from the tuning's start). Both make only the step's and the
  lens's pipelines before it (`kernels`, webmp.engine.plan.FIRST_PROGRAMS; the evaluation's are made
  at their first use, in the page in the background), and the first step reads, as the page's.
- page: a new headless Chromium ($WEBGPU_CHROME, the lavapipe launcher, when set; else Debian's
  Chromium on SwiftShader, whose compiled shaders live only in the process, so its "warm" is cold
  too) opens a run of the same config from a server in this process; the page's own clock gives
  plan request -> kernels created -> first step finished (window.webmp.planRequested and .timing);
  where the page precompiles, its first steps run the plan's quick tier (webmp.engine.tiers).

Target (issue 11): at most 5 s from plan to first step in the page, for the default MLP on lavapipe
with a cold cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .machine import run_info

PAGE_TARGET_S = 5.0

_NATIVE = """
import json, sys, time
t0 = time.perf_counter()
from webmp.config import TrainConfig
from webmp.serve.page_data import training_data
from webmp.models import build_plan
from webmp.engine.plan import resolve_f16_path
from webmp.engine.runtime import Runtime, default_gpu
from webmp.engine.tiles import TileTable, plan_classes
from webmp.tune.first_use import FirstUseTuning
from webmp.engine.precompile import cpu_cores, helpers_for
from webmp.engine.plan import FIRST_PROGRAMS
cfg = TrainConfig(**json.loads(sys.argv[1]))
data = training_data(cfg)
gpu = default_gpu()
path = resolve_f16_path(cfg.precision, cfg.f16, gpu.has_f16)
t1 = time.perf_counter()
tiles = TileTable.for_adapter(gpu.name, gpu.info)  # as `webmp train` (the tune cache: empty)
tiles, tuned = FirstUseTuning()(gpu, build_plan(cfg, data, path, tiles, dry=True)[0], tiles)
t2 = time.perf_counter()
plan, blob = build_plan(cfg, data, path, tiles)
t3 = time.perf_counter()
helpers, why = helpers_for(gpu.info, gpu.features, cpu_cores())
rt = Runtime(plan, blob, gpu, first=FIRST_PROGRAMS, compile_helpers=helpers)  # as webmp train makes it
pre = dict(rt.precompiled or {"helpers": 0}, why=why)
t4 = time.perf_counter()
rt.run("train_step", read_metrics=True, histograms=True)  # a first step that reads, as the page's
rt.sync()
t5 = time.perf_counter()
print(json.dumps({"adapter": gpu.name, "f16_path": plan["f16_path"] or "fp32",
                  "kernels": len(rt.pipelines), "plan_kernels": len(plan["kernels"]),
                  "imports_data_device_s": t1 - t0, "tuning_s": t2 - t1,
                  "tuning": tuned, "tiles": tiles.describe(plan_classes(plan)), "plan_s": t3 - t2,
                  "precompile": pre,
                  "runtime_s": t4 - t3, "first_step_s": t5 - t4, "plan_to_first_step_s": t5 - t1}))
"""


def native_first_step(config: dict[str, Any], cache_dir: str) -> dict[str, Any]:
    """One new process, as `webmp train` starts with an empty tune cache (one of its own, in a
    temporary folder): first-use tuning, plan, runtime, first step, with Mesa's shader cache at
    cache_dir."""
    with tempfile.TemporaryDirectory(prefix="webmp-tune-") as tune:
        env = dict(
            os.environ, MESA_SHADER_CACHE_DIR=cache_dir, WEBMP_TUNE_CACHE=str(Path(tune) / "tune.json")
        )
        env.pop("MESA_SHADER_CACHE_DISABLE", None)
        out = subprocess.run(
            [sys.executable, "-c", _NATIVE, json.dumps(config)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    if out.returncode != 0:
        raise RuntimeError(f"the native first step failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def page_first_step(config: dict[str, Any], cache_dir: str, executable: str | None = None) -> dict[str, Any]:
    """A new headless Chromium with Mesa's shader cache at cache_dir trains one step of `config`
    from a local server; the page's timings."""
    from ..config import TrainConfig
    from ..serve.client import LocalServer, _playwright_instance, chrome_command

    exe, args = chrome_command(executable)
    env = dict(os.environ, MESA_SHADER_CACHE_DIR=cache_dir)
    env.pop("MESA_SHADER_CACHE_DISABLE", None)
    browser = _playwright_instance().chromium.launch(executable_path=exe, args=args, env=env, timeout=90_000)
    try:
        with tempfile.TemporaryDirectory() as runs, LocalServer(runs) as srv:
            run = srv.create_run(TrainConfig(**{**config, "steps": 2, "log_every": 1, "checkpoint_every": 0}))
            page = browser.new_page()
            t0 = time.perf_counter()
            page.goto(run.page_url)
            page.wait_for_function(
                "(window.webmp.timing && window.webmp.timing.firstStepDone !== null) || "
                "window.webmp.status === 'failed'",
                timeout=900_000,
                polling=50,
            )
            wall = time.perf_counter() - t0
            got = page.evaluate(
                "({t: window.webmp.timing, plan: window.webmp.planRequested, error: window.webmp.error,"
                " path: window.webmp.f16Path, adapter: window.webmp.adapter, pre: window.webmp.precompile,"
                " quick: window.webmp.runner && window.webmp.precompile && window.webmp.runner.plan.quick"
                " ? Object.keys(window.webmp.runner.plan.quick) : []})"
            )
            if got["error"]:
                raise RuntimeError(f"the page failed: {got['error']}")
            t, plan = got["t"], got["plan"]
            return {
                "browser": exe,
                "adapter": " / ".join(v for v in (got["adapter"] or {}).values() if v),
                "f16_path": got["path"],
                "kernels": t["kernels"],
                "precompile": got["pre"],
                "quick_tier": got["quick"],  # the programs whose first steps ran their quick twin
                "plan_and_blob_s": (t["compileStart"] - plan) / 1000,
                "compile_s": (t["compileEnd"] - t["compileStart"]) / 1000,
                "first_step_s": (t["firstStepDone"] - t["trainStart"]) / 1000,
                "plan_to_first_step_s": (t["firstStepDone"] - plan) / 1000,
                "page_open_to_first_step_s": wall,
            }
    finally:
        browser.close()


def cold_start(config: dict[str, Any] | None = None, log=print, page: bool = True) -> dict[str, Any]:
    """Native and page, cold then warm, for `config` (default: the default MLP, mixed)."""
    config = dict(config or {})
    rows = []
    runners = [("native", native_first_step)] + ([("page", page_first_step)] if page else [])
    for where, measure in runners:
        with tempfile.TemporaryDirectory(prefix="mesa-cache-") as cache:
            for state in ("cold", "warm"):
                row = {"where": where, "cache": state, **measure(config, cache)}
                row["cache_bytes_after"] = sum(
                    f.stat().st_size for f in Path(cache).rglob("*") if f.is_file()
                )
                rows.append(row)
                log(f"  {where:6} {state}: plan to first step {row['plan_to_first_step_s']:.2f} s")
    cold_page = next((r for r in rows if r["where"] == "page" and r["cache"] == "cold"), None)
    lavapipe = cold_page is not None and "swiftshader" not in cold_page["browser"]
    target = {
        "value": cold_page["plan_to_first_step_s"] if cold_page else None,
        "target": PAGE_TARGET_S,
        "met": (cold_page["plan_to_first_step_s"] <= PAGE_TARGET_S) if cold_page and lavapipe else None,
    }
    return {
        "format": "webmp-bench-cold/1",
        **run_info(),
        "config": config,
        "rows": rows,
        "page_cold_target": target,
    }


def format_cold_start(r: dict[str, Any]) -> str:
    out = [
        "from the plan to the first finished step (s), a new process each (lavapipe compiles a kernel "
        "at its first dispatch: in step 1)",
        f"{'where':8}{'cache':7}{'kernels':>8}{'plan':>8}{'pipelines':>10}{'step 1':>8}{'total':>8}  adapter",
    ]
    for row in r["rows"]:
        plan = row.get("plan_s", row.get("plan_and_blob_s"))
        compile_s = row.get("runtime_s", row.get("compile_s"))
        out.append(
            f"{row['where']:8}{row['cache']:7}{row['kernels']:>8}{plan:8.2f}{compile_s:10.2f}"
            f"{row['first_step_s']:8.2f}{row['plan_to_first_step_s']:8.2f}  {row['adapter']}"
        )
    t = r["page_cold_target"]
    verdict = {True: "met", False: "NOT met", None: "not measured (needs the lavapipe Chromium)"}[t["met"]]
    value = f"{t['value']:.2f} s" if t["value"] is not None else "-"
    out.append(f"page, cold cache: {value} (target <= {t['target']} s on lavapipe): {verdict}")
    return "\n".join(out)


def cli(out_path: str, config: dict[str, Any] | None = None) -> int:
    r = cold_start(config, log=lambda *a: print(*a, file=sys.stderr, flush=True))
    print(format_cold_start(r))
    Path(out_path).write_text(json.dumps(r, indent=1))
    print(f"wrote {out_path}")
    return 0
