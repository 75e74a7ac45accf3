"""The runs panel's server side: native runs listed read-only beside browser runs, followers (the
backlog, live records, stop requests, a created run taken and left, a slow follower), downsampled
metrics and a run's last gradient histograms."""

from __future__ import annotations

import json

import pytest
from starlette.websockets import WebSocketDisconnect

from tests.serve.helpers import (
    OPEN_SOCKETS,
    SMALL,
    connect,
    create,
    hello,
    leave,
    receive_json,
    record,
    records_msg,
    send,
    state_words,
)
from webmp.config import TrainConfig
from webmp.serve.client import LocalServer
from webmp.train.rundir import RunDir


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
    first = client.get(f"/api/runs/{run_id}/histograms", params={"read": 0}).json()  # the slider's reads
    assert (first["step"], first["scale"], first["reads"], first["layers"][0]["stored"]["zero"]) == (
        9,
        65536.0,
        2,
        1.0,
    )
    assert client.get(f"/api/runs/{run_id}/histograms", params={"read": 1}).json() == view
    r = client.get(f"/api/runs/{run_id}/histograms", params={"read": 2})
    assert r.status_code == 404 and "2 gradient histogram reads (0 .. 1)" in r.json()["detail"]
    assert client.get(f"/api/runs/{run_id}/histograms", params={"read": -1}).status_code == 422
    path = run_dir.path / "histograms.jsonl"
    path.write_bytes(b"{not json\n" + path.read_bytes())
    r = client.get(f"/api/runs/{run_id}/histograms")
    assert r.status_code == 409 and "line 1" in r.json()["detail"]
    assert path.read_bytes().startswith(b"{not json\n")
