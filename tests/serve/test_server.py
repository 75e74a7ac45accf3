"""The browser runtime's server without a browser: REST, static files, WebSocket validation,
record ordering, disconnect + resume, concurrent runs, the token, and the Python API's live history.
A test stands in for the page by speaking its WebSocket protocol (webmp/serve/messages.py)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import json
import math
import signal
import subprocess
import sys
import threading

import anyio
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from webmp.cli import main as cli_main
from webmp.config import MODEL_DEFAULTS, TrainConfig
from webmp.data.text import load_text, unigram_bits_per_char
from webmp.engine.state import METRIC_FIELDS, STATE_FIELDS, decode_state, encode_state
from webmp.models import build_plan
from webmp.presets import LOSS_SCALING_DEMO, PRESETS
from webmp.serve.app import (
    MAX_JSON_BODY,
    UPLOT_DIR,
    WS_MESSAGE_BURST,
    WS_RATE_CLOSE,
    cli_serve,
    create_app,
    request_refusal,
    server_token,
)
from webmp.serve.budget import MAX_BUFFER_BYTES, MAX_CACHED_PLANS, MAX_PLAN_BYTES, estimate_buffers
from webmp.serve.client import LocalServer
from webmp.serve.errors import InvalidConfig
from webmp.serve.form import NOT_IN_BROWSER, check_browser_config
from webmp.serve.messages import MAX_MESSAGE_BYTES
from webmp.serve.runs import RunStore, training_data
from webmp.train.rundir import RunDir

SMALL = dict(hidden=[16], batch_size=16, steps=30, log_every=10, checkpoint_every=10)
# a tiny GPT with a short evaluation (16 chunks of 4 windows of 16 characters); the other fields
# are the gpt defaults (MODEL_DEFAULTS)
BASE = "http://127.0.0.1"  # a Host the server answers (its loopback names)
GPT = dict(model="gpt", n_layer=1, d_model=32, n_head=2, context=16, batch_size=4, steps=20, log_every=5,
           val_tokens=1024, checkpoint_every=10)  # fmt: skip


def record(step: int, loss: float | None = None) -> dict:
    """A metrics record as the page sends it (every field of METRIC_FIELDS)."""
    values = {
        "step": step,
        "loss": 2.0 / (1 + step) if loss is None else loss,
        "scale": 65536.0,
        "skipped": 0,
        "lr": 1e-3,
        "grad_norm": 0.5,
        "found_inf": 0,
        "min_scale_event": 0,
    }
    return {name: values[name] for name, _ in METRIC_FIELDS}


def state_words(iteration: int) -> dict:
    words = {name: (0.0 if kind == "f32" else 0) for name, kind in STATE_FIELDS}
    return {**words, "scale": 65536.0, "iteration": iteration, "opt_step": iteration, "loss": 0.25}


def hello(run_id: str, start_step: int = 0, f16_path: str = "emulated") -> dict:
    return {
        "type": "hello",
        "run_id": run_id,
        "f16_path": f16_path,
        "start_step": start_step,
        "adapter": {"vendor": "test", "architecture": "fake"},
        "features": [],
        "limits": {"maxBufferSize": 2**30},
    }


def records_msg(run_id: str, steps, **kw) -> dict:
    return {"type": "records", "run_id": run_id, "records": [record(s, **kw) for s in steps]}


def summary_msg(run_id: str, iteration: int) -> dict:
    return {
        "type": "summary",
        "run_id": run_id,
        "state": state_words(iteration),
        "test_correct": 300,
        "test_count": 359,
        "wall_seconds": 2.5,
        "steps_run": iteration,
        "readbacks": 3,
    }


@contextlib.contextmanager
def serving(app):
    """A TestClient of `app` that closes the sockets a failed test left open (TestClient's exit
    would wait for them forever)."""
    with TestClient(app, base_url=BASE) as c:
        try:
            yield c
        finally:
            for ws in list(OPEN_SOCKETS):
                leave(ws)


@pytest.fixture
def client(tmp_path):
    with serving(create_app(tmp_path / "runs")) as c:
        yield c


def create(client, **cfg) -> dict:
    r = client.post("/api/runs", json={**SMALL, **cfg})
    assert r.status_code == 201, r.text
    return r.json()


RECEIVE_TIMEOUT = 60.0  # seconds: a reply that never comes fails the test instead of hanging it


def receive_json(ws, timeout: float = RECEIVE_TIMEOUT):
    """The server's next message, as ws.receive_json() but bounded (that one waits forever)."""

    async def next_message():
        with anyio.fail_after(timeout):
            return await ws._send_rx.receive()  # what TestClient's receive() awaits

    try:
        message = ws.portal.call(next_message)
    except TimeoutError:
        pytest.fail(f"no message from the server within {timeout} s")
    ws._raise_on_close(message)  # WebSocketDisconnect when the server closed the socket
    return json.loads(message["text"])


def send(ws, msg) -> dict:
    ws.send_text(json.dumps(msg))
    return receive_json(ws)


OPEN_SOCKETS: list = []  # connected and not yet left (closed by the client fixture if a test fails)


def connect(client, run_id, **kw):
    ws = client.websocket_connect(f"ws://127.0.0.1/api/runs/{run_id}/ws", **kw)
    ws.__enter__()  # left with leave(ws)
    OPEN_SOCKETS.append(ws)
    assert receive_json(ws)["type"] == "welcome"
    return ws


def leave(ws) -> None:
    """The page goes away (closes its socket)."""
    if ws in OPEN_SOCKETS:
        OPEN_SOCKETS.remove(ws)
    ws.__exit__(None, None, None)


def stored_steps(client, run_id) -> list[int]:
    """Steps in metrics.jsonl on disk (checked against what the API reports)."""
    steps = [r["step"] for r in RunDir(client.app.state.store.get(run_id).dir.path).read_metrics()]
    assert steps == [r["step"] for r in client.get(f"/api/runs/{run_id}/metrics").json()["records"]]
    return steps


def checkpoint_bytes(client, run_id, iteration: int, offer="emulated") -> bytes:
    """A checkpoint upload: the plan's initial contents of its checkpoint buffers, state at `iteration`."""
    plan = client.get(f"/api/runs/{run_id}/plan", params={"f16": offer}).json()["plan"]
    blob = client.get(f"/api/runs/{run_id}/blob", params={"f16": offer}).content
    by_name = {b["name"]: b for b in plan["buffers"]}
    out = b""
    for name in plan["checkpoint_buffers"]:
        b = by_name[name]
        data = bytearray(b["bytes"])
        if b["init"]:
            data[: b["init"]["bytes"]] = blob[b["init"]["offset"] : b["init"]["offset"] + b["init"]["bytes"]]
        if name == plan["state"]["buffer"]:
            data = bytearray(encode_state({**decode_state(bytes(data)), "iteration": iteration}))
        out += bytes(data)
    return out


# --- static files -----------------------------------------------------------------------------


def test_serves_page_shaders_and_local_chart_library(client):
    page = client.get("/")
    assert page.status_code == 200 and '<script type="module" src="/app.js">' in page.text
    assert "export class Runner" in client.get("/runner.js").text
    assert "@group(0)" in client.get("/shaders/scaler.wgsl").text
    assert UPLOT_DIR.is_dir(), "the chart library is missing: run `npm ci --prefix web`"
    lib = client.get("/vendor/uplot/uPlot.esm.js")
    assert lib.status_code == 200 and "uPlot" in lib.text
    assert "cdn" not in page.text.lower() and "https://" not in page.text


def test_favicon_is_served_and_linked(client):
    """Browsers ask for /favicon.ico (a 404 in every server log otherwise); the page links the SVG."""
    for path in ("/favicon.ico", "/favicon.svg"):
        icon = client.get(path)
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml"), path
        assert icon.content.startswith(b"<svg"), path
    assert '<link rel="icon" href="/favicon.svg"' in client.get("/").text


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("runs")) as srv:
        yield srv


ESCAPES = [
    "/../pyproject.toml",
    "/shaders/../pyproject.toml",
    "/shaders/../webmp/serve/app.py",
    "/shaders/../../etc/passwd",
    "/shaders/%2e%2e/pyproject.toml",
    "/%2e%2e/pyproject.toml",
    "/shaders/%2e%2e%2fpyproject.toml",
    "/shaders/..%2f..%2fetc%2fpasswd",
    "/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/shaders//etc/passwd",
    "/shaders/%2fetc%2fpasswd",
    "//etc/passwd",
    "/vendor/uplot/../../../../pyproject.toml",
    "/vendor/uplot/%2e%2e/%2e%2e/%2e%2e/%2e%2e/pyproject.toml",
    "/shaders/.%2e/.%2e/etc/passwd",
    "/shaders/%252e%252e/pyproject.toml",
    "/..\\pyproject.toml",
    "/shaders/..%5cpyproject.toml",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_static_files_cannot_escape(live_server, path):
    """Raw request paths (http.client sends them untouched, unlike browsers and httpx)."""
    host, port = live_server.url.removeprefix("http://").split(":")

    def get(p):
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", p)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")

    assert get("/shaders/common.wgsl")[0] == 200  # the same client does fetch what is allowed
    status, body = get(path)
    assert status in (400, 404), (path, status, body[:200])
    for secret in ("[build-system]", "root:x:0", "def create_app"):
        assert secret not in body


# --- REST ---------------------------------------------------------------------------------------


def test_runs_rest_api(client):
    run = create(client, lr=2e-3)
    assert run["status"] == "created" and run["last_step"] == -1 and run["config"]["lr"] == 2e-3
    assert run["page_url"] == f"/?run={run['id']}"
    assert [r["id"] for r in client.get("/api/runs").json()] == [run["id"]]
    assert client.get(f"/api/runs/{run['id']}").json()["status"] == "created"
    assert client.get(f"/api/runs/{run['id']}/metrics").json() == {"status": "created", "records": []}
    assert client.get(f"/api/runs/{run['id']}/summary").status_code == 404
    config = json.loads((client.app.state.store.get(run["id"]).dir.path / "config.json").read_text())
    assert config["lr"] == 2e-3 and config["runtime"] == "browser"

    bad = client.post("/api/runs", json={"steps": -5})
    assert bad.status_code == 422 and "invalid steps" in bad.json()["detail"]
    assert client.post("/api/runs", json={"no_such_field": 1}).status_code == 422
    assert client.post("/api/runs", json=[1, 2]).status_code == 422
    assert (
        client.post(
            "/api/runs", content=b"{not json", headers={"content-type": "application/json"}
        ).status_code
        == 422
    )
    for unknown in ("nope", "..", "a%2F..%2Fb", "x" * 100):
        assert client.get(f"/api/runs/{unknown}").status_code == 404
    assert len(client.get("/api/runs").json()) == 1


