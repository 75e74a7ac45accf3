"""The runs panel: following a run from a second tab, no dead ends, comparing runs."""

from __future__ import annotations

import functools
import re
from decimal import ROUND_HALF_UP, Decimal

import pytest
from browser_helpers import (
    ARTIFACTS,
    SMALL,
    TIMEOUT,
    on_disk,
    plan_beyond_limits,
    wait_page,
    wait_resume_offered,
)

from webmp.config import TrainConfig
from webmp.train.rundir import RunDir


def test_a_second_tab_follows_a_live_run_to_the_same_end(server, browser):
    """A second tab opening a running run follows it: its chart grows while the first tab trains,
    and it ends `finished` with the trainer's records and summary."""
    cfg = TrainConfig(**SMALL, steps=400, log_every=10, checkpoint_every=0)
    run = server.create_run(cfg)
    trainer = browser.open(run.page_url)
    wait_page(trainer, "window.webmp.status === 'running' && window.webmp.records >= 10")
    follower = browser.open(run.page_url)
    wait_page(follower, "window.webmp.mode === 'following' && window.webmp.records >= 10")
    seen = follower.evaluate("window.webmp.records")
    assert follower.locator("#stop").is_enabled()  # its Stop asks the trainer (the next test)
    grew_while_running = False
    for _ in range(600):
        now, status = follower.evaluate("[window.webmp.records, window.webmp.status]")
        if now > seen and run.status == "running" and status == "running":
            grew_while_running = True
            ARTIFACTS.mkdir(exist_ok=True)
            shot = ARTIFACTS / f"browser-follower-live-{browser.kind}.png"
            follower.screenshot(path=str(shot), full_page=True)
            break
        follower.wait_for_timeout(100)
    assert grew_while_running, "the follower's chart did not grow while the run was training"
    wait_page(trainer, "window.webmp.status === 'finished'")
    wait_page(follower, "window.webmp.status === 'finished'", timeout=60)
    recs = on_disk(server, run)
    assert follower.evaluate("window.webmp.records") == len(recs) == 400
    drawn = follower.evaluate("document.querySelectorAll('#loss-chart canvas').length")
    assert drawn == 1
    summary = run.wait()
    assert follower.locator("#summary").inner_text() == trainer.locator("#summary").inner_text()
    assert f"{summary['final_train_loss']:.5g}" in follower.locator("#summary").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    follower.screenshot(path=str(ARTIFACTS / f"browser-follower-{browser.kind}.png"), full_page=True)
    trainer.close()
    follower.close()


def test_a_followers_stop_asks_the_training_tab_to_stop(server, browser):
    run = server.create_run(TrainConfig(**SMALL, steps=100_000, log_every=20, checkpoint_every=0))
    trainer = browser.open(run.page_url)
    wait_page(trainer, "window.webmp.records >= 20")
    follower = browser.open(run.page_url)
    wait_page(follower, "window.webmp.mode === 'following' && window.webmp.records >= 20")
    follower.click("#stop")
    wait_page(trainer, "window.webmp.status === 'stopped'", timeout=120)
    wait_page(follower, "window.webmp.status === 'stopped'", timeout=60)
    info = run.info()
    recs = on_disk(server, run)
    assert info["status"] == "stopped" and not info["stop_requested"]
    assert info["checkpoint_step"] == len(recs) > 20 and len(recs) % 20 == 0  # at a metrics read
    assert follower.evaluate("window.webmp.records") == len(recs)
    wait_resume_offered(follower, run.id)
    wait_resume_offered(trainer, run.id)
    trainer.close()
    follower.close()


def set_field(page, name: str, value) -> None:
    el = page.locator(f"#cfg-{name}")
    if el.evaluate("e => e.tagName") == "SELECT":
        el.select_option(str(value))
    else:
        el.fill(str(value))


