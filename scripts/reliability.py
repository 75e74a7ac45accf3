#!/usr/bin/env python3
"""Measure webmp's reliability for real and write docs/reliability.md.

    python scripts/reliability.py            # the full report, docs/reliability.md
    python scripts/reliability.py --quick    # fewer cases, runs and steps (tests/train/test_reliability.py)
    python scripts/reliability.py --out PATH

Everything runs on this machine against the real code paths: `webmp train` and `webmp serve`
subprocesses (loopback only, 127.0.0.1), httpx for REST, the websockets library for the page's
socket. Every loop is bounded in count and in time. Sections:

  a. bad inputs tried and refused (CLI flags, REST requests, WebSocket frames, damaged checkpoints)
  b. concurrent runs and clients held (each run stores exactly its own steps)
  c. records/s and ingest latency (send -> ack) under that load
  d. server memory before / after a flood (one socket closed by the rate limiter, many plan fetches)
  e. kill points survived (kill -9 of `webmp train` and of the server; resume bit-identical)
  f. the shared tune cache (writers and tuning passes at once, writers killed, a damaged file)

`--json PATH` also writes every figure as JSON (tests/train/test_reliability.py reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import websockets
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webmp.engine.state import METRIC_FIELDS, STATE_FIELDS  # noqa: E402
from webmp.train.rundir import RunDir  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
WEBMP = [sys.executable, "-m", "webmp"]
TINY = ["--hidden", "16", "--batch-size", "8", "--warmup", "2", "--log-every", "5", "--quiet"]
SERVER_RUN = {"hidden": [16], "batch_size": 16, "log_every": 10, "checkpoint_every": 0}
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


# --- helpers -----------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of values (statistics.quantiles, inclusive method)."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[min(98, max(0, round(q) - 1))]


def ms(x: float) -> str:
    return f"{1000 * x:.1f}"


def record(step: int, loss: float) -> dict[str, Any]:
    values = {
        "step": step,
        "loss": loss,
        "scale": 65536.0,
        "skipped": 0,
        "lr": 1e-3,
        "grad_norm": 0.5,
        "found_inf": 0,
        "min_scale_event": 0,
    }
    return {name: values[name] for name, _ in METRIC_FIELDS}


def hello(run_id: str, start_step: int = 0) -> dict[str, Any]:
    return {
        "type": "hello",
        "run_id": run_id,
        "f16_path": "emulated",
        "start_step": start_step,
        "adapter": {"vendor": "reliability", "architecture": "script"},
        "features": [],
        "limits": {"maxBufferSize": 2**30},
    }


def summary_msg(run_id: str, iteration: int) -> dict[str, Any]:
    words: dict[str, Any] = {name: (0.0 if kind == "f32" else 0) for name, kind in STATE_FIELDS}
    words.update(scale=65536.0, iteration=iteration, opt_step=iteration, loss=0.25)
    return {
        "type": "summary",
        "run_id": run_id,
        "state": words,
        "test_correct": 300,
        "test_count": 359,
        "wall_seconds": 1.0,
        "steps_run": iteration,
        "readbacks": 1,
    }


def run_cli(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(WEBMP + args, env=ENV, capture_output=True, text=True, timeout=timeout)


def clean_cli_refusal(p: subprocess.CompletedProcess[str]) -> tuple[bool, bool, str]:
    """(refused cleanly, traceback, the message): a non-zero exit whose stderr ends in one
    `webmp train: ...` line, without a Python traceback."""
    err = p.stderr.strip()
    last = err.splitlines()[-1] if err else ""
    tb = bool(TRACEBACK.search(p.stderr))
    return p.returncode > 0 and not tb and last.startswith("webmp train:"), tb, last


class Server:
    """A `webmp serve --port 0` subprocess; its stderr goes to a log file scanned for tracebacks."""

    def __init__(self, runs: Path, log: Path):
        self.log = log
        self.errf = open(log, "a")
        self.proc = subprocess.Popen(
            WEBMP + ["serve", "--port", "0", "--runs", str(runs)],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=self.errf,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in self.proc.stdout or []], daemon=True).start()
        deadline = time.monotonic() + 60
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise RuntimeError(f"webmp serve printed no URL in 60 s; see {log}") from None
            m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            if m:
                self.port = int(m.group(1))
                break
        self.base = f"http://127.0.0.1:{self.port}"
        self.ws_base = f"ws://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.base, timeout=30)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return -1

    def tracebacks(self) -> int:
        if not self.errf.closed:
            self.errf.flush()
        return len(TRACEBACK.findall(self.log.read_text(errors="replace")))

    def create_run(self, **cfg: Any) -> str:
        r = self.http.post("/api/runs", json={**SERVER_RUN, **cfg})
        r.raise_for_status()
        return str(r.json()["id"])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.http.close() if hasattr(self, "http") else None
        self.errf.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.http.close()
        self.errf.close()


# --- a. bad inputs -----------------------------------------------------------------------------

CLI_CASES: list[tuple[str, list[str]]] = [
    ("--init-scale 1e39 (beyond f32)", ["--init-scale", "1e39"]),
    ("--steps 4294967297 (beyond u32)", ["--steps", "4294967297"]),
    ("--lr 1e39", ["--lr", "1e39"]),
    ("--warmup -1", ["--warmup", "-1"]),
    ("--lr nan", ["--lr", "nan"]),
    ("--lr inf", ["--lr", "inf"]),
    ("--lr 0", ["--lr", "0"]),
    ("--steps 0", ["--steps", "0"]),
    ("--batch-size 0", ["--batch-size", "0"]),
    ("--hidden 0", ["--hidden", "0"]),
    ("--hidden 70000 (beyond 2^16)", ["--hidden", "70000"]),
    ("--hidden abc", ["--hidden", "abc"]),
    ("--eps 0", ["--eps", "0"]),
    ("--eps 1e-40 (f32 subnormal)", ["--eps", "1e-40"]),
    ("--beta1 1", ["--beta1", "1"]),
    ("--beta2 0.99999999 (rounds to 1 in f32)", ["--beta2", "0.99999999"]),
    ("--seed -1", ["--seed", "-1"]),
    ("--seed 4294967296", ["--seed", "4294967296"]),
    ("--backoff-factor 1", ["--backoff-factor", "1"]),
    ("--growth-factor 1", ["--growth-factor", "1"]),
    ("--growth-interval 0", ["--growth-interval", "0"]),
    ("--min-lr 1 (above lr)", ["--min-lr", "1"]),
    ("--min-scale 1e6 (above init-scale)", ["--min-scale", "1e6"]),
    ("--clip-norm -1", ["--clip-norm", "-1"]),
    ("--weight-decay inf", ["--weight-decay", "inf"]),
    ("--checkpoint-every -5", ["--checkpoint-every", "-5"]),
    ("--log-every 100000", ["--log-every", "100000"]),
    ("--steps 1.5", ["--steps", "1.5"]),
    ("--model foo", ["--model", "foo"]),
    ("--precision bf16", ["--precision", "bf16"]),
    (
        "--batch-size 2^21 x steps 3000 (data position past u32)",
        ["--batch-size", "2000000", "--steps", "3000"],
    ),
    ("gpt: --d-model 30 --n-head 4 (odd head size)", ["--model", "gpt", "--d-model", "30", "--n-head", "4"]),
    ("--no-such-flag", ["--no-such-flag", "1"]),
    ("--data ''", ["--data", ""]),
    ("--data /nonexistent.npz", ["--data", "/nonexistent/x.npz"]),
]
QUICK_CLI = 10


def cli_file_cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """Cases needing files: a damaged data file, a directory as data, an existing run as --out."""
    bad_npz = tmp / "bad.npz"
    bad_npz.write_bytes(b"PK\x03\x04 not really a zip")
    bad_csv = tmp / "bad.csv"
    bad_csv.write_text("1,2,x\n3,4,5\n")
    existing = tmp / "existing"
    existing.mkdir(exist_ok=True)
    (existing / "metrics.jsonl").write_text("{}\n")
    afile = tmp / "afile"
    afile.write_text("x")
    return [
        ("--data a damaged .npz", ["--data", str(bad_npz)]),
        ("--data a .csv with text in it", ["--data", str(bad_csv)]),
        ("--data a directory", ["--data", str(tmp)]),
        ("--out an existing run directory", ["--out", str(existing)]),
        ("--out under a regular file", ["--out", str(afile / "run")]),
        ("--resume a directory without a checkpoint", ["--resume", str(tmp / "nothing")]),
    ]


def bad_cli(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    cases = CLI_CASES[:QUICK_CLI] if quick else CLI_CASES + cli_file_cases(tmp)

    def one(i_case: tuple[int, tuple[str, list[str]]]) -> dict[str, Any]:
        i, (name, flags) = i_case
        out = ["--out", str(tmp / f"cli{i}")] if "--out" not in flags and "--resume" not in flags else []
        p = run_cli(["train", *TINY, "--steps", "20", *out, *flags])
        ok, tb, last = clean_cli_refusal(p)
        return {"case": name, "refused": ok, "traceback": tb, "exit": p.returncode, "message": last}

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, enumerate(cases)))


def damaged_checkpoints(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    base = tmp / "ckpt-base"
    p = run_cli(["train", *TINY, "--steps", "20", "--out", str(base)])
    if p.returncode:
        raise RuntimeError(f"the base run for damaged checkpoints failed: {p.stderr}")
    tensors = (base / "checkpoint.safetensors").read_bytes()
    meta = json.loads((base / "checkpoint.json").read_text())

    def with_sha(raw: bytes) -> dict[str, Any]:
        import hashlib

        return {**meta, "tensors_sha256": hashlib.sha256(raw).hexdigest()}

    loaded = st_load(tensors)
    renamed = st_save({f"x_{k}": v for k, v in loaded.items()})
    short = st_save({k: (v[: max(1, len(v) // 2)] if v.ndim else v) for k, v in loaded.items()})
    flipped = bytearray(tensors)
    flipped[len(flipped) // 2] ^= 0xFF
    header_flip = bytearray(tensors)
    header_flip[12] ^= 0xFF
    cases: list[tuple[str, bytes | None, Any]] = [  # (name, tensors bytes or None=delete, meta)
        ("safetensors truncated to half", tensors[: len(tensors) // 2], meta),
        ("safetensors emptied", b"", meta),
        ("one byte flipped in the tensors", bytes(flipped), meta),
        ("tensors renamed (wrong keys), SHA-256 updated", renamed, with_sha(renamed)),
        ("tensors half length, SHA-256 updated", short, with_sha(short)),
        ("header byte flipped, SHA-256 updated", bytes(header_flip), with_sha(bytes(header_flip))),
        ("checkpoint.json garbage", tensors, "{not json"),
        ("checkpoint.json removed", tensors, None),
        ("checkpoint.json step is a string", tensors, {**meta, "step": "ten"}),
        ("checkpoint.json wrong format tag", tensors, {**meta, "format": "other/9"}),
        ("checkpoint.json config of a gpt", tensors, {**meta, "config": {**meta["config"], "model": "gpt"}}),
        ("checkpoint.safetensors removed", None, meta),
        # checkpoint.json contradicting the state words in the tensors, whose SHA-256 still matches: a
        # resume would start at one step with the GPU at another and cut metrics.jsonl there
        ("checkpoint.json step edited 20 -> 5", tensors, {**meta, "step": 5}),
        ("checkpoint.json loss scale edited", tensors, {**meta, "scaler": {**meta["scaler"], "scale": 2.0}}),
        ("checkpoint.json data position edited", tensors, {**meta, "data_pos": meta["data_pos"] + 8}),
    ]
    if quick:
        cases = cases[:4] + cases[-3:-2]

    def one(i_case: tuple[int, tuple[str, bytes | None, Any]]) -> dict[str, Any]:
        i, (name, raw, m) = i_case
        d = tmp / f"ckpt{i}"
        shutil.copytree(base, d)
        if raw is None:
            (d / "checkpoint.safetensors").unlink()
        else:
            (d / "checkpoint.safetensors").write_bytes(raw)
        if m is None:
            (d / "checkpoint.json").unlink()
        else:
            (d / "checkpoint.json").write_text(m if isinstance(m, str) else json.dumps(m))
        before = {f.name: f.read_bytes() for f in d.iterdir()}
        p = run_cli(["train", "--resume", str(d), "--steps", "40", "--quiet"])
        ok, tb, last = clean_cli_refusal(p)
        unchanged = {f.name: f.read_bytes() for f in d.iterdir()} == before
        if not unchanged:
            last += " (**the run directory changed**)"
        return {
            "case": name,
            "refused": ok and unchanged,
            "traceback": tb,
            "exit": p.returncode,
            "message": last,
        }

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, enumerate(cases)))


def raw_get(port: int, path: str, method: str = "GET", body: bytes | None = None, **headers: str) -> int:
    """A request sent as written: the path byte for byte (httpx would normalise dot segments), and
    headers httpx refuses to send (a negative Content-Length)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in {"Host": f"127.0.0.1:{port}", **headers}.items():
            c.putheader(k, v)
        c.endheaders(body)
        return c.getresponse().status
    finally:
        c.close()


