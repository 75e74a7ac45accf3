"""What the server's tests share: small configs, the page's messages (hello, records, summary),
a TestClient that closes the sockets a failed test left open, and a stand-in page's socket
(connect, send, receive_json with a bound, leave). tests/serve/conftest.py makes `client` of them."""

from __future__ import annotations

import contextlib
import json

import anyio
import pytest
from fastapi.testclient import TestClient

from webmp.engine.state import METRIC_FIELDS, STATE_FIELDS, decode_state, encode_state
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
