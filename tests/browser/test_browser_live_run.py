"""A run training in a tab is not lost to a click (issue: the Runs panel's links and leaving the page):
the Runs panel marks the run this tab trains instead of linking it and opens every other run in a
new tab; leaving the page asks first (beforeunload); keyboard focus in the Runs panel survives its
refreshes; and a run whose loss diverged ends `failed`, saying where, instead of a green
`finished`."""

from __future__ import annotations

import re

import pytest
from browser_helpers import ARTIFACTS, SMALL, TIMEOUT, wait_page

from webmp.config import TrainConfig

LONG = TrainConfig(**SMALL, steps=200_000, log_every=10, checkpoint_every=0)  # stopped by the test


def row_of(page, run_id: str) -> dict:
    return page.evaluate(
        """(id) => {
             const tr = [...document.querySelectorAll('#runs-body tr')].find((t) => t.dataset.run === id);
             if (!tr) return null;
             const links = [...tr.querySelectorAll('a')];
             const actions = tr.querySelector('td.actions').innerText;
             return {idLinked: !!tr.querySelector('td.id a'), actions,
                     links: links.map((a) => ({text: a.textContent, target: a.target, title: a.title}))};
           }""",
        run_id,
    )


def test_a_live_run_survives_the_runs_panel_and_leaving_the_page(server, browser):
    other = server.create_run(TrainConfig(**SMALL, steps=10))  # created, never started: "open" in the panel
    run = server.create_run(LONG, browser=browser)
    page = run.page
    wait_page(page, "window.webmp.records >= 20 && window.webmp.training !== null", timeout=120)
    # the time left at the rate so far: (steps left) / (steps a second), in the progress line
    page.wait_for_function("window.webmp.eta !== null && window.webmp.eta !== undefined")
    eta, progress = page.evaluate("[window.webmp.eta, document.getElementById('progress').textContent]")
    done, rate = (float(x) for x in re.match(r"step (\d+)/200000, ([\d.]+) steps/s", progress).groups())
    assert eta == pytest.approx((LONG.steps - done) / rate, rel=0.05) and " left" in progress, progress
    page.click("#runs-refresh")
    page.wait_for_function(
        f"[...document.querySelectorAll('#runs-body tr')].some((t) => t.dataset.run === '{other.id}')"
    )
    mine, theirs = row_of(page, run.id), row_of(page, other.id)
    assert not mine["idLinked"] and "training in this tab" in mine["actions"], mine
    assert not any(link["text"] in ("follow", "resume") for link in mine["links"]), mine
    assert theirs["links"] and all(link["target"] == "_blank" for link in theirs["links"]), theirs
    assert all(f"this tab is training run {run.id}" in link["title"] for link in theirs["links"])

    # open the other run: a new tab; this one trains on
    before = page.evaluate("window.webmp.records")
    with page.context.expect_page() as opened:
        page.click(f"#runs-body tr[data-run='{other.id}'] td.actions a")
    opened.value.wait_for_load_state()
    assert f"run={other.id}" in opened.value.url
    opened.value.close()
    wait_page(page, f"window.webmp.records > {before + 20}", timeout=120)
    assert page.evaluate("window.webmp.status") == "running"

    # leaving the page (a reload, here from a script: Playwright's page.close(run_before_unload=True)
    # closed it without the dialog) asks first; staying keeps the run training
    dialogs = []

    def stay(dialog):
        dialogs.append(dialog.type)
        dialog.dismiss()

    page.on("dialog", stay)
    before = page.evaluate("window.webmp.records")
    page.evaluate("setTimeout(() => { location.reload(); }, 0)")
    wait_page(page, f"window.webmp.records > {before + 20}", timeout=120)
    assert dialogs == ["beforeunload"] and not page.is_closed()
    page.remove_listener("dialog", stay)

    # keyboard focus on a control of a row stays there when the panel refreshes (every 5 s)
    button = f"#runs-body tr[data-run='{other.id}'] button.new-from"
    page.focus(button)
    page.wait_for_timeout(6000)
    focused = page.evaluate(
        "({run: document.activeElement.closest('tr')?.dataset.run, cls: document.activeElement.className})"
    )
    assert focused == {"run": other.id, "cls": "new-from"}, focused
    page.screenshot(path=str(ARTIFACTS / f"browser-live-run-{browser.kind}.png"), full_page=True)

    page.click("#stop")
    wait_page(page, "window.webmp.status === 'stopped' && window.webmp.training === null", timeout=120)
    assert run.info()["status"] == "stopped"
    run.close_page()