def bad_http(srv: Server, quick: bool) -> list[dict[str, Any]]:
    run_id = srv.create_run(steps=30)
    big = b"{" + b" " * (1 << 20) + b"}"
    P = "/api/runs"

    def chunked() -> Any:
        for _ in range(20):
            yield b" " * 65536

    def post(body: Any, ctype: str = "application/json", **kw: Any) -> int:
        return srv.http.post(P, content=body, headers={"Content-Type": ctype, **kw}).status_code

    def cfg(**c: Any) -> int:
        return srv.http.post(P, json=c).status_code

    cases: list[tuple[str, Any]] = [
        (
            "Host: evil.example (DNS rebinding)",
            lambda: srv.http.get("/api/info", headers={"Host": "evil.example"}).status_code,
        ),
        (
            "Host: 127.0.0.1.evil.example",
            lambda: srv.http.get("/api/runs", headers={"Host": "127.0.0.1.evil.example"}).status_code,
        ),
        (
            "Origin: http://evil.example (GET)",
            lambda: srv.http.get("/api/runs", headers={"Origin": "http://evil.example"}).status_code,
        ),
        ("Origin: null (POST)", lambda: post(b"{}", Origin="null")),
        ("Origin: other port on loopback (POST)", lambda: post(b"{}", Origin="http://127.0.0.1:1")),
        ("POST text/plain", lambda: post(b"{}", "text/plain")),
        ("POST form-urlencoded", lambda: post(b"a=1", "application/x-www-form-urlencoded")),
        ("POST body 1 MiB + 2 bytes (Content-Length)", lambda: post(big)),
        ("POST 1.25 MiB chunked, no Content-Length", lambda: post(chunked())),
        (
            "POST Content-Length: -1",
            lambda: raw_get(
                srv.port, P, "POST", b"{}", **{"Content-Length": "-1", "Content-Type": "application/json"}
            ),
        ),
        ("POST JSON nested 100000 deep", lambda: post(b"[" * 100000 + b"]" * 100000)),
        ("POST invalid JSON", lambda: post(b"{'a': 1")),
        ("POST a JSON array", lambda: post(b"[1, 2]")),
        ("POST unknown field", lambda: cfg(hidden=[16], rm_rf=True)),
        ("model hidden [65537]", lambda: cfg(hidden=[65537])),
        ("model hidden [65536] x 64 (oversized plan)", lambda: cfg(hidden=[65536] * 64)),
        ("gpt d_model 16384 n_layer 1024", lambda: cfg(model="gpt", d_model=16384, n_layer=1024, n_head=8)),
        ("batch_size 2^20, steps 2^20", lambda: cfg(hidden=[16], batch_size=2**20, steps=2**20)),
        ("steps 2^40", lambda: cfg(hidden=[16], steps=2**40)),
        ("lr 1e39", lambda: cfg(hidden=[16], lr=1e39)),
        ('lr "NaN"', lambda: cfg(hidden=[16], lr="NaN")),
        ("data /etc/passwd (a file path from the page)", lambda: cfg(hidden=[16], data="/etc/passwd")),
        (
            "static /shaders/..%2f..%2fpyproject.toml",
            lambda: raw_get(srv.port, "/shaders/..%2f..%2fpyproject.toml"),
        ),
        (
            "static /shaders/%2e%2e/%2e%2e/pyproject.toml",
            lambda: raw_get(srv.port, "/shaders/%2e%2e/%2e%2e/pyproject.toml"),
        ),
        ("static /../../etc/passwd (raw)", lambda: raw_get(srv.port, "/../../etc/passwd")),
        ("static /%2e%2e/%2e%2e/etc/passwd", lambda: raw_get(srv.port, "/%2e%2e/%2e%2e/etc/passwd")),
        ("static /..%5c..%5cpyproject.toml", lambda: raw_get(srv.port, "/..%5c..%5cpyproject.toml")),
        (
            "static /vendor/uplot/..%2f..%2f..%2fpackage.json",
            lambda: raw_get(srv.port, "/vendor/uplot/..%2f..%2f..%2fpackage.json"),
        ),
        ("static /shaders/%00", lambda: raw_get(srv.port, "/shaders/%00")),
        ("run id ..%2f..%2fetc", lambda: raw_get(srv.port, "/api/runs/..%2f..%2fetc")),
        ("run id of 500 characters", lambda: srv.http.get(f"{P}/{'a' * 500}").status_code),
        ("run id %00", lambda: raw_get(srv.port, "/api/runs/%00")),
        ("run id unknown", lambda: srv.http.get(f"{P}/no-such-run").status_code),
        ("plan ?f16=bogus", lambda: srv.http.get(f"{P}/{run_id}/plan?f16=bogus").status_code),
        ("metrics ?wait=1e9", lambda: srv.http.get(f"{P}/{run_id}/metrics?wait=1e9").status_code),
        ("metrics ?after=abc", lambda: srv.http.get(f"{P}/{run_id}/metrics?after=abc").status_code),
        (
            "PUT checkpoint of a run that is not running",
            lambda: srv.http.put(f"{P}/{run_id}/checkpoint?f16=emulated&step=1", content=b"x").status_code,
        ),
        (
            "PUT checkpoint step=0",
            lambda: srv.http.put(f"{P}/{run_id}/checkpoint?f16=emulated&step=0", content=b"x").status_code,
        ),
        ("sample of an mlp run", lambda: srv.http.get(f"{P}/{run_id}/sample?f16=emulated").status_code),
        ("summary of an unfinished run", lambda: srv.http.get(f"{P}/{run_id}/summary").status_code),
        ("DELETE /api/runs", lambda: srv.http.delete(P).status_code),
    ]
    if quick:
        cases = cases[::3]
    out = []
    for name, fn in cases:
        try:
            status = int(fn())
        except httpx.HTTPError as e:  # the server dropped the connection: not a clean refusal
            status = -1
            name += f" ({type(e).__name__})"
        out.append(
            {"case": name, "status": status, "refused": 400 <= status < 500, "server_error": status >= 500}
        )
    return out


