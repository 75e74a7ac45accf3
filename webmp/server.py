"""`webmp serve`: the browser runtime's server (FastAPI + uvicorn).

It serves the page (web/), the WGSL kernels (shaders/) and the chart library (web/node_modules/uplot)
as static files, builds plans for the page, and records what a page's run reports into a run
directory in the same format as a native run (webmp/rundir.py):

  POST /api/runs                        create a run from a TrainConfig (JSON body)   -> RunInfo
  GET  /api/runs, /api/runs/{id}        list / status                                -> RunInfo
  GET  /api/runs/{id}/metrics?after=&wait=   records with step > after; waits up to `wait` s for new ones
  GET  /api/runs/{id}/summary           summary.json once finished
  GET  /api/runs/{id}/plan?f16=native|emulated   the plan for a page whose adapter has (native) or
                                        lacks (emulated) shader-f16, resumed from the last checkpoint
  GET  /api/runs/{id}/blob?f16=...      the plan's initial-contents blob (octet-stream)
  PUT  /api/runs/{id}/checkpoint?f16=&step=   raw bytes of plan["checkpoint_buffers"], in order
  WS   /api/runs/{id}/ws                records and the summary (see webmp/messages.py)

All run state is changed on the event loop only, so two pages (two runs) never interleave writes
to the same files. Binding anything but loopback needs --allow-remote and a token that the API, the
WebSocket and the page (which takes it from its URL) must present.
"""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import math
import os
import secrets
import socket
import sys
import threading
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from .checkpoint import load_checkpoint, resume_blob, save_checkpoint
from .config import TrainConfig, config_error_message
from .data import load_dataset
from .messages import (MAX_MESSAGE_BYTES, RUN_ID_RE, Failed, Hello, Records, RunInfo, Stopped, Summary,
                       parse_page_message)
from .plan import build_plan, resolve_f16_path
from .resources import SHADER_DIR, UPLOT_DIR, WEB_DIR
from .rundir import RunDir, new_run_dir

STATE_FILE = "browser.json"        # the browser run's status, next to the native-format files
RESUMABLE = {"created", "disconnected", "failed", "stopped"}
MAX_PENDING = 100_000              # records held back waiting for an earlier step
WS_PROTOCOL_MAX_BYTES = 4 * 2**20  # frames above this are cut by uvicorn itself (connection closed)
_plot_lock = threading.Lock()      # matplotlib's pyplot is not thread-safe


@lru_cache(maxsize=4)
def _dataset(name: str, input_scale: float):
    return load_dataset(name, input_scale)


def describe_f16(path: str | None) -> str:
    from .train import describe_f16 as native_description
    return native_description(path or "fp32", "auto")