def test_form_is_made_from_the_config_and_its_model_defaults(client):
    """The page's form: every TrainConfig field, once, with its kind, choices, help text, the models
    that read it and its group, and each model's defaults (MODEL_DEFAULTS applied) for the page to
    show; a field a page cannot set says why; a run created with only the model (what the page sends
    when no field was changed) gets those defaults."""
    form = client.get("/api/form").json()
    fields = {f["name"]: f for f in form["fields"]}
    assert sorted(fields) == sorted(TrainConfig.model_fields) and len(form["fields"]) == len(fields)
    assert fields["model"]["kind"] == "choice" and fields["model"]["choices"] == ["mlp", "mlp-ln", "gpt"]
    assert fields["model"]["models"] is None and fields["steps"]["models"] is None
    assert fields["hidden"]["kind"] == "int_list" and fields["hidden"]["models"] == ["mlp", "mlp-ln"]
    assert fields["tie_head"]["kind"] == "bool" and fields["lr"]["kind"] == "float"
    assert fields["dataset"]["kind"] == "choice" and fields["dataset"]["choices"] == ["digits"]
    assert fields["eps"]["kind"] == "float" and fields["growth_interval"]["kind"] == "int"
    assert fields["f16"]["choices"] == ["native", "emulated", "auto"]
    for name in ("n_layer", "n_head", "d_model", "context", "tie_head"):
        assert fields[name]["models"] == ["gpt"] and fields[name]["help"].startswith("gpt: ")
    assert fields["batch_size"]["help"] == "examples per step (gpt: context windows per step)"
    # groups in order, each field in one; the common ones first
    assert [g["name"] for g in form["groups"]] == ["model", "precision", "optimizer", "run"]
    assert {f["group"] for f in form["fields"]} == {g["name"] for g in form["groups"]}
    assert fields["backoff_factor"]["group"] == "precision" and not fields["backoff_factor"]["common"]
    assert fields["steps"]["common"] and fields["seed"]["group"] == "run"
    # only what a page cannot use is disabled, with check_browser_config's reason
    assert {n for n, f in fields.items() if f["disabled"]} == set(NOT_IN_BROWSER) == {"data", "init_weights"}
    for name in NOT_IN_BROWSER:
        assert fields[name]["kind"] == "text" and "native `webmp train`" in fields[name]["disabled"]
        with pytest.raises(InvalidConfig, match="native `webmp train`"):
            check_browser_config(TrainConfig(**{name: "x.npz"}))
    assert set(form["defaults"]) == {"mlp", "mlp-ln", "gpt"}
    for model, defaults in form["defaults"].items():
        assert defaults == TrainConfig(model=model).model_dump()
    assert {k: form["defaults"]["gpt"][k] for k in ("steps", "batch_size", "lr")} == {
        k: MODEL_DEFAULTS["gpt"][k] for k in ("steps", "batch_size", "lr")
    }
    assert form["defaults"]["mlp"]["steps"] != form["defaults"]["gpt"]["steps"]
    run = client.post("/api/runs", json={"model": "gpt", "steps": 7})
    assert run.status_code == 201
    config = run.json()["config"]
    assert config["steps"] == 7
    assert all(config[k] == v for k, v in MODEL_DEFAULTS["gpt"].items() if k != "steps")


def test_presets_are_browser_configs_of_their_own(client):
    """Each preset the form offers is a TrainConfig a page may train, named once; the fp16-noscale
    one is the measured loss-scaling demo (tests/train/test_train.py::test_loss_scaling_matters asserts
    its first layers' gradients flush and its accuracy falls well below fp32's)."""
    form = client.get("/api/form").json()
    assert [p["name"] for p in form["presets"]] == [p.name for p in PRESETS]
    assert len({p.name for p in PRESETS}) == len(PRESETS) and len({p.title for p in PRESETS}) == len(PRESETS)
    for preset in form["presets"]:
        assert preset["title"] and preset["description"]
        cfg = TrainConfig(**preset["config"])
        check_browser_config(cfg)
        assert set(preset["config"]) <= set(TrainConfig.model_fields)
    by_name = {p.name: TrainConfig(**p.config) for p in PRESETS}
    assert by_name["fp16-noscale"] == TrainConfig(**LOSS_SCALING_DEMO, precision="fp16-noscale")
    assert by_name["fp32"].precision == "fp32" and by_name["gpt"].model == "gpt"
    scaling = by_name["loss-scaling"]  # overflows at first: f16's largest finite value is 65504
    assert (
        scaling.loss_scaling and scaling.init_scale > 65504 * 1e4 and scaling.growth_interval < scaling.steps
    )


# Values the CLI parses but TrainConfig refuses: the page must show the same words.
BAD_VALUES = [
    ("growth_factor", 0.5),
    ("backoff_factor", 2.0),
    ("batch_size", 0),
    ("eps", 0.0),
    ("beta2", 1.0),
]


@pytest.mark.parametrize("field,value", BAD_VALUES)
def test_config_errors_read_as_webmp_trains(client, capsys, field, value):
    """POST /api/runs refuses a bad value (422, no run) with the line `webmp train` prints for it."""
    assert cli_main(["train", "--" + field.replace("_", "-"), str(value)]) == 2
    cli = capsys.readouterr().err.strip()
    r = client.post("/api/runs", json={field: value})
    assert r.status_code == 422 and f"webmp train: {r.json()['detail']}" == cli
    assert cli.startswith(f"webmp train: invalid {field}: {field} ")
    assert client.get("/api/runs").json() == []


@pytest.mark.slow  # the summary builds the plan and draws curves.png (~2 s)
def test_the_result_agrees_with_the_curves_last_point(client):
    """summary.json's last step (steps, last_loss, final_scale) is the last record's, also when the
    last step changed the scale: the state then holds the next step's scale (here backed off)."""
    run_id = create(client, steps=3, log_every=1, checkpoint_every=0)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    last = {**record(2, loss=0.125), "scale": 32768.0, "skipped": 1}
    send(ws, {"type": "records", "run_id": run_id, "records": [record(0), record(1), last]})
    state = {**state_words(3), "scale": 16384.0, "skipped_total": 1}
    assert send(ws, {**summary_msg(run_id, 3), "state": state})["type"] == "ack"
    leave(ws)
    summary = client.get(f"/api/runs/{run_id}/summary").json()
    assert (summary["steps"], summary["last_loss"], summary["final_scale"]) == (3, 0.125, 32768.0)
    assert summary["skipped_steps"] == 1
    info = client.get(f"/api/runs/{run_id}").json()
    assert info["status"] == "finished" and info["f16_path"] == "emulated"  # what a reopened page shows


def test_gpt_trains_on_the_default_corpus_with_the_native_plan(client):
    """A browser GPT run trains on the default corpus (load_text(None), as `webmp train --model
    gpt` without --data): its plan and blob are build_plan's for that config and f16 path."""
    from webmp.models import build_plan

    run = create(client, **GPT)
    cfg = TrainConfig(**run["config"])
    assert cfg.model == "gpt" and cfg.warmup == MODEL_DEFAULTS["gpt"]["warmup"]  # left out: the gpt default
    corpus = load_text(None)
    for offer in ("native", "emulated"):
        got = client.get(f"/api/runs/{run['id']}/plan", params={"f16": offer}).json()
        plan, blob = build_plan(cfg, corpus, offer)
        assert got["plan"] == json.loads(json.dumps(plan))
        assert client.get(f"/api/runs/{run['id']}/blob", params={"f16": offer}).content == blob
    assert got["plan"]["eval"]["loss_buffer"] == "val_loss_sum"
    tokens = next(b for b in got["plan"]["buffers"] if b["name"] == "tokens")
    assert tokens["shape"] == [len(corpus.train)] and tokens["init"]["bytes"] == 4 * len(corpus.train)

    r = client.post("/api/runs", json={**GPT, "data": "/etc/passwd"})  # still no data files
    assert r.status_code == 422 and "browser runs train on the built-in datasets" in r.json()["detail"]


def test_gpt_summary_carries_the_validation_loss(client):
    """The page sends plan["eval"]["loss_buffer"]'s sum as val_loss_sum (a number >= 0, or "NaN" /
    "Infinity"; required exactly when the plan has that buffer); summary.json then has the native
    run's val_* figures."""
    run_id = create(client, **GPT)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(GPT["steps"])))
    base = {**summary_msg(run_id, GPT["steps"]), "test_correct": 100, "test_count": 1023}
    for bad in (None, -1.0, "-Infinity", "1.5", "nan", "inf", True):
        msg = {**base, "val_loss_sum": bad} if bad is not None else base
        reply = send(ws, msg)
        assert reply["type"] == "error" and "val_loss_sum" in reply["message"], (bad, reply)
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "running"
    assert send(ws, {**base, "val_loss_sum": 1023 * 4.5})["type"] == "ack"
    leave(ws)
    assert all(k[0] != run_id for k in client.app.state.store.plans.keys())  # an ended run holds no plan
    summary = client.get(f"/api/runs/{run_id}/summary").json()
    assert summary["val_loss"] == pytest.approx(4.5) and summary["test_accuracy"] == pytest.approx(100 / 1023)
    assert summary["val_bits_per_char"] == pytest.approx(4.5 / math.log(2))
    # the baseline on the characters eval scores (the first val_tokens), as the native Trainer's
    assert summary["unigram_bits_per_char"] == unigram_bits_per_char(load_text(None), GPT["val_tokens"])

    mlp = create(client)["id"]  # an MLP's plan sums no loss: a val_loss_sum is refused
    ws = connect(client, mlp)
    send(ws, hello(mlp))
    send(ws, records_msg(mlp, range(30)))
    reply = send(ws, {**summary_msg(mlp, 30), "val_loss_sum": 1.0})
    assert reply["type"] == "error" and "val_loss_sum" in reply["message"]
    assert send(ws, summary_msg(mlp, 30))["type"] == "ack"
    leave(ws)
    assert client.get(f"/api/runs/{mlp}/summary").json()["val_loss"] is None