def test_a_failed_run_never_traps_the_page(server, browser):
    """A run fails (its plan is made to ask more than the adapter has); the page offers Resume of
    that run with its own settings, saying the form's changes are not applied; Start trains a new
    run with the form's settings."""
    page = browser.open(f"{server.url}/")
    wait_page(page, "window.webmp.status === 'idle'", timeout=120)

    page.route(re.compile(r"/plan\?"), plan_beyond_limits)

    set_field(page, "hidden", "32,32")
    set_field(page, "steps", 30)
    page.click("#start")
    wait_page(page, "window.webmp.status === 'failed'", timeout=120)
    failed_id = page.evaluate("window.webmp.runId")
    assert server.run(failed_id).status == "failed"
    page.unroute(re.compile(r"/plan\?"))
    wait_resume_offered(page, failed_id)
    assert page.locator("#start").inner_text() == "Start"
    set_field(page, "precision", "fp32")
    set_field(page, "steps", 40)
    note = page.locator("#resume-note").inner_text()
    assert f"Resume continues run {failed_id} with its own settings" in note
    assert "precision" in note and "steps" in note and "not applied" in note
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"browser-failed-run-{browser.kind}.png"), full_page=True)
    page.click("#start")
    page.wait_for_function(f"window.webmp.runId !== {failed_id!r}", timeout=60_000)
    wait_page(page, "window.webmp.status === 'finished'")
    new_id = page.evaluate("window.webmp.runId")
    assert new_id != failed_id and f"run={new_id}" in page.url
    info = server.run(new_id).info()
    assert info["config"]["precision"] == "fp32" and info["config"]["steps"] == 40
    assert info["config"]["hidden"] == [32, 32] and info["status"] == "finished"
    assert server.run(failed_id).status == "failed"  # left as it was
    assert page.locator("#resume").is_hidden()
    # the runs panel puts the failed run's settings back in the form, for a new run
    page.locator(f'#runs-body tr[data-run="{failed_id}"] button.new-from').click()
    wait_page(page, "window.webmp.status === 'idle'", timeout=30)
    assert page.locator("#cfg-precision").input_value() == "mixed"
    assert page.locator("#cfg-steps").input_value() == "30" and "run=" not in page.url
    assert page.locator("#resume").is_hidden() and page.locator("#start").is_enabled()
    page.close()


def kib_or_mib(n: int) -> str:
    """Bytes as the compare view shows them (web/compare.js bytes): KiB under a MiB, else MiB, by
    Number.toFixed, which rounds a tie up (13568 B = 13.25 KiB exactly: 13.3), not to even."""
    value, unit, places = (
        (Decimal(n) / 2**10, "KiB", "0.1") if n < 2**20 else (Decimal(n) / 2**20, "MiB", "0.01")
    )
    return f"{value.quantize(Decimal(places), rounding=ROUND_HALF_UP)} {unit}"


