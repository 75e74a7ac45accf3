"""The page's tuning pass for the default GPT and what it buys: a LocalServer, headless Chromium
($WEBGPU_CHROME, else Debian's) clicking the page's tuning button with the model set to gpt, then
GPT runs, each in a fresh page, with the default plan, the tuned tiles only, and tiles and forms;
prints one JSON line a run (steps/s between the records of step 19 and the last, as they reach the
server). Not part of the tests or CI. Its figures: "The page's own tuning pass" in the history of
docs/benchmarks.md (`git show 68a93d6:docs/benchmarks.md`).

    python3 bench/page_gpt_tuning.py [--choices 4] [--steps 60] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--choices", type=int, default=4, help="tile choices per shape class")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="page-gpt-")))
    a = p.parse_args()
    cache = a.out / "tune.json"
    os.environ["WEBMP_TUNE_CACHE"] = str(cache)  # before webmp reads it
    from webmp.config import TrainConfig
    from webmp.engine.tiles import RESERVED_KEYS
    from webmp.serve.client import Browser, LocalServer

    def timed_run(srv, browser, label):
        run = srv.create_run(TrainConfig(model="gpt", steps=a.steps, log_every=10, checkpoint_every=0))
        run.open_page(browser)
        arrived = {rec["step"]: time.monotonic() for rec in run.history(timeout=1200, poll=1.0)}
        summary = run.summary()
        run.close_page()
        first, last = 19, a.steps - 1
        row = {
            "plan": label,
            "steps_per_s": round((last - first) / (arrived[last] - arrived[first]), 3),
            "matmul_tiles": summary["matmul_tiles"],
            "final_train_loss": summary["final_train_loss"],
        }
        print(json.dumps(row), flush=True)

    with LocalServer(a.out / "runs") as srv, Browser(os.environ.get("WEBGPU_CHROME")) as browser:
        page = browser.open(srv.url + "/")
        page.wait_for_function("!document.getElementById('tune').disabled", timeout=120_000)
        page.select_option("#cfg-model", "gpt")
        page.fill("#tune-candidates", str(a.choices))
        page.click("#tune")
        done = "window.webmp.tune.status !== 'running' && window.webmp.tune.status !== 'idle'"
        page.wait_for_function(done, timeout=1_200_000)
        tune = page.evaluate("window.webmp.tune")
        print(json.dumps({"tuning": page.locator("#tune-status").inner_text(), "forms": tune["forms"]}))
        page.close()
        if tune["status"] != "done":
            raise SystemExit(f"the tuning pass failed: {tune['error']}")
        tuned = json.loads(cache.read_text())
        ((key, entry),) = tuned.items()
        plans = {
            "tiles and forms": tuned,
            "tiles only": {key: {k: v for k, v in entry.items() if k not in RESERVED_KEYS}},
            "default": {},
        }
        for label in ["tiles and forms", "tiles only", "default", "tiles and forms", "tiles only"]:
            cache.write_text(json.dumps(plans[label]))
            timed_run(srv, browser, label)
        cache.write_text(json.dumps(tuned))


if __name__ == "__main__":
    main()
