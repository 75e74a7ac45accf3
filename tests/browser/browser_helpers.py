"""What the browser tests share: the browsers they run with, the small model of the short runs, and
the checks of a page run against the server's records and the same run natively."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from webmp.config import TrainConfig
from webmp.train.rundir import RunDir

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
BROWSERS = {"swiftshader": ("/usr/bin/chromium", "emulated")}
if os.environ.get("WEBGPU_CHROME"):
    BROWSERS["lavapipe"] = (os.environ["WEBGPU_CHROME"], "native")

SMALL = dict(hidden=[32, 32], batch_size=32, lr=3e-3)
TIMEOUT = 600  # seconds for one run; SwiftShader needs ~2 min for the e2e run on 2 idle cores


def on_disk(srv, run) -> list[dict]:
    """The records the server persisted (metrics.jsonl in the run directory)."""
    return RunDir(srv.app.state.store.get(run.id).dir.path).read_metrics()


def same(a, b) -> bool:
    """Equal records, NaN included (a skipped step's grad_norm is NaN, and NaN != NaN)."""
    return json.dumps(a) == json.dumps(b)


def native_run(cfg: TrainConfig, browser, where: Path, monkeypatch) -> tuple[list[dict], dict]:
    """`cfg` trained natively through wgpu-py on the browser's f16 path with the default matmul
    tiles (those of the server's plans): its records and summary."""
    from webmp.engine.tiles import TileTable
    from webmp.train.loop import Trainer

    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(where / "no-tune-cache.json"))
    native = Trainer(
        cfg.model_copy(update={"f16": browser.f16_path}),
        out=where,
        progress=False,
        log=None,
        tiles=TileTable(),
    )
    summary = native.run()
    assert summary["matmul_tiles"] == "default" and summary["f16_path"] == browser.f16_path
    return native.run_dir.read_metrics(), summary


def assert_like_native(web: list[dict], nat: list[dict], browser) -> None:
    """A short run of the small MLP in the page against the same run natively (native_run).

    The same plan runs on both, so lavapipe in Chromium and lavapipe in wgpu-py must agree bit for
    bit. Another adapter (SwiftShader) rounds some f32 results an ulp apart (the reasoning of
    test_browser_and_native_curves_agree): its losses agree within 1e-5 relative on the first 10
    steps and 1e-3 on any of these short runs' steps (measured on SwiftShader: <= 5.5e-7 and
    <= 3.5e-5), the loss scale and skipped steps exactly. A page that skipped a kernel (the batch
    gather, an update) or read the wrong batch is off by far more on step 0 already (a runner that
    never gathered a batch: 7.7e-2)."""
    assert [r["step"] for r in web] == [r["step"] for r in nat]
    if browser.kind == "lavapipe":
        assert same(web, nat)
        return
    wl, nl = np.array([r["loss"] for r in web]), np.array([r["loss"] for r in nat])
    np.testing.assert_allclose(wl[:10], nl[:10], rtol=1e-5)
    np.testing.assert_allclose(wl, nl, rtol=1e-3)
    for k in ("scale", "skipped", "found_inf"):
        assert [r[k] for r in web] == [r[k] for r in nat], k


def plan_beyond_limits(route):
    """A Playwright route handler: the server's plan, edited to need more than any adapter allows."""
    response = route.fetch()
    body = response.json()
    body["plan"]["required_limits"]["maxStorageBufferBindingSize"] = 2**40
    route.fulfill(response=response, json=body)


def wait_page(page, condition: str, timeout=TIMEOUT):
    """Wait in the browser for `condition` (this also lets Playwright run its route handlers);
    a page that fails instead ends the wait with its error."""
    page.wait_for_function(
        f"({condition}) || window.webmp.status === 'failed'", timeout=timeout * 1000, polling=200
    )
    if "'failed'" not in condition:
        assert page.evaluate("window.webmp.status") != "failed", page.evaluate("window.webmp.error")


def wait_resume_offered(page, run_id: str) -> None:
    """The Resume button offers run_id (shown once the page has the run's status back)."""
    page.wait_for_function(
        f"(b => !b.hidden && b.textContent === 'Resume {run_id}')(document.getElementById('resume'))",
        timeout=30_000,
    )


LOGIT_TIE = 2.0**-6  # how close two logits (or a cumulative probability and u) count as a tie


def page_sample(page, prompt: str, tokens: int, temperature: float, seed: int) -> dict:
    """Generate text with the results panel's form: window.webmp.sample once it is done."""
    before = page.evaluate("window.webmp.sampled")
    page.fill("#sample-prompt", prompt)
    page.fill("#sample-tokens", str(tokens))
    page.fill("#sample-temperature", str(temperature))
    page.fill("#sample-seed", str(seed))
    page.click("#sample-go")
    wait_page(page, f"window.webmp.sampled > {before}")
    return page.evaluate("window.webmp.sample")


def first_difference_is_a_tie(run_dir, prompt, native: str, web: str, temperature, seed, path) -> str:
    """Why two samples may part (the prefix before that point being equal): the native logits of
    the last common prefix have a near tie. Greedy: the top two within 2 LOGIT_TIE; drawn: a
    cumulative probability within sample_draw_bound (+ what a logit error of LOGIT_TIE moves it)
    of the draw's u. Returns the reason, or fails."""
    from webmp import ops
    from webmp.engine.runtime import Runtime
    from webmp.sample.job import prepare
    from webmp.testing import reference as ref

    i = next(k for k, (a, b) in enumerate(zip(native, web, strict=True)) if a != b)
    assert i >= len(prompt), "the prompt itself differs"
    job = prepare(run_dir, native[:i], tokens=1, temperature=temperature, seed=seed)
    plan, blob = job.plan(path)
    rt = Runtime(plan, blob)
    rt.run("sample_step")
    n, V, T = len(job.prompt_ids), len(job.vocab), job.cfg.window
    row = np.frombuffer(rt.read("logits"), np.float32).reshape(-1, V)[min(n, T) - 1].astype(np.float64)
    if temperature == 0:
        top = np.sort(row)
        assert top[-1] - top[-2] <= 2 * LOGIT_TIE, f"character {i}: no tie, margin {top[-1] - top[-2]}"
        return f"character {i}: greedy margin {top[-1] - top[-2]:.3g}"
    t32, cutoff = ops.sample_temperature(temperature)
    p = ref.sample_probs(row, t32, cutoff)
    u = float(ref.sample_uniform(seed, n))
    gap = float(np.abs(np.cumsum(p) - u).min())
    assert gap <= ref.sample_draw_bound(row, t32, cutoff) + 2 * LOGIT_TIE / t32, (
        f"character {i}: u {u}, gap {gap}"
    )
    return f"character {i}: u within {gap:.3g} of a cumulative probability"