@pytest.mark.parametrize("sent,value", [("NaN", math.nan), ("Infinity", math.inf)])
def test_a_diverged_gpt_finishes_with_its_non_finite_validation_loss(client, sent, value):
    """A GPT whose summed validation loss is NaN or Infinity (fp16-noscale can diverge) still
    finishes: summary.json holds val_loss and val_bits_per_char as the native Trainer writes them
    (strict JSON: the strings "NaN" / "Infinity", webmp.train.rundir.json_safe), the API sends them so
    too, read_summary gives the floats back, and the curves are drawn."""
    run_id = create(client, **GPT, precision="fp16-noscale")["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(GPT["steps"]), loss=float("nan")))
    msg = {**summary_msg(run_id, GPT["steps"]), "test_correct": 0, "test_count": 1023, "val_loss_sum": sent}
    assert send(ws, msg)["type"] == "ack"
    leave(ws)
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "finished"
    run_dir = client.app.state.store.get(run_id).dir.path
    written = (run_dir / "summary.json").read_text()
    assert f'"val_loss": "{sent}",' in written and f'"val_bits_per_char": "{sent}",' in written
    json.loads(written, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    back = RunDir(run_dir).read_summary()
    for key in ("val_loss", "val_bits_per_char"):
        assert math.isnan(back[key]) if math.isnan(value) else back[key] == value
    shown = client.get(f"/api/runs/{run_id}/summary").json()
    assert shown["val_loss"] == shown["val_bits_per_char"] == sent
    assert (run_dir / "curves.png").stat().st_size > 0


def test_config_records_the_data_and_resume_refuses_changed_data(client):
    """config.json and checkpoint.json record the training data's sha256 as a native run's do (the
    default corpus for the GPT; None for the built-in digits), checkpoints the GPT's vocabulary;
    a run whose checkpoint names other data than the server's now is not resumed (one line)."""
    corpus = load_text(None)
    run_id = create(client, **GPT)["id"]
    run_dir = client.app.state.store.get(run_id).dir.path
    assert json.loads((run_dir / "config.json").read_text())["data_sha256"] == corpus.sha256
    mlp = create(client)["id"]
    assert RunDir(client.app.state.store.get(mlp).dir.path).read_json("config.json")["data_sha256"] is None
    assert RunStore(client.app.state.store.root).runs[run_id].data_sha256 == corpus.sha256  # reloaded

    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(12)))
    url = f"/api/runs/{run_id}/checkpoint"
    upload = checkpoint_bytes(client, run_id, 10)
    assert client.put(url, params={"f16": "emulated", "step": 10}, content=upload).status_code == 200
    leave(ws)
    meta_file = run_dir / "checkpoint.json"
    meta = json.loads(meta_file.read_text())
    assert meta["data_sha256"] == corpus.sha256 and meta["vocab"] == corpus.vocab
    assert json.loads((run_dir / "config.json").read_text())["data_sha256"] == corpus.sha256  # kept

    meta_file.write_text(json.dumps({**meta, "data_sha256": "0" * 64}))
    r = client.get(f"/api/runs/{run_id}/plan", params={"f16": "emulated"})
    detail = r.json()["detail"]
    assert r.status_code == 409 and "\n" not in detail, detail
    assert f"cannot resume run {run_id}" in detail and "changed since the checkpoint at step 10" in detail
    assert f"sha256 {'0' * 64} then, {corpus.sha256} now" in detail
    meta_file.write_text(json.dumps(meta))
    assert client.get(f"/api/runs/{run_id}/plan", params={"f16": "emulated"}).json()["start_step"] == 10


def finished_gpt_run(client) -> str:
    """A GPT run the fake page finished; its final checkpoint holds the plan's initial weights."""
    run_id = create(client, **GPT)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(GPT["steps"])))
    upload = checkpoint_bytes(client, run_id, GPT["steps"])
    url = f"/api/runs/{run_id}/checkpoint"
    assert (
        client.put(url, params={"f16": "emulated", "step": GPT["steps"]}, content=upload).status_code == 200
    )
    msg = {**summary_msg(run_id, GPT["steps"]), "test_count": 1023, "val_loss_sum": 4000.0}
    assert send(ws, msg)["type"] == "ack"
    leave(ws)
    return run_id


def test_sample_plan_is_webmp_samples(client):
    """GET /api/runs/{id}/sample: the plan `webmp sample` builds of the run's final checkpoint
    (webmp.sample.job.prepare, default tiles) for the page's f16 path, the vocabulary in it, the
    blob from /sample/blob; the settings left out are `webmp sample`'s defaults, which /api/form
    also serves to the page."""
    from webmp.sample import job as sp

    run_id = finished_gpt_run(client)
    run_dir = client.app.state.store.get(run_id).dir.path
    url = f"/api/runs/{run_id}/sample"
    defaults = ("", sp.DEFAULT_TOKENS, sp.DEFAULT_TEMPERATURE, sp.DEFAULT_SEED)
    assert client.get("/api/form").json()["sample"] == {
        "prompt": "", "tokens": sp.DEFAULT_TOKENS, "temperature": sp.DEFAULT_TEMPERATURE,
        "seed": sp.DEFAULT_SEED, "max_tokens": 2000, "max_prompt": 2000,
    }  # fmt: skip
    for offer in ("native", "emulated"):
        got = client.get(url, params={"f16": offer}).json()
        assert (got["prompt"], got["tokens"], got["temperature"], got["seed"]) == defaults
        job = sp.prepare(run_dir, "")
        plan, blob = job.plan(job.path(offer == "native"))
        assert got["f16_path"] == offer and got["plan"] == json.loads(json.dumps(plan))
        assert client.get(url + "/blob", params={"f16": offer}).content == blob
    assert got["plan"]["sample"]["vocab"] == load_text(None).vocab
    assert got["plan"]["sample"]["prompt_tokens"] == 1  # an empty prompt starts after a newline
    query = {
        "f16": "emulated",
        "prompt": "def f(x):\n    return",
        "tokens": "50",
        "temperature": "0",
        "seed": "7",
    }
    got = client.get(url, params=query).json()
    assert (got["prompt"], got["tokens"], got["temperature"], got["seed"]) == (query["prompt"], 50, 0.0, 7)
    plan, blob = sp.prepare(run_dir, query["prompt"], tokens=50, temperature=0.0, seed=7).plan("emulated")
    assert got["plan"] == json.loads(json.dumps(plan))
    run = client.app.state.store.get(run_id)
    assert run.sampled is not None  # kept for the blob request
    assert client.get(url + "/blob", params=query).content == blob
    assert run.sampled is None  # and dropped once the page has the blob


def test_sample_settings_are_checked_in_one_line(client):
    """Bad settings or a prompt outside the vocabulary: 422 with `webmp sample`'s one-line message
    (the page shows it), for the plan and the blob; sampling needs a finished GPT run (409)."""
    run_id = finished_gpt_run(client)
    vocab = set(load_text(None).vocab)
    assert "\u2603" not in vocab and "\u00e6" not in vocab
    url = f"/api/runs/{run_id}/sample"
    bad = [
        ({"prompt": "x = '\u2603\u00e6'"}, "the prompt has 2 character(s) outside the run's vocabulary of"),
        ({"tokens": "0"}, "tokens must be a positive integer, got 0"),
        ({"tokens": "2001"}, "tokens must be at most 2000 on the page, got 2001"),
        ({"tokens": "ten"}, "tokens must be an integer, got 'ten'"),
        ({"tokens": ""}, "tokens must be an integer, got ''"),
        ({"temperature": "-1"}, "temperature must be a finite number >= 0, got -1.0"),
        ({"temperature": "nan"}, "temperature must be a finite number >= 0, got nan"),
        ({"temperature": "inf"}, "temperature must be a finite number >= 0, got inf"),
        ({"temperature": "warm"}, "temperature must be a number, got 'warm'"),
        ({"seed": "-1"}, "seed must be in 0 .. 2**32 - 1, got -1"),
        ({"seed": str(2**32)}, f"seed must be in 0 .. 2**32 - 1, got {2**32}"),
        ({"prompt": "x" * 2001}, "the prompt must be at most 2000 characters, got 2001"),
    ]
    for query, message in bad:
        for route in (url, url + "/blob"):
            r = client.get(route, params={"f16": "emulated", **query})
            detail = r.json()["detail"]
            assert r.status_code == 422 and isinstance(detail, str) and "\n" not in detail, (query, detail)
            assert message in detail, (query, detail)
    assert client.get(url, params={"f16": "emulated", "tokens": "2000"}).status_code == 200

    mlp = create(client)["id"]
    r = client.get(f"/api/runs/{mlp}/sample", params={"f16": "emulated"})
    assert r.status_code == 409 and "only a gpt run generates text" in r.json()["detail"]
    unfinished = create(client, **GPT)["id"]
    r = client.get(f"/api/runs/{unfinished}/sample", params={"f16": "emulated"})
    assert r.status_code == 409 and "is created; text is generated from a finished run" in r.json()["detail"]
    assert client.get("/api/runs/nope/sample", params={"f16": "emulated"}).status_code == 404


def test_data_files_are_refused_for_browser_runs(client, tmp_path):
    """A data path in POST /api/runs would let any client read a server file through the plan's blob."""
    secret = tmp_path / "secret.csv"
    secret.write_text("1,2,0\n3,4,1\n")
    before = sorted(p.name for p in client.app.state.store.root.glob("*"))
    r = client.post("/api/runs", json={**SMALL, "data": str(secret)})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "browser runs train on the built-in datasets" in detail and "webmp train" in detail
    assert str(secret) not in detail
    assert sorted(p.name for p in client.app.state.store.root.glob("*")) == before  # no run directory
    assert client.get("/api/runs").json() == []

    # nor is a run directory edited on disk to name a file served after a restart
    run = create(client)
    config_file = client.app.state.store.get(run["id"]).dir.path / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "data": str(secret)}))
    assert run["id"] not in RunStore(client.app.state.store.root).runs