def test_a_diverged_run_is_marked_failed_in_the_page(server, browser):
    """fp32 at lr 1e30: the loss is NaN from the second step (measured natively: step 1); the page
    shows the server's verdict, not `finished`."""
    run = server.create_run(
        TrainConfig(**{**SMALL, "lr": 1e30}, precision="fp32", steps=30, log_every=5), browser=browser
    )
    wait_page(run.page, "window.webmp.status === 'failed'", timeout=TIMEOUT)
    status = run.page.evaluate(
        "({error: window.webmp.error, line: document.getElementById('status').textContent})"
    )
    assert status["error"].startswith("diverged: the training loss is NaN at step"), status
    assert "failed" in status["line"] and "diverged" in status["line"], status
    info = run.info()
    assert info["status"] == "failed" and info["message"] == status["error"]
    assert run.summary()["steps"] == 30  # the summary and the curves are kept
    run.page.wait_for_function("(window.webmp.downloads || []).includes('curves.png')")
    run.close_page()


def test_f16_native_is_refused_beside_its_field_on_an_adapter_without_shader_f16(server, browser):
    """SwiftShader has no shader-f16: Start with f16 'native' makes no run and says why beside the
    field (before, the run was made and failed when its plan was built, then offered a Resume that
    could only fail)."""
    if browser.kind != "swiftshader":
        pytest.skip("this adapter has shader-f16: f16 native runs here")
    page = browser.open(server.url + "/")
    page.wait_for_function("!document.getElementById('start').disabled", timeout=60_000)
    runs = len(server.get("/api/runs"))
    page.click("#more-settings summary")
    page.select_option("#cfg-f16", "native")
    page.click("#start")
    page.wait_for_function("window.webmp.fieldErrors.f16 !== undefined", timeout=30_000)
    message = page.evaluate("window.webmp.fieldErrors.f16")
    assert message.startswith("'native' needs shader-f16, which this browser's WebGPU adapter lacks"), message
    assert page.locator("label:has(#cfg-f16) .field-error").inner_text() == message
    assert page.evaluate("window.webmp.status") == "failed" and len(server.get("/api/runs")) == runs
    page.select_option("#cfg-f16", "auto")
    page.fill("#cfg-steps", "5")
    page.click("#start")  # the status left at 'failed' by the refusal: wait_page would stop on it
    page.wait_for_function("window.webmp.status === 'finished'", timeout=TIMEOUT * 1000, polling=200)
    assert page.evaluate("window.webmp.fieldErrors") == {} and len(server.get("/api/runs")) == runs + 1
    page.close()


def test_a_follower_stays_live_across_the_trainers_reload_and_resume(server, browser):
    """Tab B follows the run tab A trains; A reloads (leaving it disconnected, then resuming it from
    its checkpoint): B shows the disconnect, keeps following, and goes on with the resumed run (its
    charts rebuilt from the server's records), to the end A makes (Stop)."""
    cfg = TrainConfig(**SMALL, steps=200_000, log_every=10, checkpoint_every=20)
    run = server.create_run(cfg, browser=browser)
    a = run.page
    wait_page(a, "window.webmp.records >= 40", timeout=120)
    b = browser.open(run.page_url)
    wait_page(b, "window.webmp.records >= 40 && window.webmp.status === 'running'", timeout=120)
    statuses = []
    b.on("console", lambda m: statuses.append(m.text) if m.text.startswith("status ") else None)
    b.evaluate(
        "new MutationObserver(() => console.log(`status ${window.webmp.status}`))"
        ".observe(document.getElementById('status'), {childList: true, characterData: true, subtree: true})"
    )
    a.on("dialog", lambda d: d.accept())  # leave: the run disconnects, the reloaded tab resumes it
    a.evaluate("setTimeout(() => location.reload(), 0)")
    b.wait_for_function("window.webmp.followResumes === 1", timeout=120_000)
    wait_page(a, "window.webmp.training !== null && window.webmp.records >= 60", timeout=120)
    resumed_at = run.info()["checkpoint_step"]
    wait_page(
        b, f"window.webmp.status === 'running' && window.webmp.records >= {resumed_at + 40}", timeout=120
    )
    assert "status disconnected" in statuses, statuses
    b.screenshot(path=str(ARTIFACTS / f"browser-follower-{browser.kind}.png"), full_page=True)
    a.click("#stop")
    wait_page(b, "window.webmp.status === 'stopped'", timeout=120)
    assert b.evaluate("window.webmp.records") == len(run.records())
    b.close()
    run.close_page()