class BrowserRun:
    """One run trained by a page: its directory, its status and the records stored so far."""

    def __init__(self, path: Path, cfg: TrainConfig, state: dict | None = None):
        self.id = path.name
        self.dir = RunDir(path)
        self.cfg = cfg
        state = state or {}
        self.status = state.get("status", "created")
        self.message = state.get("message", "")
        self.f16_path = state.get("f16_path")
        self.adapter = state.get("adapter")
        self.checkpoint_step = state.get("checkpoint_step")
        self.records = self.dir.read_metrics()
        self.pending: dict[int, dict] = {}
        self.connected = False
        self.plans: dict[str, tuple[dict, bytes]] = {}
        self._changed = asyncio.Event()

    @property
    def last_step(self) -> int:
        return self.records[-1]["step"] if self.records else -1

    def info(self) -> RunInfo:
        return RunInfo(id=self.id, status=self.status, message=self.message, steps=self.cfg.steps,
                       last_step=self.last_step, records=len(self.records), checkpoint_step=self.checkpoint_step,
                       f16_path=self.f16_path, adapter=self.adapter, page_url=f"/?run={self.id}",
                       config=self.cfg.model_dump())

    def save(self) -> None:
        self.dir.write_json(STATE_FILE, {"status": self.status, "message": self.message, "f16_path": self.f16_path,
                                         "adapter": self.adapter, "checkpoint_step": self.checkpoint_step})
        self.dir.write_json("config.json", {**self.cfg.model_dump(), "f16_path": self.f16_path,
                                            "adapter": self.adapter, "runtime": "browser"})
        self.notify()

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    # --- plans ----------------------------------------------------------------------------------
    def path_for(self, offer: str) -> str:
        """The f16 path for a page whose adapter has ('native') or lacks ('emulated') shader-f16."""
        try:
            return resolve_f16_path(self.cfg.precision, self.cfg.f16, offer == "native")
        except RuntimeError as e:
            raise HTTPException(409, str(e))

    def base_plan(self, path: str) -> tuple[dict, bytes]:
        """The run's plan and initial blob on an f16 path (cached; runs in a worker thread)."""
        if path not in self.plans:
            self.plans[path] = build_plan(self.cfg, _dataset(self.cfg.dataset, self.cfg.input_scale), path)
        return self.plans[path]

    def plan(self, offer: str) -> tuple[dict, bytes, int]:
        """(plan, blob, start step) for the page: resumed from the last checkpoint if there is one."""
        plan, blob = self.base_plan(self.path_for(offer))
        if self.checkpoint_step is None:
            return plan, blob, 0
        contents, meta = load_checkpoint(self.dir.path)
        plan, blob = resume_blob(plan, blob, contents)
        return plan, blob, meta["step"]

    # --- what the page reports (event loop only) --------------------------------------------------
    def start(self, hello: Hello) -> None:
        if self.status not in RESUMABLE:
            raise ValueError(f"run {self.id} is {self.status}; it cannot be started again")
        expected = self.checkpoint_step or 0
        if hello.start_step != expected:
            raise ValueError(f"the page starts at step {hello.start_step} but the run resumes at step {expected}; "
                             "reload the plan")
        paths = set()
        for has_f16 in (True, False):
            try:
                paths.add(resolve_f16_path(self.cfg.precision, self.cfg.f16, has_f16))
            except RuntimeError:
                pass
        if hello.f16_path not in paths:
            raise ValueError(f"f16 path {hello.f16_path} does not match the run's config ({' or '.join(sorted(paths))})")
        if self.records and self.last_step >= expected:
            self.dir.truncate_metrics_after(expected - 1)   # the resumed page sends these steps again
            self.records = [r for r in self.records if r["step"] < expected]
        self.pending.clear()
        info = hello.adapter
        self.adapter = " ".join(str(info[k]) for k in ("vendor", "architecture", "device", "description")
                                if info.get(k)) or "unknown adapter"
        self.adapter += " (browser)"
        self.f16_path = hello.f16_path
        self.status, self.message = "running", ""
        self.save()

    def add_records(self, records: list[dict]) -> tuple[int, int]:
        """Store records once each, in step order; returns (stored, duplicates)."""
        if self.status != "running":
            raise ValueError(f"run {self.id} is {self.status}; send hello first")
        bad = [r["step"] for r in records if r["step"] >= self.cfg.steps]
        if bad:
            raise ValueError(f"step {bad[0]} is past the run's {self.cfg.steps} steps")
        dups = 0
        for r in records:
            if r["step"] <= self.last_step or r["step"] in self.pending:
                dups += 1
            else:
                self.pending[r["step"]] = r
        if len(self.pending) > MAX_PENDING:
            self.pending.clear()
            raise ValueError("too many records waiting for an earlier step; dropped them")
        ready = []
        while self.last_step + len(ready) + 1 in self.pending:
            ready.append(self.pending.pop(self.last_step + len(ready) + 1))
        self.store(ready)
        return len(ready), dups

    def store(self, records: list[dict]) -> None:
        if records:
            self.dir.append_metrics(records)
            self.records += records
            self.notify()

    def flush_pending(self) -> None:
        """Keep records still waiting for a gap to fill (a page that left): all received are kept."""
        self.store([self.pending[s] for s in sorted(self.pending)])
        self.pending.clear()

    def end(self, status: str, message: str = "") -> None:
        self.flush_pending()
        self.status, self.message = status, message
        self.save()

    def summary(self, msg: Summary, plan: dict) -> dict:
        recs = self.records
        tail = recs[-min(len(recs), self.cfg.log_every):]
        state = msg.state
        return {
            "final_train_loss": sum(r["loss"] for r in tail) / len(tail) if tail else None,
            "last_loss": recs[-1]["loss"] if recs else None,
            "test_accuracy": msg.test_correct / msg.test_count,
            "test_correct": msg.test_correct,
            "test_count": msg.test_count,
            "steps": state.iteration,
            "optimizer_steps": state.opt_step,
            "skipped_steps": state.skipped_total,
            "final_scale": state.scale,
            "min_scale_events": state.min_scale_events,
            "precision": self.cfg.precision,
            "f16_path": self.f16_path if self.f16_path != "fp32" else "none",
            "f16_description": describe_f16(self.f16_path),
            "adapter": self.adapter,
            "gpu_memory_bytes": dict(plan["memory"]),
            "wall_seconds": round(msg.wall_seconds, 3),
            "steps_per_second": round(msg.steps_run / msg.wall_seconds, 2) if msg.wall_seconds > 0 else None,
            "readbacks": msg.readbacks,
            "run_dir": str(self.dir.path),
            "runtime": "browser",
        }


class RunStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.runs: dict[str, BrowserRun] = {}
        if self.root.is_dir():
            for state_file in sorted(self.root.glob(f"*/{STATE_FILE}")):
                self._load(state_file.parent)

    def _load(self, path: Path) -> None:
        try:
            state = json.loads((path / STATE_FILE).read_text())
            cfg = json.loads((path / "config.json").read_text())
            cfg = TrainConfig(**{k: v for k, v in cfg.items() if k in TrainConfig.model_fields})
        except (OSError, ValueError) as e:
            print(f"webmp serve: skipping {path}: {e}", file=sys.stderr)
            return
        if state.get("status") == "running":  # the server stopped while a page was training
            state["status"], state["message"] = "disconnected", "the server restarted during the run"
        self.runs[path.name] = BrowserRun(path, cfg, state)

    def create(self, cfg: TrainConfig) -> BrowserRun:
        run = BrowserRun(new_run_dir(self.root, prefix="browser"), cfg)
        run.save()
        self.runs[run.id] = run
        return run

    def get(self, run_id: str) -> BrowserRun:
        run = self.runs.get(run_id) if RUN_ID_RE.match(run_id) else None
        if run is None:
            raise HTTPException(404, f"no run {run_id!r}")
        return run


def json_safe(value):
    """NaN and infinities as the strings "NaN", "Infinity", "-Infinity" (JSON has no literal for them;
    a skipped step's grad_norm is NaN). webmp.browser and the page turn them back into numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


class SafeJSONResponse(JSONResponse):
    def render(self, content) -> bytes:
        return super().render(json_safe(content))


def plot_curves(run_dir: RunDir, title: str) -> None:
    with _plot_lock:
        run_dir.plot_curves(title)


def _error_text(err: ValidationError, limit: int = 3) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:limit]]
    more = len(err.errors()) - limit
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def create_app(runs_root: str | Path = "runs", token: str | None = None) -> FastAPI:
    app = FastAPI(title="webmp", docs_url=None, redoc_url=None, default_response_class=SafeJSONResponse)
    store = RunStore(runs_root)
    app.state.store = store
    app.state.token = token

    def token_ok(given: str | None) -> bool:
        return token is None or (given is not None and secrets.compare_digest(given.encode(), token.encode()))

    @app.middleware("http")
    async def require_token(request: Request, call_next):
        if request.url.path.startswith("/api/") and token is not None:
            auth = request.headers.get("authorization", "")
            given = auth[7:] if auth.lower().startswith("bearer ") else request.query_params.get("token")
            if not token_ok(given):
                return JSONResponse({"detail": "a valid token is required (Authorization: Bearer <token>)"},
                                    status_code=401)
        return await call_next(request)

    @app.get("/api/info")
    def api_info():
        from . import __version__
        return {"version": __version__, "token_required": token is not None, "uplot": UPLOT_DIR.is_dir()}

    @app.get("/api/runs", response_model=list[RunInfo])
    def list_runs():
        return [r.info() for r in store.runs.values()]

    @app.post("/api/runs", status_code=201, response_model=RunInfo)
    async def create_run(request: Request):
        try:
            body = await request.json()
            cfg = TrainConfig(**body) if isinstance(body, dict) else None
        except ValueError as e:  # also pydantic's ValidationError
            msg = config_error_message(e) if isinstance(e, ValidationError) else "the body must be a JSON object"
            raise HTTPException(422, msg)
        if cfg is None:
            raise HTTPException(422, "the body must be a JSON object of TrainConfig fields")
        return store.create(cfg).info()

    @app.get("/api/runs/{run_id}", response_model=RunInfo)
    def run_status(run_id: str):
        return store.get(run_id).info()

    @app.get("/api/runs/{run_id}/metrics")
    async def run_metrics(run_id: str, after: int = -1, wait: float = Query(0, ge=0, le=60)):
        run = store.get(run_id)
        if wait > 0 and run.last_step <= after and run.status in ("created", "running"):
            await run.wait_changed(wait)
        return {"status": run.status, "records": [r for r in run.records if r["step"] > after]}

    @app.get("/api/runs/{run_id}/summary")
    def run_summary(run_id: str):
        run = store.get(run_id)
        if not (run.dir.path / "summary.json").is_file():
            raise HTTPException(404, f"run {run_id} has no summary yet (status {run.status})")
        return run.dir.read_json("summary.json")

    async def plan_for(run_id: str, f16: str):
        run = store.get(run_id)
        return run, await run_in_threadpool(run.plan, f16)

    F16 = Query(..., pattern="^(native|emulated)$", description="does the page's adapter have shader-f16")

    @app.get("/api/runs/{run_id}/plan")
    async def run_plan(run_id: str, f16: str = F16):
        run, (plan, _, start) = await plan_for(run_id, f16)
        return {"run_id": run.id, "start_step": start, "f16_path": plan["f16_path"] or "fp32", "plan": plan}

    @app.get("/api/runs/{run_id}/blob")
    async def run_blob(run_id: str, f16: str = F16):
        _, (_, blob, _) = await plan_for(run_id, f16)
        return Response(blob, media_type="application/octet-stream")

    @app.put("/api/runs/{run_id}/checkpoint")
    async def upload_checkpoint(run_id: str, request: Request, step: int = Query(..., ge=1), f16: str = F16):
        run = store.get(run_id)
        plan, _ = await run_in_threadpool(run.base_plan, run.path_for(f16))
        if run.status != "running":
            raise HTTPException(409, f"run {run_id} is {run.status}; only a running page uploads checkpoints")
        sizes = {b["name"]: b["bytes"] for b in plan["buffers"]}
        names = plan["checkpoint_buffers"]
        expected = sum(sizes[n] for n in names)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > expected:
                raise HTTPException(413, f"a checkpoint of this plan is {expected} bytes")
        if len(body) != expected:
            raise HTTPException(400, f"a checkpoint of this plan is {expected} bytes, got {len(body)}")
        contents, offset = {}, 0
        for n in names:
            contents[n] = bytes(body[offset:offset + sizes[n]])
            offset += sizes[n]
        iteration = int.from_bytes(contents[plan["state"]["buffer"]][12:16], "little")  # STATE_FIELDS[3]
        if iteration != step or step > run.cfg.steps:
            raise HTTPException(400, f"the checkpoint's state says step {iteration}, the upload says {step}")
        await run_in_threadpool(save_checkpoint, run.dir.path, plan, contents,
                                {"adapter": run.adapter, "runtime": "browser"})
        run.checkpoint_step = step
        run.save()
        return {"checkpoint_step": step}

    @app.websocket("/api/runs/{run_id}/ws")
    async def run_socket(ws: WebSocket, run_id: str):
        origin = ws.headers.get("origin")
        if not token_ok(ws.query_params.get("token")) or (origin and urlsplit(origin).netloc != ws.headers.get("host")):
            await ws.close(code=4401)  # a missing token, or a page of another site (cross-site WebSocket)
            return
        run = store.runs.get(run_id) if RUN_ID_RE.match(run_id) else None
        await ws.accept()
        if run is None or run.connected:
            why = f"no run {run_id!r}" if run is None else f"run {run_id} already has a page connected"
            await ws.send_json({"type": "error", "message": why})
            await ws.close(code=4404 if run is None else 4409)
            return
        run.connected = True
        try:
            await ws.send_json({"type": "welcome", "run_id": run.id, "status": run.status, "last_step": run.last_step})
            while True:
                frame = await ws.receive()
                if frame["type"] == "websocket.disconnect":
                    break
                await ws.send_json(await handle_frame(run, frame))
        except WebSocketDisconnect:
            pass
        finally:
            run.connected = False
            if run.status == "running":
                at = f" at step {run.last_step}" if run.records else ""
                where = (f"resume from the checkpoint at step {run.checkpoint_step}" if run.checkpoint_step
                         else "restart it")
                run.end("disconnected", f"the page disconnected{at}; open {run.info().page_url} to {where}")

    async def handle_frame(run: BrowserRun, frame: dict) -> dict:
        text = frame.get("text")
        if text is None:
            return {"type": "error", "message": "only JSON text messages are accepted"}
        if len(text.encode()) > MAX_MESSAGE_BYTES:
            return {"type": "error", "message": f"message over {MAX_MESSAGE_BYTES} bytes dropped"}
        try:
            msg = parse_page_message(json.loads(text))
        except ValueError as e:  # bad JSON or pydantic's ValidationError
            why = _error_text(e) if isinstance(e, ValidationError) else f"invalid JSON ({e})"
            return {"type": "error", "message": f"message dropped: {why}"}
        if msg.run_id != run.id:
            return {"type": "error", "message": f"message for run {msg.run_id} sent on run {run.id}'s socket; dropped"}
        try:
            if isinstance(msg, Hello):
                run.start(msg)
            elif isinstance(msg, Records):
                stored, dups = run.add_records([r.model_dump() for r in msg.records])
                return {"type": "ack", "last_step": run.last_step, "stored": stored, "duplicates": dups}
            elif isinstance(msg, Summary):
                await finish(run, msg)
            elif isinstance(msg, Failed):
                run.end("failed", msg.message)
            elif isinstance(msg, Stopped):
                run.end("stopped", f"stopped by the user after {msg.step} steps")
        except ValueError as e:
            return {"type": "error", "message": str(e)}
        return {"type": "ack", "last_step": run.last_step}

    async def finish(run: BrowserRun, msg: Summary) -> None:
        if run.status != "running":
            raise ValueError(f"run {run.id} is {run.status}; send hello first")
        plan, _ = await run_in_threadpool(run.base_plan, run.f16_path)
        run.flush_pending()
        summary = run.summary(msg, plan)
        run.dir.write_json("summary.json", summary)
        title = f"{run.cfg.precision} / {summary['f16_path']} (browser) — test acc {summary['test_accuracy']:.3f}"
        await run_in_threadpool(plot_curves, run.dir, title)
        run.end("finished")

    app.mount("/shaders", StaticFiles(directory=SHADER_DIR), name="shaders")
    app.mount("/vendor/uplot", StaticFiles(directory=UPLOT_DIR, check_dir=False), name="uplot")
    app.mount("/", StaticFiles(directory=WEB_DIR, html=True), name="web")
    return app


# --- the command line ----------------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def page_url(host: str, port: int, token: str | None) -> str:
    if host in ("0.0.0.0", "::"):  # every interface: name this machine
        host = socket.gethostname()
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def server_token(host: str, allow_remote: bool, token: str | None) -> str | None:
    """The token to require: None on loopback unless one is given; remote binding needs allow_remote."""
    if is_loopback(host):
        return token
    if not allow_remote:
        raise ValueError(f"refusing to bind {host}: it is reachable from other machines. Pass --allow-remote "
                         "(a token is then required by the API and the page) or bind 127.0.0.1")
    return token or os.environ.get("WEBMP_TOKEN") or secrets.token_urlsafe(24)


def bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    return sock


def make_server(app: FastAPI):
    import uvicorn
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_max_size=WS_PROTOCOL_MAX_BYTES))


def cli_serve(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="webmp serve", description="Serve the browser runtime: the page trains "
                                "on navigator.gpu and streams its records to this server")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--runs", default="runs", help="directory holding the run directories (default runs/)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow binding an address other machines can reach; requires a token")
    p.add_argument("--token", default=None,
                   help="token the API and page must present (default: none on loopback; generated, or "
                        "$WEBMP_TOKEN, with --allow-remote)")
    args = p.parse_args(argv)
    try:
        token = server_token(args.host, args.allow_remote, args.token)
    except ValueError as e:
        print(f"webmp serve: {e}", file=sys.stderr)
        return 2
    app = create_app(args.runs, token)
    if not UPLOT_DIR.is_dir():
        print("webmp serve: web/node_modules/uplot is missing, so the page draws no charts; run "
              "`npm ci --prefix web`", file=sys.stderr)
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as e:
        print(f"webmp serve: cannot bind {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    server = make_server(app)
    print(f"webmp: serving the browser runtime at {page_url(args.host, sock.getsockname()[1], token)}"
          f"  (runs in {args.runs}/)", flush=True)
    if not is_loopback(args.host):
        print("webmp: note: browsers only expose WebGPU to secure contexts (https or localhost); from another "
              "machine, forward the port (ssh -L 8000:localhost:8000 ...) or put the server behind https", flush=True)
    server.run(sockets=[sock])
    return 0