async def ws_case(
    srv: Server,
    run_id: str,
    frames: list[Any],
    headers: dict[str, str] | None = None,
    origin: str | None = None,
) -> tuple[str, bool]:
    """Send frames on a fresh socket of run_id; (what came back, refused cleanly): the last frame
    answered with an error, or the socket closed with a 4xxx code (1009: over uvicorn's frame size)."""
    url = f"{srv.ws_base}/api/runs/{run_id}/ws"
    kw: dict[str, Any] = {"max_size": None, "open_timeout": 10, "close_timeout": 5}
    if headers:
        kw["additional_headers"] = headers
    if origin:
        kw["origin"] = origin
    try:
        async with websockets.connect(url, **kw) as ws:
            first = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if first.get("type") != "welcome":
                await asyncio.wait_for(ws.wait_closed(), 10)
                code = ws.close_code or 0
                return f"{first.get('type')}: {first.get('message', '')}; close {code}", 4000 <= code < 5000
            reply: dict[str, Any] = {}
            for f in frames:
                await ws.send(f if isinstance(f, (str, bytes)) else json.dumps(f))
                reply = json.loads(await asyncio.wait_for(ws.recv(), 20))
            ok = reply.get("type") == "error"
            return f"{reply.get('type')}: {str(reply.get('message', ''))[:90]}", ok
    except websockets.ConnectionClosed as e:
        code = e.rcvd.code if e.rcvd else 0
        return f"closed {code} {e.rcvd.reason if e.rcvd else ''}", 4000 <= code < 5000 or code == 1009
    except websockets.InvalidStatus as e:
        status = e.response.status_code
        return f"HTTP {status} on the upgrade", 400 <= status < 500


