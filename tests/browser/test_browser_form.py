"""The page's form (its fields, defaults, presets and the server's errors), a preset run's phases and
result, the page without WebGPU, and the charts' width."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from browser_helpers import ARTIFACTS, SMALL, TIMEOUT, wait_page

from webmp.config import TrainConfig
from webmp.presets import LOSS_SCALING_DEMO, PRESETS
from webmp.serve.client import LocalServer
from webmp.train.rundir import RunDir


def test_form_shows_each_models_fields_with_the_servers_defaults(server, browser):
    """The form is made from GET /api/form: choosing gpt shows its shape fields filled with the gpt
    defaults, a field the user changed keeps its value, and the run is created with the model and
    the changed fields only (the server fills in the model's defaults for the rest)."""
    form = server.get("/api/form")
    page = browser.open(server.url + "/")
    page.wait_for_function("!document.getElementById('start').disabled", timeout=60_000)
    shown = """() => Object.fromEntries([...document.querySelectorAll('#fields label')]
        .filter((l) => !l.hidden).map((l) => l.querySelector('input, select'))
        .map((e) => [e.id.slice(4), e.type === 'checkbox' ? e.checked : e.value]))"""

    def as_shown(v):  # floats as JavaScript's String() writes them (1e-8, 2 for 2.0)
        if v is None:
            return ""
        if isinstance(v, float):
            return page.evaluate("(x) => String(x)", v)
        return v if isinstance(v, bool) else ",".join(map(str, v)) if isinstance(v, list) else str(v)

    def expected(model, **changed):
        values = {**form["defaults"][model], **changed}
        fields = [f["name"] for f in form["fields"] if f["models"] is None or model in f["models"]]
        return {name: as_shown(values[name]) for name in fields}

    assert page.evaluate(shown) == expected("mlp")
    assert len(expected("mlp")) == 38  # every field the MLP reads, "more settings" (fp8's 5, zero) included
    page.fill("#cfg-steps", "300")
    page.select_option("#cfg-model", "gpt")
    assert page.evaluate(shown) == expected("gpt", steps=300)
    # the memory levers, in the groups the form puts them in, under their labels
    levers = page.evaluate(
        """(names) => names.map((n) => {
        const label = document.querySelector(`label:has(#cfg-${n})`);
        return [label.firstChild.textContent, label.closest('fieldset').querySelector('legend').textContent];
    })""",
        ["grad_accum", "recompute", "attention"],
    )
    assert levers == [
        ["gradient accumulation", "optimizer and schedule"],
        ["recompute activations", "optimizer and schedule"],
        ["attention", "model and data"],
    ]
    assert page.locator("#cfg-n_layer").get_attribute("title") is None  # help texts are on the labels
    assert page.locator("label:has(#cfg-n_layer)").get_attribute("title") == "gpt: transformer blocks"
    posted = []

    def refuse(route):
        if route.request.method != "POST":  # the runs panel's GET /api/runs
            route.continue_()
            return
        posted.append(json.loads(route.request.post_data))
        route.fulfill(status=422, json={"detail": "refused by the test"})

    page.route(re.compile(r"/api/runs$"), refuse)
    page.click("#start")
    wait_page(page, "window.webmp.status === 'failed'", timeout=60)
    assert posted == [{"model": "gpt", "steps": 300}]
    page.close()


def cli_errors(flags: dict) -> list[str]:
    """The lines `webmp train` prints for these flags, without its "webmp train: " prefix (a
    subprocess: the CLI exactly as a user runs it)."""
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]
    done = subprocess.run(
        [sys.executable, "-m", "webmp", "train", *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done
    return [line.removeprefix("webmp train: ") for line in done.stderr.strip().splitlines()]


def test_every_setting_is_in_the_form_and_bad_values_read_as_the_cli(server, browser):
    """Every TrainConfig field has an input (the uncommon ones under "more settings", `init_weights`
    disabled with its reason); values the server refuses are shown next to their fields in the words
    `webmp train` prints for them, and no run is created."""
    page = browser.open(server.url + "/")
    page.wait_for_function("!document.getElementById('start').disabled", timeout=60_000)
    for name in TrainConfig.model_fields:
        assert page.locator(f"#cfg-{name}").count() == 1, name
    assert not page.locator("#cfg-backoff_factor").is_visible()  # inside the closed "more settings"
    page.click("#more-settings > summary")
    assert page.locator("#cfg-init_weights").is_disabled()
    assert "native `webmp train`" in page.locator("label:has(#cfg-init_weights) .why").inner_text()
    runs_before = server.runs()
    bad = {"growth_factor": 0.5, "backoff_factor": 2, "batch_size": 0}
    for name, value in bad.items():
        page.fill(f"#cfg-{name}", str(value))
    page.click("#start")
    wait_page(page, "window.webmp.status === 'failed'", timeout=60)
    shown = page.evaluate("window.webmp.fieldErrors")
    expected = {}
    for line in cli_errors(bad):
        field, _, message = line.removeprefix("invalid ").partition(": ")
        expected[field] = message
    assert shown == expected and set(shown) == set(bad), (shown, expected)
    for name, message in expected.items():
        assert page.locator(f"label:has(#cfg-{name}) .field-error").inner_text() == message
    assert server.runs() == runs_before
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"browser-form-errors-{browser.kind}.png"), full_page=True)
    # a preset fills the form: its model's defaults with its own fields
    for preset in PRESETS:
        page.select_option("#preset", preset.name)
        cfg = TrainConfig(**preset.config)
        assert page.input_value("#cfg-model") == cfg.model
        assert page.input_value("#cfg-precision") == cfg.precision
        assert page.input_value("#cfg-steps") == str(cfg.steps)
        assert page.locator("#preset-note").inner_text() == preset.description
        assert page.evaluate("window.webmp.fieldErrors") == {}  # the old messages are gone
    page.select_option("#preset", "fp16-noscale")
    assert page.input_value("#cfg-hidden") == ",".join(map(str, LOSS_SCALING_DEMO["hidden"]))
    page.close()