def test_plan_for_each_f16_path(client):
    auto = create(client)["id"]
    for offer, path in (("native", "native"), ("emulated", "emulated")):
        got = client.get(f"/api/runs/{auto}/plan", params={"f16": offer}).json()
        assert got["f16_path"] == path and got["plan"]["f16_path"] == path and got["start_step"] == 0
        assert got["plan"]["prelude"] == f"prelude_{path}.wgsl"
        blob = client.get(f"/api/runs/{auto}/blob", params={"f16": offer}).content
        assert len(blob) == got["plan"]["blob_bytes"]
    fp32 = create(client, precision="fp32")["id"]
    assert client.get(f"/api/runs/{fp32}/plan", params={"f16": "native"}).json()["f16_path"] == "fp32"
    forced = create(client, f16="emulated")["id"]
    assert client.get(f"/api/runs/{forced}/plan", params={"f16": "native"}).json()["f16_path"] == "emulated"
    needs_native = create(client, f16="native")["id"]
    r = client.get(f"/api/runs/{needs_native}/plan", params={"f16": "emulated"})
    assert r.status_code == 409 and "shader-f16" in r.json()["detail"]
    assert client.get(f"/api/runs/{auto}/plan", params={"f16": "fast"}).status_code == 422


@pytest.mark.parametrize(
    "cfg",
    [
        dict(model="mlp"),
        dict(model="mlp-ln", hidden=[300, 100, 50], batch_size=33),
        dict(model="mlp", precision="fp32"),
        GPT,
        dict(GPT, tie_head=False, n_layer=3, d_model=96, n_head=3),
    ],
)
def test_the_size_estimate_matches_the_built_plan(cfg):
    cfg = TrainConfig(**cfg)
    data = training_data(cfg)
    for path in ("fp32",) if cfg.precision == "fp32" else ("native", "emulated"):
        plan, _ = build_plan(cfg, data, path)
        real = {b["name"]: b["bytes"] for b in plan["buffers"]}
        est = estimate_buffers(cfg, data, path)
        assert {n: real[n] for n in est} == est  # every estimated buffer exactly as built
        left_out = sum(real.values()) - sum(est.values())
        assert 0 <= left_out < 0.01 * sum(real.values()) and max(est.values()) == max(real.values())


def test_configs_too_big_for_a_page_or_the_server_are_refused(client):
    r = client.post("/api/runs", json={**SMALL, "hidden": [60000, 60000]})
    detail = r.json()["detail"]
    assert r.status_code == 422 and "W1" in detail and str(60000 * 60000 * 4) in detail, detail
    assert str(MAX_BUFFER_BYTES) in detail
    # every buffer under the binding limit, their total over the budget
    wide = {**SMALL, "hidden": [4096] * 16, "batch_size": 16}
    r = client.post("/api/runs", json=wide)
    detail = r.json()["detail"]
    assert r.status_code == 422 and str(MAX_PLAN_BYTES) in detail and "total" in detail, detail
    r = client.post("/api/runs", json={**GPT, "d_model": 8192, "n_head": 8})
    assert r.status_code == 422 and "MiB" in r.json()["detail"]
    assert client.get("/api/runs").json() == []  # nothing was created
    create(client)  # a normal config still is


def test_built_plans_are_held_for_a_few_runs_at_most(client):
    store = client.app.state.store
    ids = [create(client)["id"] for _ in range(MAX_CACHED_PLANS + 2)]
    for run_id in ids:
        for offer in ("native", "emulated"):
            assert client.get(f"/api/runs/{run_id}/blob", params={"f16": offer}).status_code == 200
    held = store.plans.keys()
    assert len(held) == MAX_CACHED_PLANS and held[-1] == (ids[-1], "emulated", None)
    assert all(k[0] in ids[-2:] for k in held)  # the least recently used went first
    # a dropped plan is built again when asked for
    first = client.get(f"/api/runs/{ids[0]}/plan", params={"f16": "native"})
    assert first.status_code == 200 and store.plans.keys()[-1] == (ids[0], "native", None)
    assert len(store.plans.keys()) == MAX_CACHED_PLANS


# --- the WebSocket --------------------------------------------------------------------------------


def test_records_are_stored_in_the_native_format(client):
    run_id = create(client)["id"]
    ws = connect(client, run_id)
    assert send(ws, hello(run_id, f16_path="fp32"))["type"] == "error"  # not this config's precision
    assert send(ws, hello(run_id))["type"] == "ack"
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "running"
    reply = send(ws, records_msg(run_id, range(10)))
    assert reply == {"type": "ack", "last_step": 9, "stored": 10, "duplicates": 0}
    run_dir = client.app.state.store.get(run_id).dir.path
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [record(s) for s in range(10)]
    assert list(json.loads(lines[0])) == [
        name for name, _ in METRIC_FIELDS
    ]  # same keys, same order as native
    config = json.loads((run_dir / "config.json").read_text())
    assert config["f16_path"] == "emulated" and "test" in config["adapter"]
    # a skipped step: the page sends non-finite floats as strings, and the file (strict JSON) too
    skipped = {**record(10), "loss": "Infinity", "grad_norm": "NaN", "skipped": 1}
    send(ws, {"type": "records", "run_id": run_id, "records": [skipped]})
    last = (run_dir / "metrics.jsonl").read_text().splitlines()[-1]
    assert last == json.dumps(skipped)
    back = RunDir(run_dir).read_metrics()[-1]
    assert back["loss"] == math.inf and math.isnan(back["grad_norm"])
    assert (
        client.get(f"/api/runs/{run_id}/metrics", params={"after": 9}).json()["records"][0]["grad_norm"]
        == "NaN"
    )
    leave(ws)


def test_malformed_or_oversized_messages_are_answered_and_dropped(client):
    run_id = create(client)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(3)))
    run_dir = client.app.state.store.get(run_id).dir.path
    before = (run_dir / "metrics.jsonl").read_bytes()
    good = record(3)
    bad_messages = [
        "not json at all",
        "[1, 2, 3]",
        json.dumps({"type": "records", "run_id": run_id}),  # no records
        json.dumps({"type": "records", "run_id": run_id, "records": []}),  # empty
        json.dumps({"type": "records", "run_id": run_id, "records": [{**good, "loss": "abc"}]}),
        json.dumps({"type": "records", "run_id": run_id, "records": [{**good, "step": -1}]}),
        json.dumps({"type": "records", "run_id": run_id, "records": [{**good, "step": 2**32}]}),
        json.dumps({"type": "records", "run_id": run_id, "records": [{**good, "step": 3.5}]}),
        json.dumps({"type": "records", "run_id": run_id, "records": [{**good, "extra": 1}]}),
        json.dumps(
            {"type": "records", "run_id": run_id, "records": [{k: v for k, v in good.items() if k != "loss"}]}
        ),
        json.dumps({"type": "records", "run_id": run_id, "records": [{**good, "step": 30}]}),  # past steps
        json.dumps({"type": "records", "run_id": "other-run", "records": [good]}),  # wrong run id
        json.dumps({"type": "records", "run_id": "../../etc", "records": [good]}),
        json.dumps({"type": "launch_missiles", "run_id": run_id}),
        json.dumps({"type": "records", "run_id": run_id, "records": [good], "pad": "x" * MAX_MESSAGE_BYTES}),
        json.dumps(records_msg(run_id, [3] * 501)),  # too many records
        json.dumps(
            {
                "type": "summary",
                "run_id": run_id,
                "state": {"scale": 1.0},
                "test_correct": 1,
                "test_count": 0,
                "wall_seconds": 1,
                "steps_run": 1,
                "readbacks": 1,
            }
        ),
    ]
    for text in bad_messages:
        ws.send_text(text)
        reply = receive_json(ws)
        assert reply["type"] == "error" and reply["message"], text[:80]
    ws.send_bytes(b"\x00\x01binary")
    assert receive_json(ws)["type"] == "error"
    assert (run_dir / "metrics.jsonl").read_bytes() == before  # nothing written, nothing corrupted
    assert send(ws, records_msg(run_id, [3]))["stored"] == 1  # the socket still works
    assert stored_steps(client, run_id) == [0, 1, 2, 3]
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "running"
    leave(ws)


@pytest.mark.slow  # ~1.3 s; test_reliability floods a real server in the slow tier too
def test_a_flooding_socket_is_closed_and_others_are_still_served(client):
    run_id = create(client)["id"]
    ws = connect(client, run_id)
    sent, closed = [0], []

    def flood() -> None:
        try:
            for _ in range(5 * int(WS_MESSAGE_BURST)):
                ws.send_text("{}")
                sent[0] += 1
            while True:  # the replies to what was read, then the close
                receive_json(ws)
        except WebSocketDisconnect as e:
            closed.append(e)

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    answered = 0
    while flooder.is_alive() and answered < 3:
        assert client.get("/api/info").status_code == 200  # served while the socket floods
        answered += 1
    flooder.join(timeout=30)
    assert not flooder.is_alive() and answered >= 1
    assert closed and closed[0].code == WS_RATE_CLOSE and "messages/s" in closed[0].reason, closed
    leave(ws)
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "created"
    ws = connect(client, run_id)  # a new socket starts with a full bucket
    assert send(ws, hello(run_id))["type"] == "ack"
    assert send(ws, records_msg(run_id, range(3)))["type"] == "ack"
    leave(ws)


class BufferedSocket:
    """A run socket whose client has sent all its frames before the server reads one: receive()
    returns at once without suspending, as a real socket's does while frames wait in its buffer."""

    def __init__(self, app, frames: list[str]):
        self.app, self.frames, self.sent = app, list(frames), []
        self.headers, self.cookies = {"host": "127.0.0.1:8000"}, {}

    async def accept(self) -> None:
        pass

    async def receive(self) -> dict:
        if not self.frames:
            return {"type": "websocket.disconnect", "code": 1000}
        return {"type": "websocket.receive", "text": self.frames.pop(0)}

    async def send_json(self, message) -> None:
        self.sent.append(message)

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.closed = code