def test_a_refused_request_reads_as_the_servers_words(server, browser):
    """No raw "GET /api/...: 404" on the page: opening a run that does not exist shows the server's
    own line (the request itself stays for the log)."""
    page = browser.open(server.url + "/?run=no-such-run")
    page.wait_for_function("window.webmp.status === 'failed'", timeout=60_000)
    said = page.evaluate("({error: window.webmp.error, line: document.getElementById('status').textContent})")
    detail = server.http.get("/api/runs/no-such-run").json()["detail"]
    assert said["error"] == said["line"] == detail and "no-such-run" in detail, said
    assert "/api/" not in said["line"] and "404" not in said["line"]
    page.close()


def test_resume_keeps_the_forms_edits(server, browser):
    """Resume continues the run with its own settings and leaves what the user typed in the form
    (before, it put the run's settings back over the edits)."""
    run = server.create_run(
        TrainConfig(**SMALL, steps=200_000, log_every=10, checkpoint_every=20), browser=browser
    )
    page = run.page
    wait_page(page, "window.webmp.records >= 30", timeout=120)
    page.click("#stop")
    wait_page(page, "window.webmp.status === 'stopped' && window.webmp.training === null", timeout=120)
    page.fill("#cfg-lr", "0.0123")
    page.wait_for_function(
        "!document.getElementById('resume').hidden && !document.getElementById('resume').disabled"
    )
    assert "learning rate" in page.locator("#resume-note").inner_text()
    page.click("#resume")
    page.wait_for_function(
        "window.webmp.training !== null && window.webmp.status === 'running'", timeout=120_000
    )
    assert page.input_value("#cfg-lr") == "0.0123"
    assert run.info()["config"]["lr"] == SMALL["lr"]  # the run trains on with its own
    page.click("#stop")
    wait_page(page, "window.webmp.status === 'stopped'", timeout=120)
    run.close_page()


def test_the_page_fits_a_phone_and_uses_a_wide_screen(server, browser):
    """At 390 px (a phone) nothing is wider than the screen (before: 714 px, the Runs table); at
    1920 px the page widens and the two charts sit side by side (before: 1032 px, stacked)."""
    run = server.create_run(TrainConfig(**SMALL, steps=30, log_every=10), browser=browser)
    page = run.page
    wait_page(page, "window.webmp.status === 'finished'")
    # the Result panel's downloads: every file of the run, each as itself
    page.wait_for_function("(window.webmp.downloads || []).includes('metrics.csv')")
    assert page.evaluate("window.webmp.downloads")[-2:] == ["metrics.csv", f"{run.id}.zip"]
    with page.expect_download() as got:
        page.click("#downloads a[download='summary.json']")
    run_dir = server.app.state.store.get(run.id).dir.path
    assert got.value.suggested_filename == "summary.json"
    assert open(got.value.path(), "rb").read() == (run_dir / "summary.json").read_bytes()
    page.click("#runs-refresh")
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(500)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    wide = page.evaluate(
        "[...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > 391).length"
    )
    assert wide == 0
    assert (
        page.evaluate("getComputedStyle(document.querySelector('#runs td[data-label]'), '::before').content")
        == '"kind: "'
    )
    page.screenshot(path=str(ARTIFACTS / f"browser-phone-{browser.kind}.png"), full_page=True)
    page.set_viewport_size({"width": 1920, "height": 1080})
    page.wait_for_timeout(800)
    boxes = page.evaluate(
        "['loss-chart', 'scale-chart', 'charts']"
        ".map((id) => document.getElementById(id).getBoundingClientRect())"
        ".map((r) => ({left: r.left, right: r.right, top: r.top, width: r.width}))"
    )
    loss, scale, charts = boxes
    assert (
        charts["width"] > 1300 and scale["left"] >= loss["right"] and abs(scale["top"] - loss["top"]) < 1
    ), boxes
    canvases = page.evaluate(
        "[...document.querySelectorAll('#charts canvas')].map((c) => c.getBoundingClientRect().right)"
    )
    assert max(canvases) <= charts["right"] + 1, (canvases, charts)
    page.screenshot(path=str(ARTIFACTS / f"browser-wide-{browser.kind}.png"))
    run.close_page()