def test_a_preset_run_shows_its_phases_and_its_result_agrees(server, browser):
    """The "Loss scaling at work" preset, shortened to 60 steps in the form: the page passes through
    "compiling kernels k/n" up to n/n, the first step, training and evaluation; steps/s counts the
    steps after the first (which holds the driver's first-use compilation) over their own time
    (window.webmp.timing); the scale backs off from 2^32 over the first 10 (skipped) steps, then
    grows after 20 clean steps; the Result's last step, loss and loss scale are the charts' last point,
    summary.json's and the last stored record's; the run reopened from its URL shows its f16 path."""
    page = browser.open(server.url + "/")
    page.wait_for_function("!document.getElementById('start').disabled", timeout=60_000)
    page.select_option("#preset", "loss-scaling")
    assert "saw-tooth" in page.locator("#preset-note").inner_text()
    assert page.input_value("#cfg-init_scale") == str(2**32)
    page.fill("#cfg-steps", "60")
    page.click("#start")
    wait_page(page, "window.webmp.phases.some((p) => p.phase === 'training')")
    ARTIFACTS.mkdir(exist_ok=True)  # the phase line while training (or done already, on a fast adapter)
    page.locator("#status-line").screenshot(
        path=str(ARTIFACTS / f"browser-preset-training-{browser.kind}.png")
    )
    wait_page(page, "window.webmp.status === 'finished'")
    assert re.fullmatch(
        r"run \S+: finished \(kernels compiled in \d+\.\d s, first step \d+\.\d s\)",
        page.inner_text("#status"),
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"browser-preset-run-{browser.kind}.png"), full_page=True)
    run_id = page.evaluate("window.webmp.runId")
    info = server.get(f"/api/runs/{run_id}")
    assert {k: info["config"][k] for k in ("init_scale", "growth_interval", "steps", "log_every")} == {
        "init_scale": 2.0**32, "growth_interval": 20, "steps": 60, "log_every": 10,
    }  # fmt: skip
    # the phases, in order
    phases = page.evaluate("window.webmp.phases")
    order = [p["phase"] for p in phases]
    compiling = [p["text"] for p in phases if p["phase"] == "compiling"]
    counts = [
        tuple(map(int, re.search(r"compiling kernels (\d+)/(\d+) \(\d+\.\d s\)", t).groups()))
        for t in compiling
    ]
    n = counts[0][1]
    assert n > 5 and [k for k, _ in counts] == list(range(n + 1)) and {m for _, m in counts} == {n}
    firsts = [order.index(p) for p in ("compiling", "first-step", "training", "evaluating")]
    assert firsts == sorted(firsts) and order[: len(counts)] == ["compiling"] * len(counts), order
    # steps/s: the steps after the first over their own time, compile and first step left out
    t = page.evaluate("window.webmp.timing")
    assert t["compileStart"] <= t["compileEnd"] <= t["trainStart"] < t["firstStepDone"] <= t["lastStepDone"]
    # the step's kernels compiled on more devices at once where the driver compiles at first dispatch
    # (lavapipe, behind the harness's layer), not where it compiles at pipeline creation (SwiftShader)
    pre = page.evaluate("window.webmp.precompile")
    if browser.kind == "lavapipe":
        assert pre["kernels"] == n and pre["helpers"] >= 1 and pre["errors"] == [], pre
        assert (
            0 <= pre["byHelpers"] < n and 0 < pre["seconds"] <= (t["compileEnd"] - t["compileStart"]) / 1000
        )
        assert f"compiled the step's {n} kernels on {pre['helpers'] + 1} devices at once" in page.inner_text(
            "#log"
        )
    else:
        assert pre is None
    assert (t["firstStep"], t["stepsDone"]) == (1, 60)
    assert t["stepUpdates"] == 60 and page.evaluate("window.webmp.runner.readbacks") == 6  # not 6 moves
    summary = server.get(f"/api/runs/{run_id}/summary")
    seconds = (t["lastStepDone"] - t["firstStepDone"]) / 1000
    assert summary["wall_seconds"] == round(seconds, 3)
    assert summary["steps_per_second"] == round(59 / seconds, 2)
    # what the preset shows: 10 skipped steps backing off from 2^32, then growth after 20 clean steps
    recs = RunDir(server.app.state.store.get(run_id).dir.path).read_metrics()
    assert [r["skipped"] for r in recs[:11]] == [1] * 10 + [0]
    assert [r["scale"] for r in recs[:11]] == [2.0 ** (32 - i) for i in range(10)] + [2.0**22]
    assert recs[30]["scale"] == 2.0**23  # grown after steps 10..29 were clean
    # the Result, the charts' last point, summary.json and the last record agree
    result = page.evaluate("window.webmp.result")
    chart = page.evaluate(
        "(() => { const d = window.webmp.charts.data; "
        "return {step: d.step.at(-1), loss: d.loss.at(-1), scale: d.scale.at(-1)}; })()"
    )
    last = recs[-1]
    assert chart == {"step": last["step"], "loss": last["loss"], "scale": last["scale"]}
    assert (summary["steps"], summary["last_loss"], summary["final_scale"]) == (
        last["step"] + 1, last["loss"], last["scale"],
    )  # fmt: skip
    shown = {k: result[k] for k in ("steps", "last train loss", "final loss scale")}
    as_js = page.evaluate(
        "(xs) => xs.map(String)", [summary["steps"], summary["last_loss"], summary["final_scale"]]
    )
    assert shown == dict(zip(("steps", "last train loss", "final loss scale"), as_js, strict=True))
    # reopened from its URL: the f16 path it trained on
    page.goto(server.url + f"/?run={run_id}")
    wait_page(page, "window.webmp.status === 'finished' && window.webmp.f16Path !== null", timeout=120)
    path_row = page.locator("#gpu-info dt:text-is('f16 path') + dd")
    page.wait_for_function(
        "[...document.querySelectorAll('#gpu-info dt')].some((dt) => dt.textContent === 'f16 path' "
        "&& !dt.nextElementSibling.textContent.startsWith('('))",
        timeout=60_000,
    )
    assert page.evaluate("window.webmp.f16Path") == browser.f16_path == info["f16_path"]
    assert path_row.inner_text().startswith(f"{browser.f16_path} f16")
    page.screenshot(path=str(ARTIFACTS / f"browser-reopened-run-{browser.kind}.png"), full_page=True)
    page.close()