def test_a_busy_socket_lets_other_requests_run_between_its_frames(client):
    """run_socket yields to the event loop after each frame. Without that, a client whose frames
    are already buffered keeps the server's one event loop until its burst is spent (receive,
    the reply and its disk write need not suspend), and every other request waits for all of it."""
    from webmp.serve.app import run_socket

    run_id = create(client)["id"]
    sock = BufferedSocket(client.app, ["{}"] * 200)  # malformed messages: each gets an error reply
    replies_when_others_ran: list[int] = []

    async def other_request():
        replies_when_others_ran.append(len(sock.sent))

    async def both():
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_socket, sock, run_id)
            tg.start_soon(other_request)

    # in a thread of its own: after the browser tests, this thread may already run an event loop
    # (Playwright's sync API), and anyio.run refuses to start another in it
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, both).result(timeout=60)
    assert len(sock.sent) == 201 and all(m["type"] == "error" for m in sock.sent[1:])
    assert replies_when_others_ran[0] <= 2, replies_when_others_ran  # the welcome and one reply at most


@pytest.mark.parametrize("policy", ["raise", "warn"])
def test_a_min_scale_event_ends_a_page_run_as_native_training_does(client, policy):
    """min_scale_policy raise: the records that hold an overflow at min_scale are stored, then the
    run fails with native `webmp train`'s words (and the page's own `failed` keeps them); warn goes on."""
    run_id = create(client, min_scale_policy=policy)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    event = {**record(6), "skipped": 1, "found_inf": 1, "min_scale_event": 1, "scale": 1.0}
    reply = send(
        ws, {"type": "records", "run_id": run_id, "records": [record(s) for s in range(6)] + [event]}
    )
    info = client.get(f"/api/runs/{run_id}").json()
    assert info["last_step"] == 6
    if policy == "warn":
        assert reply["type"] == "ack" and info["status"] == "running"
        leave(ws)
        return
    words = "loss scale collapse at step 6: gradients overflowed with the scale already at min_scale=1"
    assert reply["type"] == "error" and reply["message"].startswith(words), reply
    assert (
        send(ws, {"type": "failed", "run_id": run_id, "message": f"server: {reply['message']}"})["type"]
        == "ack"
    )
    info = client.get(f"/api/runs/{run_id}").json()
    assert info["status"] == "failed" and info[
        "message"
    ] == f"{words} (1 such step(s) in this interval); " + ("no checkpoint was uploaded yet")
    leave(ws)


def test_out_of_order_and_duplicate_records_are_stored_once_in_order(client):
    run_id = create(client)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    assert send(ws, records_msg(run_id, [7, 5, 6]))["stored"] == 0  # waiting for steps 0..4
    assert stored_steps(client, run_id) == []
    assert send(ws, records_msg(run_id, [2, 0, 1, 0]))["stored"] == 3  # 0 twice in one message
    reply = send(ws, records_msg(run_id, [4, 3, 6, 1, 8]))  # 6 and 1 again
    assert reply["stored"] == 6 and reply["duplicates"] == 2 and reply["last_step"] == 8
    assert send(ws, records_msg(run_id, range(9)))["duplicates"] == 9
    assert stored_steps(client, run_id) == list(range(9))
    # records held back for a gap are kept when the page leaves
    send(ws, records_msg(run_id, [12, 11]))
    leave(ws)
    assert stored_steps(client, run_id) == list(range(9)) + [11, 12]


def test_disconnect_keeps_records_and_a_new_page_resumes_from_the_checkpoint(client):
    run_id = create(client)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(15)))
    first_pass = client.get(f"/api/runs/{run_id}/metrics").json()["records"]
    upload = checkpoint_bytes(client, run_id, 10)
    url = f"/api/runs/{run_id}/checkpoint"
    assert client.put(url, params={"f16": "emulated", "step": 10}, content=upload[:-4]).status_code == 400
    assert (
        client.put(url, params={"f16": "emulated", "step": 10}, content=upload + b"\0" * 4).status_code == 413
    )
    assert client.put(url, params={"f16": "emulated", "step": 20}, content=upload).status_code == 400
    assert client.put(url, params={"f16": "emulated", "step": 10}, content=upload).json() == {
        "checkpoint_step": 10
    }
    leave(ws)  # the page goes away mid-run

    info = client.get(f"/api/runs/{run_id}").json()
    assert info["status"] == "disconnected" and info["checkpoint_step"] == 10
    assert "resume" in info["message"] and f"/?run={run_id}" in info["message"]
    assert stored_steps(client, run_id) == list(range(15))  # every record received is kept
    assert client.put(url, params={"f16": "emulated", "step": 10}, content=upload).status_code == 409

    # a new page gets the plan resumed from the checkpoint: its blob holds the checkpoint's state
    got = client.get(f"/api/runs/{run_id}/plan", params={"f16": "emulated"}).json()
    assert got["start_step"] == 10
    state = next(b for b in got["plan"]["buffers"] if b["name"] == got["plan"]["state"]["buffer"])
    blob = client.get(f"/api/runs/{run_id}/blob", params={"f16": "emulated"}).content
    assert (
        decode_state(blob[state["init"]["offset"] : state["init"]["offset"] + state["init"]["bytes"]])[
            "iteration"
        ]
        == 10
    )

    ws = connect(client, run_id)
    assert send(ws, hello(run_id, start_step=0))["type"] == "error"  # a stale plan is refused
    assert send(ws, hello(run_id, start_step=10))["type"] == "ack"
    assert stored_steps(client, run_id) == list(range(10))  # steps 10.. are sent again by the new page
    assert send(ws, records_msg(run_id, range(10, 30)))["stored"] == 20
    assert send(ws, summary_msg(run_id, 30))["type"] == "ack"
    leave(ws)

    records = client.get(f"/api/runs/{run_id}/metrics").json()["records"]
    assert [r["step"] for r in records] == list(range(30))
    assert records[:15] == first_pass  # the same curve, continued
    info = client.get(f"/api/runs/{run_id}").json()
    assert info["status"] == "finished"
    summary = client.get(f"/api/runs/{run_id}/summary").json()
    assert summary["test_accuracy"] == pytest.approx(300 / 359) and summary["steps"] == 30
    assert summary["f16_path"] == "emulated" and summary["runtime"] == "browser"
    run_dir = client.app.state.store.get(run_id).dir.path
    assert (run_dir / "curves.png").stat().st_size > 0 and (run_dir / "checkpoint.safetensors").is_file()
    ws = connect(client, run_id)
    assert send(ws, hello(run_id, start_step=10))["type"] == "error"  # finished runs stay finished
    leave(ws)


def test_server_restart_keeps_runs(tmp_path):
    with serving(create_app(tmp_path)) as c:
        run_id = create(c)["id"]
        ws = connect(c, run_id)
        send(ws, hello(run_id))
        send(ws, records_msg(run_id, range(5)))
        # a second server on the same directory sees what a restarted one would: a run left running
        with serving(create_app(tmp_path)) as restarted:
            info = restarted.get(f"/api/runs/{run_id}").json()
            assert info["status"] == "disconnected" and info["last_step"] == 4
            assert "restarted" in info["message"]
        leave(ws)


@pytest.mark.parametrize("block", [7, 1 << 16])
def test_repair_reads_only_the_tail(tmp_path, monkeypatch, block):
    """repair_metrics (run before every append) cuts a torn tail found by reading back from the end
    a block at a time, also when the torn part or the last whole line spans several blocks; it
    reads one byte of a file that ends in a newline (the whole file each time made appends
    quadratic in a run's length)."""
    from webmp.train import rundir

    monkeypatch.setattr(rundir, "REPAIR_BLOCK", block)
    run = RunDir(tmp_path / "run")
    run.append_metrics([{"step": s, "note": "x" * 40} for s in range(3)])
    whole = run.metrics_path.read_bytes()
    for torn in (b'{"step": 3, "lo', b"y" * 100, b"z"):
        with open(run.metrics_path, "ab") as f:
            f.write(torn)
        assert run.repair_metrics() == len(torn)
        assert run.metrics_path.read_bytes() == whole
    run.metrics_path.write_bytes(b"no newline at all")
    assert run.repair_metrics() == 17 and run.metrics_path.read_bytes() == b""
    run.metrics_path.write_bytes(whole * 100)  # many blocks
    reads: list[int] = []
    real_open = open

    def counting_open(*a, **kw):
        f = real_open(*a, **kw)
        real_read = f.read
        f.read = lambda n=-1: reads.append(n) or real_read(n)
        return f

    monkeypatch.setattr("builtins.open", counting_open)
    assert run.repair_metrics() == 0
    assert 0 < sum(reads) <= block, reads


def test_a_torn_metrics_line_is_reported_and_repaired(tmp_path, capsys):
    """A failed write (a full disk) leaves a torn last line: the server still starts, serves the
    whole records, says so once, and the run's next append cuts the torn bytes."""
    with serving(create_app(tmp_path)) as c:
        run_id = create(c)["id"]
        ws = connect(c, run_id)
        send(ws, hello(run_id))
        send(ws, records_msg(run_id, range(5)))
        leave(ws)
    metrics = tmp_path / run_id / "metrics.jsonl"
    whole = metrics.read_text()
    with open(metrics, "a") as f:
        f.write('{"step": 5, "loss": 0.1')  # torn mid-record
    capsys.readouterr()
    with serving(create_app(tmp_path)) as c:
        assert "metrics.jsonl ends in a torn line (23 bytes" in capsys.readouterr().err
        info = c.get(f"/api/runs/{run_id}").json()
        assert info["last_step"] == 4
        assert [r["step"] for r in c.get(f"/api/runs/{run_id}/metrics").json()["records"]] == list(range(5))
    run_dir = RunDir(tmp_path / run_id)
    run_dir.append_metrics([{"step": s} for s in range(5, 8)])  # what the run's next records do
    assert metrics.read_text().startswith(whole)
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == list(range(8))
    with open(metrics, "a") as f:  # damage in the middle is not a torn tail: the run is skipped
        f.write("garbage\n" + '{"step": 8}\n')
    with serving(create_app(tmp_path)) as c:
        assert "line 9 is not a JSON record" in capsys.readouterr().err
        assert c.get(f"/api/runs/{run_id}").status_code == 404
    assert "garbage" in metrics.read_text()  # nothing deleted


