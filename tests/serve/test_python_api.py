"""The Python API with a scripted page (LocalServer, history()), browser and native run directories
alike, and the edge cases found since: a missing chart library, symbolic links in the runs
directory, deep JSON and implausible messages, runs finishing at once."""

from __future__ import annotations

import json
import math
import threading

import pytest

from tests.serve.helpers import (
    GPT,
    SMALL,
    connect,
    create,
    hello,
    leave,
    receive_json,
    record,
    records_msg,
    send,
    serving,
    summary_msg,
)
from webmp.config import TrainConfig
from webmp.serve.app import create_app
from webmp.serve.cli import cli_serve
from webmp.serve.client import LocalServer
from webmp.train.rundir import RunDir


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
    # data_parallel: under MPI only; attention: a model with attention
    keys = set(RunSummary.__required_keys__) | ({"attention"} if model == "gpt" else set())
    assert set(web) == set(nat) == keys
    assert web.get("attention") == nat.get("attention")
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