async def bad_ws(srv: Server, quick: bool) -> list[dict[str, Any]]:
    rid = srv.create_run(steps=100)
    h = hello(rid)
    rec = [record(0, 1.0)]
    R = {"type": "records", "run_id": rid}
    bad_rec = [{**rec[0], "loss": 1e39}]
    cases: list[tuple[str, str, list[Any], dict[str, Any]]] = [
        ("malformed JSON", rid, ['{"type": '], {}),
        ("a JSON array", rid, ["[1, 2, 3]"], {}),
        ("JSON nested 100000 deep", rid, ["[" * 100000 + "]" * 100000], {}),
        ("unknown message type", rid, [{"type": "rm", "run_id": rid}], {}),
        ("records before hello", rid, [{**R, "records": rec}], {}),
        ("hello with start_step 5 (no checkpoint)", rid, [hello(rid, 5)], {}),
        ("hello with f16_path bf16", rid, [{**h, "f16_path": "bf16"}], {}),
        ("loss 1e39 (beyond f32)", rid, [h, {**R, "records": bad_rec}], {}),
        ('loss "foo"', rid, [h, {**R, "records": [{**rec[0], "loss": "foo"}]}], {}),
        ("step -1", rid, [h, {**R, "records": [{**rec[0], "step": -1}]}], {}),
        ("step 2^32", rid, [h, {**R, "records": [{**rec[0], "step": 2**32}]}], {}),
        ("step past the run's steps", rid, [h, {**R, "records": [record(100, 1.0)]}], {}),
        ("step as a float 1.5", rid, [h, {**R, "records": [{**rec[0], "step": 1.5}]}], {}),
        ("extra field in a record", rid, [h, {**R, "records": [{**rec[0], "x": 1}]}], {}),
        ("501 records in one message", rid, [h, {**R, "records": [record(i, 1.0) for i in range(501)]}], {}),
        ("empty records list", rid, [h, {**R, "records": []}], {}),
        ("message for another run id", rid, [h, {**R, "run_id": "other", "records": rec}], {}),
        ("text frame of 300 KiB", rid, [" " * (300 * 1024)], {}),
        ("text frame of 5 MiB (over uvicorn's 4 MiB)", rid, ["x" * (5 * 2**20)], {}),
        ("binary frame", rid, [b"\x00\x01\x02"], {}),
        (
            "summary with test_correct > test_count",
            rid,
            [h, {**summary_msg(rid, 100), "test_correct": 400}],
            {},
        ),
        ("summary with NaN wall_seconds", rid, [h, {**summary_msg(rid, 100), "wall_seconds": "NaN"}], {}),
        ("unknown run id", "no-such-run", [], {}),
        ("run id with a dot-dot", "..", [], {}),
        ("foreign Origin", rid, [], {"origin": "http://evil.example"}),
        ("Host: evil.example", rid, [], {"headers": {"Host": "evil.example"}}),
    ]
    if quick:
        cases = cases[::3]
    out = []
    for name, target, frames, kw in cases:
        try:
            got, ok = await asyncio.wait_for(ws_case(srv, target, frames, **kw), 60)
        except (OSError, asyncio.TimeoutError, websockets.WebSocketException) as e:
            got, ok = f"{type(e).__name__}: {e}", False
        out.append({"case": name, "reply": got, "refused": ok})
    # a second page on a run that has one connected
    async with websockets.connect(f"{srv.ws_base}/api/runs/{rid}/ws", open_timeout=10) as first:
        await first.recv()
        got, ok = await ws_case(srv, rid, [])
        out.append({"case": "second page on a connected run", "reply": got, "refused": ok})
    return out


# --- b/c. concurrent runs and clients ----------------------------------------------------------


async def stream_run(srv: Server, run_id: str, idx: int, n_records: int, chunk: int) -> dict[str, Any]:
    """A page's life on one socket: hello, records in chunks (latency per message: send -> ack), summary."""
    lat: list[float] = []
    async with websockets.connect(
        f"{srv.ws_base}/api/runs/{run_id}/ws", max_size=None, open_timeout=30
    ) as ws:
        json.loads(await ws.recv())
        await ws.send(json.dumps(hello(run_id)))
        ack = json.loads(await ws.recv())
        assert ack["type"] == "ack", ack
        t_first = time.perf_counter()
        for lo in range(0, n_records, chunk):
            steps = range(lo, min(n_records, lo + chunk))
            msg = json.dumps(
                {
                    "type": "records",
                    "run_id": run_id,
                    "records": [record(s, idx + s / n_records) for s in steps],
                }
            )
            t = time.perf_counter()
            await ws.send(msg)
            ack = json.loads(await ws.recv())
            lat.append(time.perf_counter() - t)
            if ack.get("type") != "ack":
                raise RuntimeError(f"run {run_id}: {ack}")
        t_last = time.perf_counter()
        await ws.send(json.dumps(summary_msg(run_id, n_records)))
        ack = json.loads(await asyncio.wait_for(ws.recv(), 60))
        if ack.get("type") != "ack":
            raise RuntimeError(f"run {run_id} summary: {ack}")
    return {"lat": lat, "t0": t_first, "t1": t_last}


async def concurrent(srv: Server, n_runs: int, n_records: int, chunk: int) -> dict[str, Any]:
    ids = [srv.create_run(steps=n_records) for _ in range(n_runs)]
    t0 = time.perf_counter()
    results = await asyncio.wait_for(
        asyncio.gather(
            *(stream_run(srv, r, i, n_records, chunk) for i, r in enumerate(ids)), return_exceptions=True
        ),
        600,
    )
    wall = time.perf_counter() - t0
    errors = [f"{ids[i]}: {r!r}" for i, r in enumerate(results) if isinstance(r, BaseException)]
    ok = [r for r in results if isinstance(r, dict)]
    lat = [x for r in ok for x in r["lat"]]
    span = (max(r["t1"] for r in ok) - min(r["t0"] for r in ok)) if ok else float("nan")
    exact, lost, mixed = 0, 0, 0
    for i, rid in enumerate(ids):
        body = srv.http.get(f"/api/runs/{rid}/metrics").json()
        recs = body["records"]
        disk = RunDir(srv_runs(srv) / rid).read_metrics()
        want = [record(s, i + s / n_records) for s in range(n_records)]
        if recs == want and disk == want and body["status"] == "finished":
            exact += 1
        lost += n_records - len({r["step"] for r in recs})
        mixed += sum(1 for r in recs if int(r["loss"]) != i and r["loss"] != i + 1)  # another run's loss
    return {
        "runs": n_runs,
        "records_per_run": n_records,
        "chunk": chunk,
        "messages": len(lat),
        "runs_exact": exact,
        "records_lost": lost,
        "records_mixed": mixed,
        "errors": errors,
        "wall_s": wall,
        "stream_s": span,
        "records_total": n_runs * n_records,
        "records_per_s": (len(ok) * n_records) / span if ok and span > 0 else 0.0,
        "lat_p50": pct(lat, 50),
        "lat_p99": pct(lat, 99),
        "lat_max": max(lat) if lat else float("nan"),
    }