def test_two_runs_at_once_never_mix(client):
    a, b = create(client)["id"], create(client)["id"]
    wa, wb = connect(client, a), connect(client, b)
    send(wa, hello(a))
    send(wb, hello(b))
    for lo in range(0, 30, 5):  # interleaved, as two tabs would
        send(wa, records_msg(a, range(lo, lo + 5), loss=1.0))
        send(wb, records_msg(b, range(lo, lo + 5), loss=2.0))
    assert send(wa, records_msg(b, [0]))["type"] == "error"  # a's socket cannot write b's records
    for run_id, loss in ((a, 1.0), (b, 2.0)):
        recs = client.get(f"/api/runs/{run_id}/metrics").json()["records"]
        assert [r["step"] for r in recs] == list(range(30)) and {r["loss"] for r in recs} == {loss}
    # a second page for a run that already has one is refused
    with client.websocket_connect(f"ws://127.0.0.1/api/runs/{a}/ws") as ws2:
        assert receive_json(ws2)["type"] == "error"
        with pytest.raises(WebSocketDisconnect) as e:
            receive_json(ws2)
        assert e.value.code == 4409
    assert client.get(f"/api/runs/{a}").json()["status"] == "running"
    leave(wa)
    leave(wb)


# --- binding and the token ------------------------------------------------------------------------


