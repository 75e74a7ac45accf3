"""The run WebSocket, a test standing in for the page (webmp/serve/messages.py): records stored in
the native format, malformed and oversized messages, rate limits, min-scale events, record
ordering, disconnect + resume, server restarts, torn metrics lines and concurrent runs."""

from __future__ import annotations

import concurrent.futures
import json
import math
import threading

import anyio
import pytest
from starlette.websockets import WebSocketDisconnect

from tests.serve.helpers import (
    checkpoint_bytes,
    connect,
    create,
    hello,
    leave,
    receive_json,
    record,
    records_msg,
    send,
    serving,
    stored_steps,
    summary_msg,
)
from webmp.engine.state import METRIC_FIELDS, decode_state
from webmp.serve.app import create_app
from webmp.serve.messages import MAX_MESSAGE_BYTES
from webmp.serve.security import WS_MESSAGE_BURST, WS_RATE_CLOSE
from webmp.train.rundir import RunDir


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
    from webmp.serve.sockets import run_socket

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


def test_a_diverged_run_ends_failed_saying_where(client):
    """A page run whose training loss turned NaN ends `failed` at its summary (kept, with its curves),
    the message naming the first such step, rather than `finished` (a native run directory alike)."""
    from webmp.train.rundir import divergence

    run_id = create(client, steps=12)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    assert send(ws, records_msg(run_id, range(7)))["type"] == "ack"
    assert send(ws, records_msg(run_id, range(7, 12), loss="NaN"))["stored"] == 5
    assert send(ws, summary_msg(run_id, 12))["type"] == "ack"
    leave(ws)
    info = client.get(f"/api/runs/{run_id}").json()
    assert info["status"] == "failed", info
    assert info["message"].startswith("diverged: the training loss is NaN at step 7"), info["message"]
    assert client.get(f"/api/runs/{run_id}/summary").status_code == 200
    run_dir = client.app.state.store.get(run_id).dir.path
    assert (run_dir / "curves.png").is_file()
    assert divergence([{"step": 3, "loss": float("inf")}]).startswith(
        "diverged: the training loss is infinite at step 3"
    )
    assert divergence([{"step": 0, "loss": 1.0}]) is None