def srv_runs(srv: Server) -> Path:
    return Path(srv.proc.args[srv.proc.args.index("--runs") + 1])  # type: ignore[union-attr, index]


# --- d. flood ----------------------------------------------------------------------------------


async def flood(
    srv: Server, max_messages: int, plan_fetches: int, limit_s: float, settle_s: float
) -> dict[str, Any]:
    rid = srv.create_run(steps=1_000_000)
    plan_ids = [srv.create_run(steps=100) for _ in range(6)]
    rss_before = srv.rss_kib()
    stop = asyncio.Event()
    info_lat: list[float] = []
    info_bad = 0

    async def poll_info(client: httpx.AsyncClient) -> None:
        nonlocal info_bad
        while not stop.is_set():
            t = time.perf_counter()
            r = await client.get("/api/info")
            info_lat.append(time.perf_counter() - t)
            info_bad += r.status_code != 200
            await asyncio.sleep(0.02)

    async def flood_socket() -> dict[str, Any]:
        sent, code, reason = 0, None, ""
        t0 = time.perf_counter()
        url = f"{srv.ws_base}/api/runs/{rid}/ws"
        async with websockets.connect(url, max_size=None, max_queue=None) as ws:
            await ws.recv()
            await ws.send(json.dumps(hello(rid)))
            await ws.recv()
            one = json.dumps({"type": "records", "run_id": rid, "records": [record(0, 1.0)]})
            try:
                while sent < max_messages and time.perf_counter() - t0 < limit_s:
                    await ws.send(one)  # the first is stored, the rest are acked as duplicates
                    sent += 1
                await asyncio.wait_for(ws.wait_closed(), 10)
            except (websockets.ConnectionClosed, asyncio.TimeoutError):
                pass
            if ws.close_code is None:
                await ws.close()
            code, reason = ws.close_code, ws.close_reason or ""
        return {"sent": sent, "close_code": code, "close_reason": reason, "seconds": time.perf_counter() - t0}

    async def fetch_plans(client: httpx.AsyncClient) -> tuple[int, int]:
        good = bad = 0
        for i in range(plan_fetches):
            rid_ = plan_ids[i % len(plan_ids)]
            r = await client.get(f"/api/runs/{rid_}/plan", params={"f16": ("native", "emulated")[i % 2]})
            good += r.status_code == 200
            bad += r.status_code >= 500
        return good, bad

    async with httpx.AsyncClient(base_url=srv.base, timeout=60) as client:
        poller = asyncio.create_task(poll_info(client))
        fl, (plans_ok, plans_5xx) = await asyncio.gather(flood_socket(), fetch_plans(client))
        stop.set()
        await poller
    rss_after = srv.rss_kib()
    await asyncio.sleep(settle_s)
    rss_settled = srv.rss_kib()
    stored = len(srv.http.get(f"/api/runs/{rid}/metrics").json()["records"])
    return {
        **fl,
        "stored": stored,
        "plans_ok": plans_ok,
        "plans_5xx": plans_5xx,
        "plan_fetches": plan_fetches,
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "rss_settled_kib": rss_settled,
        "info_n": len(info_lat),
        "info_bad": info_bad,
        "info_p50": pct(info_lat, 50),
        "info_p99": pct(info_lat, 99),
        "info_max": max(info_lat) if info_lat else float("nan"),
    }


# --- e. kill points ----------------------------------------------------------------------------


def weights(path: Path) -> dict[str, bytes]:
    return {k: v.tobytes() for k, v in st_load((path / "checkpoint.safetensors").read_bytes()).items()}


SUMMARY_KEYS = (
    "final_train_loss",
    "last_loss",
    "test_accuracy",
    "test_correct",
    "steps",
    "optimizer_steps",
    "skipped_steps",
    "final_scale",
    "min_scale_events",
)


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def train_kill(tmp: Path, name: str, flags: list[str], when: str, arg: float, base: Path) -> dict[str, Any]:
    """Start `webmp train`, kill -9 it at `when`, read the run directory back, resume, compare."""
    d = tmp / name
    proc = subprocess.Popen(
        WEBMP + ["train", *flags, "--out", str(d)], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    metrics, meta = d / "metrics.jsonl", d / "checkpoint.json"
    t0 = time.monotonic()
    killed_at = ""
    first_meta = None
    while proc.poll() is None and time.monotonic() - t0 < 300:
        n = count_lines(metrics)
        if when == "records" and n >= arg:
            killed_at = f"{n} records in metrics.jsonl"
        elif when == "checkpoint":  # right after the n-th checkpoint.json is renamed into place
            try:
                mt = meta.stat().st_mtime_ns
            except FileNotFoundError:
                mt = None
            if mt is not None and first_meta is None:
                first_meta = [mt]
            elif mt is not None and first_meta is not None and mt != first_meta[-1]:
                first_meta.append(mt)
            if first_meta and len(first_meta) >= arg:
                killed_at = f"just after checkpoint {len(first_meta)} was written ({n} records)"
        elif when == "tmpfile":  # while a checkpoint's temporary file exists (mid-write)
            if any(p.name.startswith(".checkpoint") for p in d.glob(".*")) and count_lines(metrics) >= arg:
                killed_at = f"during a checkpoint write (temp file present, {n} records)"
        elif when == "summary" and n >= arg and not (d / "summary.json").exists():
            killed_at = f"after the last record, before summary.json ({n} records)"
        if killed_at:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.002)
    proc.wait(30)
    if not killed_at:
        return {
            "point": name,
            "killed_at": "run finished before the kill point",
            "survived": False,
            "detail": "kill point not reached",
        }
    rd = RunDir(d)
    try:
        recs_before = rd.read_metrics()
        readback = f"{len(recs_before)} records, torn tail {rd.torn_tail} B"
    except ValueError as e:
        return {"point": name, "killed_at": killed_at, "survived": False, "detail": f"read back failed: {e}"}
    p = run_cli(["train", "--resume", str(d), "--quiet"], timeout=600)
    if p.returncode:
        return {
            "point": name,
            "killed_at": killed_at,
            "survived": False,
            "detail": f"{readback}; resume exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}",
        }
    same_w = weights(d) == weights(base)
    same_m = RunDir(d).read_metrics() == RunDir(base).read_metrics()
    sa, sb = RunDir(d).read_summary(), RunDir(base).read_summary()
    same_s = all(sa[k] == sb[k] for k in SUMMARY_KEYS)  # type: ignore[literal-required]
    detail = f"{readback}; resumed; weights {'identical' if same_w else 'DIFFER'}, metrics " + (
        f"{'identical' if same_m else 'DIFFER'}, summary {'identical' if same_s else 'DIFFERS'}"
    )
    return {"point": name, "killed_at": killed_at, "survived": same_w and same_m and same_s, "detail": detail}