NO_WEBGPU = {
    "missing": "Object.defineProperty(Navigator.prototype, 'gpu', {get: () => undefined});",
    "no-adapter": "navigator.gpu.requestAdapter = async () => null;",
}


@pytest.mark.parametrize("how", list(NO_WEBGPU))
def test_without_webgpu_the_page_says_what_to_do_and_creates_no_run(tmp_path, browser, how):
    """No navigator.gpu, or an adapter request that finds nothing: the page says what would work
    (a browser with WebGPU, a secure context, the headless flags), Start stays disabled, submitting
    the form anyway creates no run, and opening a created run's page leaves it created."""
    with LocalServer(tmp_path) as srv:
        waiting = srv.create_run(TrainConfig(**SMALL, steps=10))
        page = browser.browser.new_page(viewport={"width": 1100, "height": 900})
        page.add_init_script(NO_WEBGPU[how])
        page.goto(srv.url + "/")
        page.wait_for_function(
            "window.webmp.noWebGPU && !!document.querySelector('#cfg-model')", timeout=60_000
        )
        box = page.locator("#no-webgpu")
        assert box.is_visible() and not page.locator("#gpu-panel").is_visible()
        text = box.inner_text()
        for words in ("Chrome or Edge 113", "--enable-unsafe-webgpu", "secure context", "--headless=new"):
            assert words in text, words
        assert "isSecureContext" not in text  # 127.0.0.1 is a secure context: that hint stays hidden
        why = "navigator.gpu is undefined" if how == "missing" else "found no WebGPU adapter"
        assert why in page.locator("#no-webgpu-why").inner_text()
        assert "WebGPU unavailable" in page.locator("#status").inner_text()
        assert page.locator("#start").is_disabled()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"browser-no-webgpu-{how}-{browser.kind}.png"), full_page=True)
        page.evaluate("document.getElementById('controls').requestSubmit()")  # Enter in a field
        page.wait_for_timeout(500)
        assert [r["id"] for r in srv.runs()] == [waiting.id]
        page.goto(waiting.page_url)
        page.wait_for_function("window.webmp.noWebGPU", timeout=60_000)
        page.wait_for_timeout(500)
        assert waiting.info()["status"] == "created" and page.locator("#start").is_disabled()
        assert [r["id"] for r in srv.runs()] == [waiting.id]
        page.close()