def test_binding_elsewhere_needs_the_flag_and_a_token(capsys):
    assert server_token("127.0.0.1", False, None) is None
    assert server_token("::1", False, None) is None
    with pytest.raises(ValueError, match="--allow-remote"):
        server_token("0.0.0.0", False, None)
    assert cli_serve(["--host", "0.0.0.0", "--port", "0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    generated = server_token("0.0.0.0", True, None)
    assert generated and len(generated) >= 24 and generated != server_token("0.0.0.0", True, None)
    assert server_token("192.168.1.5", True, "given") == "given"


def test_token_is_required_by_api_and_websocket(tmp_path):
    """The API and the WebSocket take the token from `Authorization: Bearer` or the page's cookie,
    never from a query string (URLs end up in logs); the page's URL with ?token= is answered with a
    redirect to the same URL without it, setting the cookie (Jupyter's model)."""
    with serving(create_app(tmp_path, token="s3cret-token")) as c:
        assert c.get("/").status_code == 200  # the page itself is public
        assert c.get("/api/runs").status_code == 401
        assert c.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/api/runs", json=SMALL).status_code == 401
        ok = {"Authorization": "Bearer s3cret-token"}
        run_id = c.post("/api/runs", json=SMALL, headers=ok).json()["id"]
        plan = f"/api/runs/{run_id}/plan"
        assert c.get(plan, params={"f16": "emulated"}).status_code == 401
        assert c.get(plan, params={"f16": "emulated", "token": "s3cret-token"}).status_code == 401
        assert c.get(plan, params={"f16": "emulated"}, headers=ok).status_code == 200
        for query, headers in (
            ("", {}),
            ("?token=s3cret-token", {}),
            ("", {"Authorization": "Bearer wrong"}),
        ):
            with pytest.raises(WebSocketDisconnect) as e:
                with c.websocket_connect(
                    f"ws://127.0.0.1/api/runs/{run_id}/ws{query}", headers=headers
                ) as ws:
                    receive_json(ws)
            assert e.value.code == 4401
        with c.websocket_connect(f"ws://127.0.0.1/api/runs/{run_id}/ws", headers=ok) as ws:
            assert receive_json(ws)["type"] == "welcome"
        # the printed URL: a wrong token is refused; the right one becomes a cookie and leaves the URL
        assert c.get("/?token=wrong", follow_redirects=False).status_code == 401
        r = c.get(f"/?run={run_id}&token=s3cret-token", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == f"/?run={run_id}"
        cookie = r.headers["set-cookie"]
        assert "webmp_token=s3cret-token" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    with serving(create_app(tmp_path, token="s3cret-token")) as c:
        c.cookies.set("webmp_token", "s3cret-token")
        assert c.get(plan, params={"f16": "emulated"}).status_code == 200
        with c.websocket_connect(f"ws://127.0.0.1/api/runs/{run_id}/ws") as ws:
            assert receive_json(ws)["type"] == "welcome"


def test_websocket_from_another_site_or_host_is_refused(client):
    """Origin must be this server's own (not just equal to a Host the attacker also chooses), and
    Host one of its names (DNS rebinding)."""
    run_id = create(client)["id"]
    for url, origin in (
        (f"ws://127.0.0.1/api/runs/{run_id}/ws", "http://evil.example"),
        (f"ws://evil.example/api/runs/{run_id}/ws", "http://evil.example"),  # rebinding: both agree
        (f"ws://evil.example/api/runs/{run_id}/ws", None),
    ):
        with pytest.raises(WebSocketDisconnect) as e:
            with client.websocket_connect(url, headers={"origin": origin} if origin else {}) as ws:
                receive_json(ws)
        assert e.value.code == 4401, (url, origin)
    with client.websocket_connect(f"ws://127.0.0.1/api/runs/{run_id}/ws", headers={"origin": BASE}) as ws:
        assert receive_json(ws)["type"] == "welcome"


def test_dns_rebinding_cross_site_posts_and_big_bodies_are_refused(client):
    """Issue 9 items 2, 3, 5: a Host that is not the server's name gets 403 on every path; a POST
    from another Origin, or not JSON (a form or text/plain needs no CORS preflight), creates
    nothing; a body over MAX_JSON_BODY gets 413 from its Content-Length, before it is read, and
    without one once it passes the limit."""
    before = len(client.get("/api/runs").json())
    for path in ("/api/info", "/api/runs", "/"):
        r = client.get(path, headers={"host": "evil.example"})
        assert r.status_code == 403 and "DNS rebinding" in r.json()["detail"], path
    r = client.post("/api/runs", json={"steps": 5}, headers={"host": "evil.example:8000"})
    assert r.status_code == 403
    r = client.post("/api/runs", json={"steps": 5}, headers={"origin": "http://evil.example"})
    assert r.status_code == 403 and "another site" in r.json()["detail"]
    r = client.post("/api/runs", json={"steps": 5}, headers={"origin": "null"})
    assert r.status_code == 403
    r = client.post("/api/runs", content=b'{"steps": 5}', headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["detail"]
    big = b'{"steps": 5, "pad": "' + b"x" * MAX_JSON_BODY + b'"}'
    r = client.post("/api/runs", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413

    def chunks():
        yield big

    r = client.post("/api/runs", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413  # streamed without Content-Length
    assert len(client.get("/api/runs").json()) == before
    for host in ("127.0.0.1:8000", "localhost", "[::1]:9"):  # the loopback names, any port
        assert client.get("/api/info", headers={"host": host}).status_code == 200, host
    r = client.post("/api/runs", json={"steps": 5}, headers={"origin": BASE})  # the page itself
    assert r.status_code == 201


def test_request_refusal_rules():
    hosts = frozenset({"127.0.0.1", "localhost", "::1", "box.lan"})
    ok = {"host": "box.lan:8000", "origin": "http://box.lan:8000", "content-type": "application/json"}
    assert request_refusal("POST", ok, hosts) is None
    assert request_refusal("GET", {"host": "evil.example"}, None) is None  # wildcard bind: the token guards
    assert request_refusal("GET", {"host": "box.lan:8000", "origin": "http://box.lan:9000"}, hosts)[0] == 403
    assert request_refusal("POST", {**ok, "content-length": "x"}, hosts)[0] == 413
    assert (
        request_refusal("PUT", {"host": "localhost", "content-type": "application/octet-stream"}, hosts)
        is None
    )


def start_serve(tmp_path) -> tuple[subprocess.Popen, str, int]:
    """`webmp serve --port 0` in a subprocess: the process and the host and port of the URL it
    printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "webmp", "serve", "--port", "0", "--runs", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if "http://127.0.0.1:" not in line:
        proc.kill()
        pytest.fail(f"webmp serve printed {line!r}: {proc.communicate(timeout=10)[1]}")
    host, port = line.split("http://", 1)[1].split()[0].rstrip("/").split(":")
    return proc, host, int(port)


def get_info(host: str, port: int) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", "/api/info")
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_webmp_serve_binds_loopback_and_prints_the_url(tmp_path):
    proc, host, port = start_serve(tmp_path)
    try:
        assert get_info(host, port)[1]["token_required"] is False
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(
    "wait", [pytest.param(False, marks=pytest.mark.slow), True], ids=["at-once", "serving"]
)
def test_webmp_serve_ends_on_ctrl_c_with_one_line(tmp_path, wait):
    """SIGINT (Ctrl-C), right after the URL is printed or once requests are served: a one-line
    message, no traceback, exit status 0 (ending the server is what Ctrl-C is for)."""
    proc, host, port = start_serve(tmp_path)
    try:
        if wait:
            assert get_info(host, port)[0] == 200
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1] == "webmp serve: stopped (Ctrl-C)", err
    assert proc.returncode == 0


# --- the Python API, with a scripted page ----------------------------------------------------------


def test_python_api_streams_history_live(tmp_path):
    """history() yields each batch while the run is still going: the fake page only sends the next
    batch after the test has received the previous one."""
    from websockets.sync.client import connect as ws_connect

    with LocalServer(tmp_path) as srv:
        run = srv.create_run(TrainConfig(**SMALL))
        got_batch = [threading.Event() for _ in range(3)]
        page_error = []

        def page():
            try:
                with ws_connect(srv.url.replace("http", "ws") + f"/api/runs/{run.id}/ws") as ws:
                    ws.recv()
                    batches = [records_msg(run.id, range(lo, lo + 10)) for lo in (0, 10, 20)]
                    batches[1]["records"][5].update(grad_norm="NaN", skipped=1)  # as the page sends NaN
                    for msg in [hello(run.id)] + batches:
                        ws.send(json.dumps(msg))
                        assert json.loads(ws.recv())["type"] == "ack"
                        if msg["type"] == "records":
                            assert got_batch[msg["records"][0]["step"] // 10].wait(30)
                    ws.send(json.dumps(summary_msg(run.id, 30)))
                    ws.recv()
            except Exception as e:  # reported by the main thread
                page_error.append(e)

        threading.Thread(target=page, daemon=True).start()
        seen = []
        for rec in run.history(timeout=60):
            seen.append(rec)
            if rec["step"] % 10 == 9:
                assert run.status == "running"  # live: the run is not over yet
                got_batch[rec["step"] // 10].set()
        assert not page_error
        assert [r["step"] for r in seen] == list(range(30))
        assert math.isnan(seen[15]["grad_norm"]) and seen[15]["skipped"] == 1
        assert json.dumps(seen) == json.dumps(run.records())
        summary = run.wait(timeout=30)
        assert summary["test_correct"] == 300 and summary["steps"] == 30


@pytest.mark.parametrize("model", ["mlp", pytest.param("gpt", marks=pytest.mark.slow)])  # gpt: ~2 s
def test_browser_and_native_run_directories_have_the_same_keys(client, tmp_path, gpu, model):
    """summary.json and config.json are written by webmp.train.rundir for both runtimes: same keys, and
    the same ones set (the GPT's val_* figures, None for the MLP)."""
    from webmp.train.loop import Trainer
    from webmp.train.rundir import RunSummary

    cfg = {**SMALL, "steps": 3} if model == "mlp" else {**GPT, "steps": 3, "log_every": 1}
    run_id = create(client, **cfg)["id"]
    ws = connect(client, run_id)
    assert send(ws, hello(run_id))["type"] == "ack"
    send(ws, records_msg(run_id, range(3)))
    msg = summary_msg(run_id, 3)
    if model == "gpt":
        msg["val_loss_sum"] = 4.5 * msg["test_count"]
    assert send(ws, msg)["type"] == "ack"
    leave(ws)
    browser = client.app.state.store.get(run_id).dir
    Trainer(TrainConfig(**cfg), out=tmp_path / "native", gpu=gpu, progress=False, log=None).run()
    native = RunDir(tmp_path / "native")

    web, nat = browser.read_summary(), native.read_summary()
    assert set(web) == set(nat) == set(RunSummary.__required_keys__)  # data_parallel: under MPI only
    assert {k for k, v in web.items() if v is None} == {k for k, v in nat.items() if v is None}
    assert (web["val_loss"] is None) == (model == "mlp")
    assert web["unigram_bits_per_char"] == nat["unigram_bits_per_char"]  # the same corpus
    assert (web["runtime"], nat["runtime"]) == ("browser", "native")
    web_cfg, nat_cfg = browser.read_json("config.json"), native.read_json("config.json")
    assert set(web_cfg) == set(nat_cfg)
    assert web_cfg["data_sha256"] == nat_cfg["data_sha256"]  # the default corpus's; None for digits


def test_missing_chart_library_openapi_and_port(tmp_path, monkeypatch, capsys):
    """Without web/node_modules the chart library's paths are a 404 saying how to install it (not a
    500); the API schema sits under /api/, behind the token when one is set; `serve --port`
    outside 0-65535 is an argparse error naming the port, not a traceback."""
    import webmp.serve.app as server

    monkeypatch.setattr(server, "UPLOT_DIR", tmp_path / "missing")
    with serving(server.create_app(tmp_path / "runs")) as c:
        r = c.get("/vendor/uplot/uPlot.esm.js")
        assert r.status_code == 404 and "npm ci --prefix web" in r.json()["detail"]
    with serving(server.create_app(tmp_path / "runs", token="s3cret-token")) as c:
        assert c.get("/openapi.json").status_code == 404
        assert c.get("/api/openapi.json").status_code == 401
        auth = {"authorization": "Bearer s3cret-token"}
        assert "/api/runs" in c.get("/api/openapi.json", headers=auth).json()["paths"]
    for port in ("99999", "-1", "http"):
        with pytest.raises(SystemExit):
            cli_serve(["--port", port])
        assert f"a port is a number from 0 to 65535, got '{port}'" in capsys.readouterr().err


def test_symbolic_links_in_the_runs_directory_are_not_followed(tmp_path, capsys):
    """A run directory that is a link, or holds one in place of a run file, is not served (its
    reads and writes could reach outside the runs directory); appending through a link is refused."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not touch\n")
    runs = tmp_path / "runs"
    with serving(create_app(runs)) as c:
        a, b = create(c)["id"], create(c)["id"]
    (runs / a / "metrics.jsonl").unlink(missing_ok=True)
    (runs / a / "metrics.jsonl").symlink_to(outside / "secret.txt")
    (runs / "linked").symlink_to(runs / b)
    capsys.readouterr()
    with serving(create_app(runs)) as c:
        err = capsys.readouterr().err
        assert f"skipping {runs / a}: symbolic links are not followed (metrics.jsonl)" in err
        assert f"skipping {runs / 'linked'}: symbolic links are not followed (linked)" in err
        ids = {r["id"] for r in c.get("/api/runs").json()}
        assert ids == {b}
    with pytest.raises(OSError, match="symbolic link"):
        RunDir(runs / a).append_metrics([{"step": 0}])
    assert (outside / "secret.txt").read_text() == "do not touch\n"


def test_deep_json_and_implausible_page_messages_are_refused(client):
    """Issue 9 item 12: JSON nested past the parser's depth is a 422 / an error reply (no 500, the
    socket stays open); a summary with more correct than counted, a record with a finite value no
    f32 holds, and a checkpoint for the other f16 path are refused and change nothing."""
    deep = "[" * 100_000 + "]" * 100_000
    r = client.post("/api/runs", content=deep.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422
    run_id = create(client)["id"]
    ws = connect(client, run_id)
    ws.send_text('{"type": "records", "run_id": "' + run_id + '", "records": ' + deep + "}")
    reply = receive_json(ws)
    assert reply["type"] == "error" and "nested too deeply" in reply["message"]
    send(ws, hello(run_id))  # the socket is still served
    reply = send(ws, {"type": "records", "run_id": run_id, "records": [{**record(0), "scale": 1e300}]})
    assert reply["type"] == "error" and "f32" in reply["message"]
    send(ws, records_msg(run_id, range(30)))
    reply = send(ws, {**summary_msg(run_id, 30), "test_correct": 11, "test_count": 10})
    assert reply["type"] == "error" and "exceeds test_count" in reply["message"]
    r = client.put(f"/api/runs/{run_id}/checkpoint", params={"f16": "native", "step": 10}, content=b"\0" * 64)
    assert r.status_code == 400 and "f16 path" in r.json()["detail"]  # the run trains on emulated
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "running"
    leave(ws)


@pytest.mark.slow  # whole runs and their curves.png (~2 s)
def test_runs_finishing_at_once_plot_their_curves(tmp_path):
    """Found by scripts/reliability.py: pages finishing together plot on the server's worker threads,
    and matplotlib's mathtext parser (log-axis tick labels) is not thread-safe: without
    rundir.PLOT_LOCK most of these raised ParseException, dropping the page's socket (a 1006 close)."""
    errors: list[BaseException] = []

    def finish(i: int) -> None:
        d = RunDir(tmp_path / f"run{i}")
        d.append_metrics([record(s) for s in range(40)])
        try:
            d.plot_curves(f"run {i}")
        except BaseException as e:  # collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all((tmp_path / f"run{i}" / "curves.png").is_file() for i in range(6))


# --- the runs panel: native runs listed, followers, stop requests, downsampled metrics ----------


def write_native_run(root, name: str, steps: int, finished: bool, age_s: float = 0.0) -> RunDir:
    """A run directory as `webmp train --out root/name` writes it (no GPU: made-up records); a run
    without summary.json whose files are `age_s` seconds old."""
    import os
    import time

    from webmp.train.rundir import run_summary

    cfg = TrainConfig(**SMALL, precision="fp32")
    rd = RunDir(root / name)
    rd.write_config(cfg, f16_path="fp32", adapter="test adapter", runtime="native")
    rd.append_metrics([record(s) for s in range(steps)])
    if finished:
        summary = run_summary(
            cfg, rd.read_metrics(), state_words(steps), test_correct=7, test_count=10,
            f16_path="fp32", f16_description="fp32", adapter="test adapter", runtime="native",
            matmul_tiles="default", memory={}, wall_seconds=1.0, steps_run=steps, readbacks=3,
            run_dir=rd.path,
        )  # fmt: skip
        rd.write_summary(summary)
    if age_s:
        then = time.time() - age_s
        for f in rd.path.iterdir():
            os.utime(f, (then, then))
    return rd


def test_runs_list_native_runs_read_only_beside_browser_runs(client, tmp_path):
    root = tmp_path / "runs"
    browser_run = create(client)
    write_native_run(root, "run-native-done", steps=30, finished=True)
    write_native_run(root, "run-native-cut", steps=12, finished=False, age_s=3600)
    write_native_run(root, "run-native-live", steps=5, finished=False)
    (root / "not a run id").mkdir()
    (root / "not a run id" / "config.json").write_text("{}")
    listed = {r["id"]: r for r in client.get("/api/runs").json()}  # written after the server started
    assert set(listed) == {browser_run["id"], "run-native-done", "run-native-cut", "run-native-live"}
    assert listed[browser_run["id"]]["kind"] == "browser" and listed[browser_run["id"]]["final_loss"] is None
    done, cut, live = (listed[f"run-native-{n}"] for n in ("done", "cut", "live"))
    assert (done["kind"], done["status"], done["last_step"], done["records"]) == (
        "native",
        "finished",
        29,
        30,
    )
    assert done["final_loss"] == record(29)["loss"] and done["config"]["precision"] == "fp32"
    assert cut["status"] == "stopped" and "webmp train --resume" in cut["message"]
    assert (
        not cut["resumable"] and not listed[browser_run["id"]]["resumable"]
    )  # native; created, never trained
    assert live["status"] == "running" and live["last_step"] == 4
    # its records and summary are served like a browser run's, downsampled too
    got = client.get("/api/runs/run-native-done/metrics", params={"max_points": 4}).json()
    assert [r["step"] for r in got["records"]] == [0, 10, 20, 29]
    summary = client.get("/api/runs/run-native-done/summary").json()
    assert summary == json.loads((root / "run-native-done" / "summary.json").read_text())
    assert client.get("/api/runs/run-native-cut/summary").status_code == 404
    # but nothing trains or changes it here
    for r in (
        client.get("/api/runs/run-native-cut/plan", params={"f16": "emulated"}),
        client.post("/api/runs/run-native-live/stop", json={}),
    ):
        assert r.status_code == 409 and "read-only" in r.json()["detail"], r.text
    with client.websocket_connect("ws://127.0.0.1/api/runs/run-native-cut/ws") as ws:
        assert "read-only" in receive_json(ws)["message"]
        with pytest.raises(WebSocketDisconnect) as closed:
            receive_json(ws)
        assert closed.value.code == 4409


def follow(client, run_id):
    ws = client.websocket_connect(f"ws://127.0.0.1/api/runs/{run_id}/follow")
    ws.__enter__()
    OPEN_SOCKETS.append(ws)
    return ws


def test_followers_get_the_backlog_then_live_records_and_can_ask_for_a_stop(client):
    run_id = create(client, steps=1000)["id"]
    page = connect(client, run_id)
    send(page, hello(run_id))
    send(page, records_msg(run_id, range(500)))
    send(page, records_msg(run_id, range(500, 700)))  # followers get the backlog in chunks of 500
    a, b = follow(client, run_id), follow(client, run_id)
    for viewer in (a, b):
        first, second = receive_json(viewer), receive_json(viewer)
        assert [r["step"] for r in first["records"] + second["records"]] == list(range(700))
        assert first["records"][3] == record(3)
        status = receive_json(viewer)
        assert status == {
            "type": "status", "status": "running", "message": "", "last_step": 699, "stop_requested": False,
            "connected": True,
        }  # fmt: skip
    send(page, records_msg(run_id, range(700, 710)))  # what the page posts reaches every viewer
    for viewer in (a, b):
        assert [r["step"] for r in receive_json(viewer)["records"]] == list(range(700, 710))
    leave(b)  # one viewer leaves; the other is still served
    send(page, records_msg(run_id, [710]))
    assert [r["step"] for r in receive_json(a)["records"]] == [710]

    # a viewer's Stop: the server asks the training page in its next ack; the page then stops
    assert client.post(f"/api/runs/{run_id}/stop", json={}).json()["stop_requested"] is True
    assert receive_json(a)["stop_requested"] is True
    assert send(page, records_msg(run_id, [711]))["stop"] is True
    assert [r["step"] for r in receive_json(a)["records"]] == [711]
    send(page, {"type": "stopped", "run_id": run_id, "step": 712})
    ended = receive_json(a)
    assert ended["status"] == "stopped" and ended["last_step"] == 711 and not ended["stop_requested"]
    assert client.get(f"/api/runs/{run_id}").json()["resumable"] is True  # the page offers Resume
    with pytest.raises(WebSocketDisconnect) as closed:
        receive_json(a)
    assert closed.value.code == 1000
    leave(a)
    leave(page)
    assert client.post(f"/api/runs/{run_id}/stop", json={}).status_code == 409  # not running
    # a viewer of an ended run gets its records and status, then the socket closes
    late = follow(client, run_id)
    assert len(receive_json(late)["records"]) == 500
    assert len(receive_json(late)["records"]) == 212
    assert receive_json(late)["status"] == "stopped"
    leave(late)
    with client.websocket_connect("ws://127.0.0.1/api/runs/nope/follow") as ws:
        assert receive_json(ws) == {"type": "error", "message": "no run 'nope'"}


def test_metrics_are_downsampled_on_request_with_bounds(client):
    from webmp.serve.native_runs import downsample

    records = [{"step": s} for s in range(1001)]
    assert [r["step"] for r in downsample(records, 11)] == list(range(0, 1001, 100))
    assert [r["step"] for r in downsample(records, 3)] == [0, 500, 1000]
    assert [r["step"] for r in downsample(records[:1000], 3)] == [0, 500, 999]
    assert downsample(records[:5], 5) == records[:5]
    for n in (2, 7, 999, 1000):
        got = downsample(records, n)
        assert len(got) <= n and got[0] is records[0] and got[-1] is records[-1]
    run_id = create(client)["id"]
    page = connect(client, run_id)
    send(page, hello(run_id))
    send(page, records_msg(run_id, range(30)))
    url = f"/api/runs/{run_id}/metrics"
    got = client.get(url, params={"max_points": 7}).json()["records"]
    assert [r["step"] for r in got] == [0, 5, 10, 15, 20, 25, 29] and got[1] == record(5)
    assert len(client.get(url, params={"max_points": 100}).json()["records"]) == 30
    after = client.get(url, params={"max_points": 2, "after": 19}).json()["records"]
    assert [r["step"] for r in after] == [20, 29]
    for bad in ("1", "100001", "many"):
        r = client.get(url, params={"max_points": bad})
        assert r.status_code == 422 and "max_points" in json.dumps(r.json()["detail"]), r.text
    leave(page)


def test_a_native_run_is_followed_as_its_files_grow(client, tmp_path, monkeypatch):
    from webmp.serve import native_runs as runs_index

    monkeypatch.setattr(runs_index, "NATIVE_POLL_S", 0.01)
    rd = write_native_run(tmp_path / "runs", "run-native-live", steps=5, finished=False)
    viewer = follow(client, "run-native-live")
    assert [r["step"] for r in receive_json(viewer)["records"]] == list(range(5))
    assert receive_json(viewer)["status"] == "running"
    rd.append_metrics([record(s) for s in range(5, 9)])  # what `webmp train` appends as it goes
    assert [r["step"] for r in receive_json(viewer)["records"]] == list(range(5, 9))
    finished = write_native_run(tmp_path / "done", "x", steps=9, finished=True).read_summary()
    rd.write_summary(finished)
    assert receive_json(viewer)["status"] == "finished"
    leave(viewer)


def test_followers_of_a_created_run_see_a_page_take_it_and_leave(client):
    run_id = create(client)["id"]
    viewer = follow(client, run_id)
    assert receive_json(viewer)["connected"] is False
    page = connect(client, run_id)
    assert client.get(f"/api/runs/{run_id}").json()["connected"] is True
    got = receive_json(viewer)
    assert (got["status"], got["connected"]) == ("created", True)  # a page is preparing it
    leave(page)
    got = receive_json(viewer)
    assert (got["status"], got["connected"]) == ("created", False)  # it left before its hello
    leave(viewer)


@pytest.mark.slow  # a real server (uvicorn over TCP), 40 000 records
def test_a_follower_that_reads_nothing_never_holds_back_the_training_page(tmp_path):
    """Over real sockets: a follower whose client stops reading (its queue holds 2 messages, then
    TCP pushes back) while the page posts 40 000 records. Every one of the page's messages is
    acknowledged meanwhile, and the follower, once it reads again, catches up on every record in
    order, then gets the end."""
    from websockets.sync.client import connect as ws_connect

    with LocalServer(tmp_path) as srv:
        run_id = srv.create_run(TrainConfig(**{**SMALL, "steps": 40_000})).id
        base = srv.url.replace("http://", "ws://") + f"/api/runs/{run_id}"
        with ws_connect(f"{base}/follow", max_queue=2, max_size=None) as viewer:
            with ws_connect(f"{base}/ws", max_size=None) as page:
                assert json.loads(page.recv(timeout=30))["type"] == "welcome"
                page.send(json.dumps(hello(run_id)))
                assert json.loads(page.recv(timeout=30))["type"] == "ack"
                for start in range(0, 40_000, 500):
                    page.send(json.dumps(records_msg(run_id, range(start, start + 500))))
                    ack = json.loads(page.recv(timeout=30))
                    assert ack["last_step"] == start + 499, ack
                page.send(json.dumps({"type": "stopped", "run_id": run_id, "step": 40_000}))
                assert json.loads(page.recv(timeout=30))["type"] == "ack"
            steps, statuses = [], []
            for raw in viewer:
                msg = json.loads(raw)
                if msg["type"] == "records":
                    steps += [r["step"] for r in msg["records"]]
                else:
                    statuses.append(msg["status"])
    assert steps == list(range(40_000))
    assert statuses[0] == "created" and statuses[-1] == "stopped"


def test_a_runs_last_gradient_histograms_are_served_with_their_shares(client):
    """GET /api/runs/{id}/histograms: the last line of histograms.jsonl with each layer's shares
    against f16's range, stored and unscaled (what a page shows for a run it did not train); 404
    before the first read; a damaged file is reported (409), not served or rewritten."""
    from webmp.train.rundir import histogram_line, histogram_shares

    run_id = create(client)["id"]
    assert client.get(f"/api/runs/{run_id}/histograms").status_code == 404
    run_dir = client.app.state.store.get(run_id).dir
    e_min, e_max = -48, 20
    counts = [0] * (e_max - e_min + 5)
    counts[2 + (-20 - e_min)] = 7  # 7 values in [2^-20, 2^-19): stored fine, unscaled (÷ 2^10) below 2^-24
    counts[0] = 3
    run_dir.append_histograms(
        histogram_line(9, 65536.0, e_min, e_max, [("dZ0", [1] + [0] * (len(counts) - 1))])
    )
    run_dir.append_histograms(histogram_line(19, 1024.0, e_min, e_max, [("dZ0", counts)]))
    r = client.get(f"/api/runs/{run_id}/histograms")
    assert r.status_code == 200, r.text
    view = r.json()
    assert (view["step"], view["scale"], view["reads"]) == (19, 1024.0, 2)
    (layer,) = view["layers"]
    assert layer["counts"] == counts and layer["name"] == "dZ0"
    assert layer["stored"] == histogram_shares(counts, e_min, e_max)
    assert layer["unscaled"]["underflow"] == pytest.approx(0.7) and layer["stored"]["underflow"] == 0.0
    assert view["f16_range"] == {"subnormal_min": 2.0**-24, "normal_min": 2.0**-14, "max": 65504.0}
    path = run_dir.path / "histograms.jsonl"
    path.write_bytes(b"{not json\n" + path.read_bytes())
    r = client.get(f"/api/runs/{run_id}/histograms")
    assert r.status_code == 409 and "line 1" in r.json()["detail"]
    assert path.read_bytes().startswith(b"{not json\n")