def test_the_loss_charts_toggles_and_the_terms_tooltips(server, browser):
    """The loss chart on a linear axis and smoothed (an EMA bias-corrected as TensorBoard's, checked
    against numpy on the drawn points); the panels' terms explain themselves on hover."""
    import numpy as np

    run = server.create_run(TrainConfig(**SMALL, steps=40, log_every=10), browser=browser)
    page = run.page
    wait_page(page, "window.webmp.status === 'finished'")
    raw = np.array(page.evaluate("window.webmp.charts.data.loss"), float)
    assert page.evaluate("window.webmp.lossShown") == raw.tolist()
    page.uncheck("#loss-log")
    page.select_option("#loss-smooth", "0.9")
    shown = np.array(page.evaluate("window.webmp.lossShown"), float)
    avg, weight, want = 0.0, 0.0, []
    for v in raw:
        avg, weight = 0.9 * avg + 0.1 * v, 0.9 * weight + 0.1
        want.append(avg / weight)
    np.testing.assert_allclose(shown, want, rtol=1e-12)
    assert shown[0] == raw[0] and np.std(np.diff(shown)) < np.std(np.diff(raw))
    assert page.evaluate("window.webmp.lossAxis") == "loss, smoothed 0.9 (linear scale)"  # on a canvas
    titles = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('dt[title]')].map((d) => [d.textContent, d.title]))"
    )
    assert (
        "halved on an overflow" in titles["final loss scale"] and "GradScaler" in titles["skipped steps"]
    ), titles
    assert "causal mask" in page.get_attribute("#lens .lens-note", "title")
    run.close_page()


def test_runs_are_named_sorted_and_deleted_from_the_panel(server, browser):
    """The Runs panel's name button (two prompts: the name, the note), its sort and its delete (a
    confirm; the directory moves to .deleted/, nothing erased)."""
    first = server.create_run(TrainConfig(**SMALL, steps=10))
    second = server.create_run(TrainConfig(**SMALL, steps=10))
    page = browser.open(server.url + "/")
    row = f"#runs-body tr[data-run='{first.id}']"
    page.wait_for_selector(row)
    answers = iter(["lr baseline", "the run the others are compared with"])
    page.on("dialog", lambda d: d.accept(next(answers, None)) if d.type == "prompt" else d.accept())
    page.click(f"{row} button.rename")
    page.wait_for_function(f"document.querySelector(\"{row} .run-name\")?.textContent === 'lr baseline'")
    assert page.get_attribute(f"{row} .run-name", "title") == "the run the others are compared with"
    assert server.get(f"/api/runs/{first.id}")["name"] == "lr baseline"
    order = "[...document.querySelectorAll('#runs-body tr')].map((t) => t.dataset.run)"
    assert page.evaluate(order)[:2] == [second.id, first.id]  # newest first
    page.select_option("#runs-sort", "name")
    names = page.evaluate(
        "[...document.querySelectorAll('#runs-body tr')]"
        ".map((t) => t.querySelector('.run-name')?.textContent || '')"
    )
    named = [n for n in names if n]
    assert (
        names[: len(named)] == sorted(named) and first.id in page.evaluate(order)[: len(named)]
    )  # named first
    run_dir = server.app.state.store.get(second.id).dir.path
    page.click(f"#runs-body tr[data-run='{second.id}'] button.delete")
    page.wait_for_function(f"!document.querySelector(\"#runs-body tr[data-run='{second.id}']\")")
    assert not run_dir.exists() and (run_dir.parent / ".deleted" / second.id / "config.json").is_file()
    page.close()