async def server_kill(tmp: Path, n_runs: int, n_records: int) -> dict[str, Any]:
    """Kill -9 the server while n_runs pages stream records; restart; every acked record is there."""
    runs = tmp / "kill-runs"
    srv = Server(runs, tmp / "kill-server.log")
    ids = [srv.create_run(steps=n_records) for _ in range(n_runs)]
    acked = dict.fromkeys(ids, -1)
    sent_msgs = 0

    async def page(rid: str, idx: int) -> None:
        nonlocal sent_msgs
        try:
            async with websockets.connect(f"{srv.ws_base}/api/runs/{rid}/ws", open_timeout=10) as ws:
                await ws.recv()
                await ws.send(json.dumps(hello(rid)))
                await ws.recv()
                for s in range(0, n_records, 10):
                    recs = [record(x, idx + x / n_records) for x in range(s, min(n_records, s + 10))]
                    await ws.send(json.dumps({"type": "records", "run_id": rid, "records": recs}))
                    ack = json.loads(await ws.recv())
                    sent_msgs += 1
                    if ack.get("type") == "ack":
                        acked[rid] = ack["last_step"]
        except (websockets.ConnectionClosed, OSError):
            pass

    tasks = [asyncio.create_task(page(r, i)) for i, r in enumerate(ids)]
    t0 = time.monotonic()
    while sent_msgs < n_runs * n_records // 20 and time.monotonic() - t0 < 60:  # halfway through
        await asyncio.sleep(0.005)
    srv.kill()
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    total_acked = sum(a + 1 for a in acked.values())
    srv2 = Server(runs, tmp / "kill-server.log")
    try:
        missing, torn, readback = 0, 0, True
        for i, rid in enumerate(ids):
            r = srv2.http.get(f"/api/runs/{rid}/metrics")
            if r.status_code != 200:
                readback = False
                continue
            got = {rec["step"]: rec for rec in r.json()["records"]}
            missing += sum(1 for s in range(acked[rid] + 1) if got.get(s) != record(s, i + s / n_records))
            rd = RunDir(runs / rid)
            rd.read_metrics()
            torn += rd.torn_tail
        status = {srv2.http.get(f"/api/runs/{rid}").json()["status"] for rid in ids}
        tb = srv2.tracebacks()
    finally:
        srv2.stop()
    return {
        "point": "webmp serve, mid-stream",
        "survived": readback and missing == 0 and tb == 0,
        "killed_at": f"after {sent_msgs} acked messages from {n_runs} pages ({total_acked} records acked)",
        "detail": f"restarted: {total_acked - missing}/{total_acked} acked records back, torn tail {torn} B, "
        f"runs now {', '.join(sorted(status))}",
    }