def test_charts_follow_the_window_width(server, browser):
    """The charts are as wide as their section when drawn, and again after the window narrows or widens."""
    run = server.create_run(TrainConfig(**SMALL, steps=20, log_every=10, checkpoint_every=0), browser=browser)
    run.wait(timeout=TIMEOUT)
    page = run.page
    wait_page(page, "document.querySelectorAll('.uplot').length === 2", timeout=60)
    widths = """() => ({section: document.getElementById('charts').clientWidth,
        charts: [...document.querySelectorAll('.uplot canvas')]
            .map((c) => c.getBoundingClientRect().width)})"""

    def check():
        got = page.evaluate(widths)
        assert len(got["charts"]) == 2 and all(abs(w - got["section"]) <= 4 for w in got["charts"]), got
        return got["section"]

    wide = check()
    sections = []
    for width in (640, 1200):  # narrower than the page's max-width, then wider again
        page.set_viewport_size({"width": width, "height": 900})
        section = page.evaluate("document.getElementById('charts').clientWidth")
        page.wait_for_function(
            f"[...document.querySelectorAll('.uplot canvas')].every((c) => "
            f"Math.abs(c.getBoundingClientRect().width - {section}) <= 4)",
            timeout=10_000,
        )
        sections.append(check())
    assert sections[0] < 640 < wide and sections[1] == wide, (wide, sections)
    run.close_page()