def test_compare_overlays_runs_and_shows_their_summaries(server, browser, tmp_path, monkeypatch):
    """Three browser runs (mixed, fp32, bf16: the formats side by side on one model, as the format
    presets put them) and a native one (fp16 without loss scaling, written by `webmp train` into the
    server's runs directory) chosen in the runs panel: one chart each for the loss and the loss scale
    with a series per run, and the numbers of each run's summary.json: its format, final loss, step
    time and GPU memory by category."""
    from webmp.train.loop import Trainer

    cfg = dict(**SMALL, steps=40, log_every=10, checkpoint_every=0)
    mixed = server.create_run(TrainConfig(**cfg), browser=browser)
    fp32 = server.create_run(TrainConfig(**cfg, precision="fp32"), browser=browser)
    bf16 = server.create_run(TrainConfig(**cfg, precision="bf16"), browser=browser)
    for run in (mixed, fp32, bf16):
        run.wait(timeout=TIMEOUT)
        run.close_page()
    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(tmp_path / "no-tune-cache.json"))
    native_dir = server.app.state.store.root / f"native-fp16-noscale-{browser.kind}"
    native = Trainer(TrainConfig(**cfg, precision="fp16-noscale"), out=native_dir, progress=False, log=None)
    native_summary = native.run()
    ids = [mixed.id, fp32.id, bf16.id, native_dir.name]
    server.http.post(f"/api/runs/{fp32.id}/label", json={"name": f"fp32 baseline {browser.kind}"})

    page = browser.open(f"{server.url}/")
    page.wait_for_selector(f'#runs-body tr[data-run="{native_dir.name}"]', timeout=30_000)
    row = page.locator(f'#runs-body tr[data-run="{native_dir.name}"]')
    assert "native" in row.inner_text() and "finished" in row.inner_text()
    for run_id in ids:
        page.locator(f'#runs-body tr[data-run="{run_id}"] input.choose').check()
    page.click("#compare-go")
    wait_page(page, "window.webmp.compare && window.webmp.compare.runs.length === 4", timeout=60)
    assert page.evaluate("window.webmp.compare.points") == [40, 40, 40, 40]
    for chart in ("compare-loss", "compare-scale"):
        legend = page.locator(f"#{chart} .u-legend .u-series").all_inner_texts()
        shown_as = [mixed.id, f"fp32 baseline {browser.kind}", bf16.id, native_dir.name]  # named: its name
        assert len(legend) == 5 and all(any(i in t for t in legend) for i in shown_as), legend
    # the settings they differ in, marked; the same model and data: no warning
    compared = page.evaluate("window.webmp.compare")
    assert (
        "precision" in compared["differs"] and "lr" not in compared["differs"] and compared["warning"] == ""
    )
    assert page.locator('#compare-table tr.differs:has(td[data-key="precision"])').count() == 1
    root = server.app.state.store.root

    def cell(run_id: str, key: str) -> str:
        return page.locator(f'#compare-table td[data-run="{run_id}"][data-key="{key}"]').inner_text()

    for run_id in ids:
        summary = RunDir(root / run_id).read_summary()
        shown = functools.partial(cell, run_id)
        assert shown("kind") == ("native" if run_id == native_dir.name else "browser")
        assert shown("precision") == summary["precision"] and shown("f16 path") == summary["f16_path"]
        assert int(shown("steps")) == summary["steps"] == 40
        assert int(shown("skipped steps")) == summary["skipped_steps"]
        assert float(shown("last train loss")) == pytest.approx(summary["last_loss"], rel=1e-4)
        assert float(shown("mean loss, last steps")) == pytest.approx(summary["final_train_loss"], rel=1e-4)
        assert float(shown("final loss scale")) == summary["final_scale"]
        assert shown("test accuracy") == f"{100 * summary['test_accuracy']:.2f} %"
        assert shown("ms / step") == f"{1000 / summary['steps_per_second']:.2f}"
        memory = summary["gpu_memory_bytes"]
        assert {"activations", "working_weights", "master_weights"} <= set(memory)
        for category, n in [*memory.items(), ("total", sum(memory.values()))]:
            assert shown(f"memory: {category}") == kib_or_mib(n), (run_id, category)
    # the formats' memory as their plans account it: 16-bit working weights in mixed and bf16
    summaries = {run_id: RunDir(root / run_id).read_summary() for run_id in ids}
    weights = {summaries[i]["precision"]: summaries[i]["gpu_memory_bytes"]["working_weights"] for i in ids}
    assert (
        weights["mixed"] == weights["bf16"] == weights["fp16-noscale"]
        and 2 * weights["bf16"] == weights["fp32"]
    )
    assert cell(bf16.id, "f16 path") == "bf16" and cell(fp32.id, "f16 path") == "none"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"browser-compare-{browser.kind}.png"), full_page=True)
    # with a GPT among them: the view says their losses are not comparable
    gpt = server.create_run(TrainConfig(model="gpt", n_layer=1, d_model=16, n_head=2, context=8, steps=5))
    page.click("#runs-refresh")
    page.locator(f'#runs-body tr[data-run="{gpt.id}"] input.choose').check()
    page.click("#compare-go")
    wait_page(page, "window.webmp.compare && window.webmp.compare.runs.length === 5", timeout=60)
    warning = page.evaluate("window.webmp.compare.warning")
    assert warning.startswith("these runs train different models (") and "not comparable" in warning
    assert warning in page.locator("#compare-note").inner_text()
    assert "model" in page.evaluate("window.webmp.compare.differs")
    # the native run opened from the panel: its curves and result, read-only, its settings in the form
    page.locator(f'#compare-table th[data-run="{native_dir.name}"] a').click()
    wait_page(page, "window.webmp.status === 'finished'", timeout=60)
    assert page.locator("#cfg-precision").input_value() == "fp16-noscale"
    assert "trained natively" in page.locator("#resume-note").inner_text()
    assert page.locator("#resume").is_hidden() and page.locator("#start").is_enabled()
    assert page.evaluate("window.webmp.records") == 0  # nothing trains here
    assert page.evaluate("document.querySelectorAll('#loss-chart canvas').length") == 1
    assert f"{native_summary['final_train_loss']:.5g}" in page.locator("#summary").inner_text()
    page.close()