def kill_points(tmp: Path, quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    steps, every = (300, 50) if quick else (1500, 100)
    flags = [*TINY, "--steps", str(steps), "--checkpoint-every", str(every)]
    base = tmp / "kill-base"
    t = time.perf_counter()
    p = run_cli(["train", *flags, "--out", str(base)], timeout=600)
    if p.returncode:
        raise RuntimeError(f"the uninterrupted run failed: {p.stderr}")
    base_s = time.perf_counter() - t
    points: list[tuple[str, str, float]] = [
        ("train: 30 % of the records", "records", 0.3 * steps),
        ("train: just after a checkpoint", "checkpoint", 2),
    ]
    if not quick:
        points += [
            ("train: 80 % of the records", "records", 0.8 * steps),
            ("train: 10 % of the records", "records", 0.1 * steps),
            ("train: 55 % of the records", "records", 0.55 * steps),
            ("train: just after checkpoint 6", "checkpoint", 6),
            ("train: during a checkpoint write", "tmpfile", 2 * every),
            ("train: after the last record", "summary", steps),
        ]
    out = [
        train_kill(tmp, f"kill{i}", flags, w, a, base) | {"point": n} for i, (n, w, a) in enumerate(points)
    ]
    return out, {"steps": steps, "checkpoint_every": every, "base_seconds": base_s, "flags": " ".join(flags)}


# --- the shared tune cache ------------------------------------------------------------------------

CACHE_WRITER = """
import sys
from webmp.engine.tune_cache import update_cache
who, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    update_cache("adapter", {f"{who}/{i}": {"WG_X": i}})
"""
TUNE_PASS = """
import sys
from webmp.engine.runtime import default_gpu
from webmp.tune.native import tune_shapes
M, N, K = map(int, sys.argv[1:4])
tune_shapes(default_gpu(), [("fp32", M, N, K, 0, 0)], budget_s=float(sys.argv[4]), log=lambda *a: None)
"""


def python(code: str, *args: Any, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def tune_cache(tmp: Path, quick: bool) -> dict[str, Any]:
    """Processes sharing one tune cache: writers at once (every entry kept), two real tuning passes
    at once (both passes' classes kept), writers killed mid-write (the file stays whole), and
    `webmp train` on a damaged file (goes on, the file set aside, a warning)."""
    from webmp.engine.tiles import shape_class

    R: dict[str, Any] = {}
    path = tmp / "cache" / "tune.json"
    env = {**ENV, "WEBMP_TUNE_CACHE": str(path)}
    writers, n = (4, 30) if quick else (8, 100)
    procs = [python(CACHE_WRITER, f"w{i}", n, env=env) for i in range(writers)]
    errors = [p.communicate(timeout=300)[1] for p in procs if p.wait(timeout=300)]
    kept = len(json.loads(path.read_text())["adapter"]) if path.is_file() else 0
    R["writers"] = {"processes": writers, "updates_each": n, "entries_kept": kept, "errors": len(errors)}

    path.unlink()
    shapes = [(24, 20, 16), (100, 70, 90)]
    passes = [python(TUNE_PASS, *s, 0.5, env=env) for s in shapes]
    failed = [p.communicate(timeout=300)[1][-300:] for p in passes if p.wait(timeout=300)]
    adapter_entries = next(iter(json.loads(path.read_text()).values()), {}) if path.is_file() else {}
    classes = [shape_class("fp32", *s) for s in shapes]
    R["passes"] = {"passes": len(shapes), "classes_kept": sum(c in adapter_entries for c in classes)}
    R["passes"]["errors"] = failed

    kills, whole = (5, 0) if quick else (20, 0)
    for i in range(kills):
        p = python(CACHE_WRITER, f"k{i}", 10_000, env=env)
        time.sleep(0.3 + 0.05 * i)  # into its loop of read-merge-write
        p.kill()
        p.wait()
        try:
            whole += isinstance(json.loads(path.read_text()), dict)
        except ValueError:
            pass
    R["kills"] = {"killed": kills, "file_whole_after": whole}

    path.write_text('{"adapter": {"fp32/NN/16x16x16": {"WG_X"')  # a torn file
    run_dir = tmp / "cache-run"
    p = subprocess.run(
        [*WEBMP, "train", *TINY, "--steps", "3", "--out", str(run_dir)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    aside = [f.name for f in path.parent.iterdir() if ".damaged-" in f.name]
    said = [line for line in p.stderr.splitlines() if "is damaged" in line]
    R["damaged"] = {
        "exit": p.returncode,
        "set_aside": len(aside),
        "message": said[0] if said else p.stderr.strip()[-300:],
        "trained": (run_dir / "summary.json").is_file(),
    }
    return R


def tune_cache_failures(c: dict[str, Any]) -> int:
    w, t, k, d = c["writers"], c["passes"], c["kills"], c["damaged"]
    lost = w["processes"] * w["updates_each"] - w["entries_kept"] + w["errors"]
    return (
        lost + (t["passes"] - t["classes_kept"]) + len(t["errors"]) + (k["killed"] - k["file_whole_after"])
        + int(not (d["exit"] == 0 and d["set_aside"] == 1 and d["trained"]))
    )  # fmt: skip


# --- the report --------------------------------------------------------------------------------


def table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def report(R: dict[str, Any]) -> str:
    a, b, d = R["bad"], R["concurrent"], R["flood"]
    f = R["failures"]
    L = [
        "# Reliability",
        "",
        "What was tried against webmp and what it did, measured by `scripts/reliability.py`; every "
        "figure below comes from one run of",
        "",
        f"    {R['command']}",
        "",
        f"- date: {R['date']}, {R['seconds']:.0f} s",
        f"- machine: {R['cpus']} CPUs ({R['cpu']}), {R['os']}, Python {R['python']}",
        f"- adapter (webmp's GPU name, from a run's summary): {R['adapter']}",
        f"- load average before / after: {R['load_before']} / {R['load_after']} (shared CPUs)",
        f"- failures: {sum(f.values())} ({', '.join(f'{k} {v}' for k, v in f.items())})",
        "",
        "Everything runs on loopback (127.0.0.1) against `webmp train` and `webmp serve` subprocesses; "
        "every loop is bounded in count and time. `--quick` runs a subset (the test does).",
        "",
        "## a. Bad inputs tried and refused",
        "",
        "Refused cleanly: the CLI exits non-zero, its stderr ending in one `webmp train: ...` line"
        " (argparse's usage line may precede it) and holding no Python traceback; "
        "HTTP answers 4xx; the WebSocket answers an `error` message or closes with a 4xxx code (1009 for "
        "frames over uvicorn's 4 MiB); a damaged checkpoint, moreover, leaves every file of its run "
        "directory as it was. Server tracebacks are counted in its stderr.",
        "",
    ]
    kinds = [
        ("CLI flags (`webmp train`)", a["cli"]),
        ("REST requests (`webmp serve`)", a["http"]),
        ("WebSocket frames", a["ws"]),
        ("damaged checkpoints (`webmp train --resume`)", a["ckpt"]),
    ]
    rows = []
    for name, cases in kinds:
        tried = len(cases)
        ref = sum(c["refused"] for c in cases)
        bad = sum(c.get("traceback", False) or c.get("server_error", False) for c in cases)
        rows.append([name, tried, ref, bad])
    rows.append(["server stderr (all phases)", "", "", R["server_tracebacks"]])
    L += [table(["kind", "tried", "refused cleanly", "5xx / tracebacks"], rows), ""]
    for name, cases in kinds:
        L += [f"### {name}", ""]
        key = "message" if "message" in cases[0] else ("status" if "status" in cases[0] else "reply")
        L += [
            table(
                ["case", "refused", key],
                [[c["case"], "yes" if c["refused"] else "**NO**", c[key]] for c in cases],
            ),
            "",
        ]
    L += [
        "## b. Concurrent runs and clients held",
        "",
        f"{b['runs']} runs created over REST, then {b['runs']} WebSocket clients at once, each as a page: "
        f"hello, {b['records_per_run']} records in messages of {b['chunk']} (waiting for each ack), "
        "summary. Afterwards each run's records (API and metrics.jsonl) are compared with what was sent.",
        "",
        table(
            [
                "runs",
                "clients",
                "records each",
                "runs exactly their own steps",
                "records lost",
                "records of another run",
                "client errors",
            ],
            [
                [
                    b["runs"],
                    b["runs"],
                    b["records_per_run"],
                    f"{b['runs_exact']}/{b['runs']}",
                    b["records_lost"],
                    b["records_mixed"],
                    len(b["errors"]),
                ]
            ],
        ),
        "",
        *[f"- error: {e}" for e in b["errors"]],
        "## c. Records/s and ingest latency under load",
        "",
        f"From phase b: {b['records_total']} records in {b['messages']} messages over {b['stream_s']:.2f} s "
        f"of streaming (first send to last ack, {b['runs']} clients at once; each append is fsynced).",
        "",
        table(
            ["records/s", "messages", "latency p50 (ms)", "p99 (ms)", "max (ms)"],
            [
                [
                    f"{b['records_per_s']:.0f}",
                    b["messages"],
                    ms(b["lat_p50"]),
                    ms(b["lat_p99"]),
                    ms(b["lat_max"]),
                ]
            ],
        ),
        "",
        "## d. Server memory before / after a flood",
        "",
        "One client sends the same one-record message again and again without reading the acks (after the "
        "first, each is a duplicate: cheap for the server, so the rate limit is what stops it; at most "
        f"{R['flood_max']} messages or "
        f"{R['flood_limit_s']:.0f} s) while another fetches {d['plan_fetches']} plans (6 runs, both f16 "
        "paths; the server caches 4) and a third polls `/api/info` every 20 ms. RSS is the server "
        "process's VmRSS from /proc; before is after phases a to c on the same server. The flood lasted "
        f"{d['seconds']:.1f} s (until the close, or the bound).",
        "",
        table(
            [
                "RSS before",
                "after the flood",
                f"after {R['settle_s']:.0f} s",
                "flood messages sent",
                "closed with",
                "records stored",
                "plans 200 / 5xx",
            ],
            [
                [
                    f"{d['rss_before_kib'] / 1024:.1f} MiB",
                    f"{d['rss_after_kib'] / 1024:.1f} MiB",
                    f"{d['rss_settled_kib'] / 1024:.1f} MiB",
                    d["sent"],
                    f"{d['close_code']} {d['close_reason']}",
                    d["stored"],
                    f"{d['plans_ok']} / {d['plans_5xx']}",
                ]
            ],
        ),
        "",
        table(
            ["/api/info during the flood", "requests", "non-200", "p50 (ms)", "p99 (ms)", "max (ms)"],
            [["", d["info_n"], d["info_bad"], ms(d["info_p50"]), ms(d["info_p99"]), ms(d["info_max"])]],
        ),
        "",
        "## e. Kill points survived",
        "",
        f"`kill -9` of `webmp train {R['kill']['flags']}` at each point below (found by watching its "
        "run directory: metrics.jsonl's lines, checkpoint.json's mtime, the checkpoint's temporary file), "
        "then: the run directory read back (strict JSON; a torn last line is tolerated and reported), "
        "`webmp train --resume DIR` to the end, and the final checkpoint's tensors, every metrics record "
        "and the summary's figures compared with an uninterrupted run of the same config "
        f"({R['kill']['base_seconds']:.1f} s). Survived: all three bit-identical. The server is killed "
        "while its pages stream records and restarted on the same runs directory: survived when every "
        "acked record is served again.",
        "",
        table(
            ["kill point", "killed when", "survived", "after"],
            [
                [k["point"], k["killed_at"], "yes" if k["survived"] else "**NO**", k["detail"]]
                for k in R["kills"]
            ],
        ),
        "",
        *tune_cache_report(R["tune_cache"]),
    ]
    return "\n".join(L)


def tune_cache_report(c: dict[str, Any]) -> list[str]:
    w, t, k, d = c["writers"], c["passes"], c["kills"], c["damaged"]
    return [
        "## f. The shared tune cache",
        "",
        "Processes sharing one `$WEBMP_TUNE_CACHE` (webmp/engine/tune_cache.py: writers merge under a lock "
        "file and replace the file at once). Writers: processes at once, each setting its own classes one "
        "update at a time (read, merge, write). Tuning passes: `tune_shapes` on a different shape each, at "
        "once. Killed: a writer looping over updates, `kill -9` after 0.3 s and more, the file read back "
        "each time. Damaged: `webmp train` on a torn cache file.",
        "",
        table(
            ["probe", "tried", "kept / whole", "result"],
            [
                [
                    "concurrent writers",
                    f"{w['processes']} x {w['updates_each']} updates",
                    f"{w['entries_kept']} / {w['processes'] * w['updates_each']} entries",
                    f"{w['errors']} errors",
                ],
                [
                    "concurrent tuning passes",
                    t["passes"],
                    f"{t['classes_kept']} / {t['passes']} classes",
                    f"{len(t['errors'])} errors",
                ],
                [
                    "writer killed mid-update",
                    k["killed"],
                    f"{k['file_whole_after']} / {k['killed']} files whole",
                    "",
                ],
                [
                    "`webmp train` on a torn cache",
                    1,
                    f"set aside: {d['set_aside']}",
                    f"exit {d['exit']}, trained: {'yes' if d['trained'] else '**NO**'}; {d['message']}",
                ],
            ],
        ),  # fmt: skip
        "",
    ]


async def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    q = args.quick
    R: dict[str, Any] = {"load_before": loadavg()}
    t0 = time.perf_counter()
    log = tmp / "server.log"
    print("reliability: a. bad inputs", file=sys.stderr, flush=True)
    cli = bad_cli(tmp, q)
    ckpt = damaged_checkpoints(tmp, q)
    srv = Server(tmp / "runs", log)
    try:
        http_cases = bad_http(srv, q)
        ws_cases = await bad_ws(srv, q)
        alive = srv.http.get("/api/info").status_code == 200
        R["bad"] = {"cli": cli, "ckpt": ckpt, "http": http_cases, "ws": ws_cases, "alive": alive}
        print("reliability: b/c. concurrent runs", file=sys.stderr, flush=True)
        n_runs, n_rec, chunk = (4, 1000, 50) if q else (16, 3000, 100)
        R["concurrent"] = await concurrent(srv, n_runs, n_rec, chunk)
        print("reliability: d. flood", file=sys.stderr, flush=True)
        R["flood_max"], R["flood_limit_s"] = (3000, 10.0) if q else (10000, 30.0)
        R["settle_s"] = 2.0 if q else 5.0
        R["flood"] = await flood(srv, R["flood_max"], 12 if q else 60, R["flood_limit_s"], R["settle_s"])
        R["server_alive_after"] = srv.http.get("/api/info").status_code == 200
    finally:
        srv.stop()
    print("reliability: f. the shared tune cache", file=sys.stderr, flush=True)
    R["tune_cache"] = tune_cache(tmp, q)
    print("reliability: e. kill points", file=sys.stderr, flush=True)
    kills, R["kill"] = kill_points(tmp, q)
    kills.append(await server_kill(tmp, 3 if q else 8, 2000 if q else 4000))
    R["kills"] = kills
    R["server_tracebacks"] = srv.tracebacks() + len(TRACEBACK.findall((tmp / "kill-server.log").read_text()))
    R["adapter"] = RunDir(tmp / "kill-base").read_summary()["adapter"]
    R["seconds"] = time.perf_counter() - t0
    R["load_after"] = loadavg()
    bad = R["bad"]
    b, d = R["concurrent"], R["flood"]
    R["failures"] = {
        "bad inputs not refused": sum(
            not c["refused"] for k in ("cli", "ckpt", "http", "ws") for c in bad[k]
        ),
        "5xx or tracebacks": sum(
            c.get("traceback", False) or c.get("server_error", False)
            for k in ("cli", "ckpt", "http", "ws")
            for c in bad[k]
        )
        + R["server_tracebacks"],
        "server down": int(not bad["alive"]) + int(not R["server_alive_after"]),
        "runs not exact": b["runs"] - b["runs_exact"] + len(b["errors"]),
        "records lost or mixed": b["records_lost"] + b["records_mixed"],
        "flood not closed 4429": int(d["close_code"] != 4429),
        "flood 5xx": d["plans_5xx"] + d["info_bad"],
        "kill points not survived": sum(not k["survived"] for k in kills),
        "tune cache entries lost or damaged": tune_cache_failures(R["tune_cache"]),
    }
    return R


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="fewer cases, runs and steps (about a minute)")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "reliability.md", help="the report (markdown)")
    p.add_argument("--json", type=Path, default=None, help="also write every figure as JSON here")
    args = p.parse_args(argv)
    shown = " ".join(["python scripts/reliability.py"] + (["--quick"] if args.quick else []))
    with tempfile.TemporaryDirectory(prefix="webmp-reliability-") as tmp:
        R = asyncio.run(measure(args, Path(tmp)))
    R.update(
        command=shown,
        date=time.strftime("%Y-%m-%d %H:%M %Z"),
        cpus=os.cpu_count(),
        cpu=platform.processor() or platform.machine(),
        os=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(R))
    if args.json is not None:
        args.json.write_text(json.dumps(R, indent=1, default=str) + "\n")
    total = sum(R["failures"].values())
    print(f"reliability: wrote {args.out} in {R['seconds']:.0f} s; failures {total}: {R['failures']}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
