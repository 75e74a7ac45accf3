"""`webmp serve`: the browser runtime's server (FastAPI + uvicorn), as thin routes over webmp/serve/runs.py.

It serves the page (web/), the WGSL kernels (shaders/) and the chart library (uPlot, from
web/node_modules) as static files, and the API below; what a run is and how its reports are
stored lives in webmp/serve/runs.py, whose errors map to HTTP statuses here.

  GET  /api/form                        the page's form: TrainConfig fields, kinds, help, per-model defaults
  POST /api/runs                        create a run from a TrainConfig (JSON body)   -> RunInfo
  GET  /api/runs, /api/runs/{id}        list / status                                -> RunInfo
                                        (browser runs, and kind 'native': run directories `webmp
                                        train` wrote under the runs directory, read-only)
  GET  /api/runs/{id}/metrics?after=&wait=&max_points=   records with step > after; waits up to
                                        `wait` s for new ones; max_points thins them evenly (charts)
  GET  /api/runs/{id}/summary           summary.json once finished
  POST /api/runs/{id}/stop              ask the page training the run to stop (409 unless running)
  GET  /api/runs/{id}/plan?f16=native|emulated   the plan for a page whose adapter has (native) or
                                        lacks (emulated) shader-f16, resumed from the last checkpoint
  GET  /api/runs/{id}/blob?f16=...      the plan's initial-contents blob (octet-stream)
  PUT  /api/runs/{id}/checkpoint?f16=&step=   raw bytes of plan["checkpoint_buffers"], in order
  WS   /api/runs/{id}/ws                records and the summary (see webmp/serve/messages.py); a socket
                                        sending faster than WS_MESSAGES_PER_S / WS_BYTES_PER_S
                                        allow is closed with code 4429; one page per run trains
  WS   /api/runs/{id}/follow            a viewer: the records so far, then the new ones and status
                                        changes as they come (any number of viewers per run)
  GET  /api/runs/{id}/sample?f16=&prompt=&tokens=&temperature=&seed=   a finished GPT run's sampling
                                        plan (`webmp sample`'s, of its final checkpoint; settings left
                                        out: its defaults, served in /api/form), the vocabulary in
                                        plan["sample"]["vocab"]; 422 with one line for bad settings
  GET  /api/runs/{id}/sample/blob?...   that plan's blob (the same query)

Binding anything but loopback needs --allow-remote and a token that the API and the WebSocket
must present: `Authorization: Bearer <token>`, or a cookie. The URL `webmp serve` prints carries the
token once (as Jupyter's does); opening it answers with a redirect to the same URL without it and
sets the cookie (HttpOnly, SameSite=Strict), so the token travels in no URL after that.
Every request is checked first (request_refusal):
its Host must be one of the server's names (loopback, or the address bound; a page of another
site whose name was re-pointed at 127.0.0.1 cannot talk to it), its Origin, when sent, the
server's own, and a POST body JSON of at most 1 MiB (413 before reading a longer one).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import secrets
import signal
import socket
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ValidationError

from ..config import TrainConfig, config_error_message
from ..engine.plan import resolve_f16_path
from ..resources import SHADER_DIR, UPLOT_DIR, WEB_DIR
from ..train.rundir import lens_view
from ..tune.matmul_cases import FIT_LIMITS, kebab_limits
from ..tune.page import (
    ADAPTER_KEY_PATTERN,
    CaseResult,
    FormResult,
    FormsTuning,
    TuneResultError,
    Tuning,
    adapter_key,
    encode_blob,
    forms_plan,
    judge,
    judge_forms,
    result_output,
    store_choice,
    store_form,
    tuned_classes,
    tuned_forms,
    tuning_plan,
)
from .budget import check_plan_size
from .errors import InvalidConfig, InvalidSample, InvalidUpload, PageRunError, RunStateConflict, UnknownRun
from .form import page_form
from .messages import (
    MAX_MESSAGE_BYTES,
    AdapterSignature,
    AdapterTiles,
    RunInfo,
    TuneFormResults,
    TuneFormVerdict,
    TuneRequest,
    TuneResults,
    TuneVerdict,
    json_safe,
    parse_page_message,
)
from .native_runs import downsample
from .runs import PageRun, RunStore, training_data

WS_PROTOCOL_MAX_BYTES = 4 * 2**20  # frames above this are cut by uvicorn itself (connection closed)
# What one page's socket may send (token buckets: a burst, refilled at a rate). A page sends a hello,
# one records message per log interval (a readback of the GPU's metrics ring, a few ms at least, so
# rarely more than ~100 a second even with log_every 1), a summary or an end, and after a resume
# its backlog in chunks of at most MAX_MESSAGE_BYTES; these allow several times that. A socket over
# either is closed with WS_RATE_CLOSE: one client flooding would otherwise take the server's time.
WS_MESSAGES_PER_S, WS_MESSAGE_BURST = 200.0, 1000.0
WS_BYTES_PER_S, WS_BYTES_BURST = 4.0 * 2**20, 16.0 * 2**20
WS_RATE_CLOSE = 4429  # "too many requests", in the application's range of close codes
HTTP_STATUS = {
    UnknownRun: 404,
    RunStateConflict: 409,
    InvalidUpload: 400,
    InvalidConfig: 422,
    InvalidSample: 422,
}
MAX_POINTS = 100_000  # the most records a downsampled metrics answer may be asked for
F16 = Query(..., pattern="^(native|emulated)$", description="does the page's adapter have shader-f16")
Offer = Literal["native", "emulated"]
# the page's adapter key (POST /api/adapters): the run's plan takes the matmul tiles tuned for it
TILES = Query(None, pattern=ADAPTER_KEY_PATTERN, description="the page's adapter key: its tuned matmul tiles")


class SafeJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return super().render(json_safe(content))


def _store(request: Request) -> RunStore:
    store: RunStore = request.app.state.store
    return store


def _error_text(err: ValidationError, limit: int = 3) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:limit]]
    more = len(err.errors()) - limit
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


class Problem(BaseModel):
    """Every error's body: one line, or (a query FastAPI itself refuses, 422) pydantic's list."""

    detail: str | list[dict[str, Any]]


class Info(BaseModel):
    version: str
    token_required: bool
    uplot: bool


class Metrics(BaseModel):
    status: str
    records: list[dict[str, Any]]


class CheckpointSaved(BaseModel):
    checkpoint_step: int


def answers(*codes: int, ok: type[BaseModel] | None = None, binary: bool = False) -> dict[int | str, Any]:
    """The responses a route documents besides its success (the schema states every status a route
    answers: tests/serve/test_api_fuzz.py checks each answer against it); `ok`: the success's model, for
    routes that return plain dicts; `binary`: the success is application/octet-stream."""
    docs: dict[int | str, Any] = {code: {"model": Problem} for code in codes}
    if ok is not None:
        docs[200] = {"model": ok}
    if binary:
        docs[200] = {
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
        }
    return docs


# Routes that return plain dicts say response_model=None: a return annotation would otherwise make
# FastAPI serialise through pydantic, which writes NaN as null before SafeJSONResponse sees it.
# Every /api route may answer 401 (a missing or wrong token) and 403 (request_refusal: another Host
# or Origin) before it runs.
api = APIRouter(prefix="/api", responses=answers(401, 403))


@api.get("/info", response_model=None, responses=answers(ok=Info))
def api_info(request: Request) -> dict[str, Any]:
    from .. import __version__

    return {
        "version": __version__,
        "token_required": request.app.state.token is not None,
        "uplot": UPLOT_DIR.is_dir(),
    }


@api.get("/form", response_model=None)
def api_form() -> dict[str, Any]:
    """The fields the page's form offers and each model's defaults (webmp.serve.runs.page_form)."""
    return page_form()


@api.get("/runs", response_model=list[RunInfo])
def list_runs(request: Request) -> list[RunInfo]:
    """Every run in the runs directory, oldest first: browser runs and those `webmp train` wrote
    there (kind 'native', read-only)."""
    return _store(request).listing()


@api.post(
    "/runs",
    status_code=201,
    response_model=RunInfo,
    responses=answers(413, 415, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": TrainConfig.model_json_schema()}},
        }
    },
)
async def create_run(request: Request) -> RunInfo:
    raw = bytearray()
    async for chunk in request.stream():  # a body without Content-Length is cut at the same size
        raw += chunk
        if len(raw) > MAX_JSON_BODY:
            raise HTTPException(413, f"POST bodies are at most {MAX_JSON_BODY} bytes")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        raise HTTPException(422, "the body must be a JSON object of TrainConfig fields") from None
    if not isinstance(body, dict):
        raise HTTPException(422, "the body must be a JSON object of TrainConfig fields")
    try:
        cfg = TrainConfig(**body)
    except ValidationError as e:
        raise HTTPException(422, config_error_message(e)) from None
    await asyncio.to_thread(training_data, cfg)  # loaded once per process, off the event loop
    return _store(request).create(cfg).info()


@api.get("/runs/{run_id}", response_model=RunInfo, responses=answers(404))
def run_status(request: Request, run_id: str) -> RunInfo:
    return _store(request).view(run_id).info()


@api.post("/runs/{run_id}/stop", response_model=RunInfo, responses=answers(404, 409, 413, 415))
def stop_run(request: Request, run_id: str) -> RunInfo:
    """Ask the page training a running browser run to stop (what a following page's Stop does): it
    stops at its next metrics read, as its own Stop does; 409 unless the run is running."""
    run = _store(request).get(run_id)
    run.request_stop()
    return run.info()


@api.get("/runs/{run_id}/metrics", response_model=None, responses=answers(404, 422, ok=Metrics))
async def run_metrics(
    request: Request,
    run_id: str,
    after: int = -1,
    wait: float = Query(0, ge=0, le=60),
    max_points: int | None = Query(
        None,
        ge=2,
        le=MAX_POINTS,
        description="at most this many records, evenly spaced, the last always included (charts)",
    ),
) -> dict[str, Any]:
    run = _store(request).view(run_id)
    if wait > 0 and run.last_step <= after and run.status in ("created", "running"):
        await run.wait_changed(wait)
    records = [r for r in run.records if r["step"] > after]
    return {"status": run.status, "records": downsample(records, max_points) if max_points else records}


@api.get("/runs/{run_id}/summary", response_model=None, responses=answers(404))
def run_summary(request: Request, run_id: str) -> Any:
    run = _store(request).view(run_id)
    if not run.dir.has_summary():
        raise HTTPException(404, f"run {run_id} has no summary yet (status {run.status})")
    return run.dir.read_summary()


@api.get("/runs/{run_id}/histograms", response_model=None, responses=answers(404, 409))
def run_histograms(request: Request, run_id: str) -> Any:
    """The gradient-range lens's last read (histograms.jsonl's last line), with each layer's shares
    against f16's range as stored and unscaled: what a page shows for a run it did not train."""
    run = _store(request).view(run_id)
    try:
        lines = run.dir.read_histograms()
    except ValueError as e:  # a damaged line: the file is the run's record, left as it is
        raise HTTPException(409, str(e)) from None
    if not lines:
        raise HTTPException(404, f"run {run_id} has no gradient histograms yet (status {run.status})")
    return lens_view(lines[-1], len(lines))


@api.get("/runs/{run_id}/plan", response_model=None, responses=answers(404, 409, 422))
async def run_plan(
    request: Request, run_id: str, f16: Offer = F16, tiles: str | None = TILES
) -> dict[str, Any]:
    run = _store(request).get(run_id)
    plan, _, start = await asyncio.to_thread(run.plan, f16, tiles)
    return {
        "run_id": run.id,
        "start_step": start,
        "f16_path": plan["f16_path"] or "fp32",
        "matmul_tiles": run.matmul_tiles,
        "plan": plan,
    }


@api.get(
    "/runs/{run_id}/blob",
    response_model=None,
    response_class=Response,
    responses=answers(404, 409, 422, binary=True),
)
async def run_blob(request: Request, run_id: str, f16: Offer = F16, tiles: str | None = TILES) -> Response:
    _, blob, _ = await asyncio.to_thread(_store(request).get(run_id).plan, f16, tiles)
    return Response(blob, media_type="application/octet-stream")


@api.put(
    "/runs/{run_id}/checkpoint",
    response_model=None,
    responses=answers(400, 404, 409, 413, 422, ok=CheckpointSaved),
    openapi_extra={  # the raw bytes of plan["checkpoint_buffers"], in order
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload_checkpoint(
    request: Request, run_id: str, step: int = Query(..., ge=1), f16: Offer = F16
) -> dict[str, int]:
    run = _store(request).get(run_id)
    if run.status != "running":  # first: an ended run's plan is no longer cached, and a refusal needs none
        raise RunStateConflict(f"run {run_id} is {run.status}; only a running page uploads checkpoints")
    _, layout = await asyncio.to_thread(run.checkpoint_layout, f16)
    expected = sum(n for _, n in layout)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > expected:
            raise HTTPException(413, f"a checkpoint of this plan is {expected} bytes")
    await asyncio.to_thread(run.save_checkpoint, f16, step, bytes(body))
    run.checkpoint_saved(step)
    return {"checkpoint_step": step}


@dataclass
class SampleQuery:
    """The query of both sample routes. The settings travel as text and are checked by
    webmp.sample.job.parse_settings, so that a bad value is refused with one line (FastAPI's own
    validation answers with a list)."""

    f16: Offer = F16
    prompt: str = ""
    tokens: str | None = None
    temperature: str | None = None
    seed: str | None = None

    async def build(self, request: Request, run_id: str, keep: bool = True) -> Any:
        run = _store(request).get(run_id)
        settings = {"tokens": self.tokens, "temperature": self.temperature, "seed": self.seed}
        return await asyncio.to_thread(run.sample_plan, self.f16, self.prompt, **settings, keep=keep)


@api.get("/runs/{run_id}/sample", response_model=None, responses=answers(404, 409, 422))
async def run_sample_plan(
    request: Request, run_id: str, q: Annotated[SampleQuery, Depends()]
) -> dict[str, Any]:
    plan, _, job = await q.build(request, run_id)
    return {
        "run_id": run_id,
        "f16_path": plan["f16_path"] or "fp32",
        "prompt": job.prompt,
        "tokens": job.tokens,
        "temperature": job.temperature,
        "seed": job.seed,
        "plan": plan,
    }


@api.get(
    "/runs/{run_id}/sample/blob",
    response_model=None,
    response_class=Response,
    responses=answers(404, 409, 422, binary=True),
)
async def run_sample_blob(request: Request, run_id: str, q: Annotated[SampleQuery, Depends()]) -> Response:
    _, blob, _ = await q.build(request, run_id, keep=False)
    return Response(blob, media_type="application/octet-stream")


# --- the page's tuning pass (webmp.tune.page) ----------------------------------------------------
# FastAPI reads these bodies into their models: a body that is not JSON gets its 400, a wrong one 422.


@api.post("/adapters", response_model=AdapterTiles, responses=answers(400, 413, 422))
def adapter_tiles(signature: AdapterSignature) -> AdapterTiles:
    """The key of a page's adapter and the matmul tiles and forms tuned for it so far (none: the defaults)."""
    key = adapter_key(signature.model_dump())
    return AdapterTiles(adapter_key=key, tuned=tuned_classes(key), forms=tuned_forms(key))


def _tuned_config(req: TuneRequest) -> tuple[TrainConfig, str]:
    """A tuning request's config and storage path, checked as POST /api/runs checks them."""
    try:
        cfg = TrainConfig(**req.config)
    except ValidationError as e:
        raise HTTPException(422, config_error_message(e)) from None
    missing = [k for k in FIT_LIMITS if k not in kebab_limits(req.limits)]
    if missing:
        raise HTTPException(422, f"limits: the tile choices need the adapter's {', '.join(missing)}")
    try:
        path = resolve_f16_path(cfg.precision, cfg.f16, req.f16 == "native")
    except RuntimeError as e:
        raise HTTPException(409, str(e)) from None
    check_plan_size(cfg, training_data(cfg))
    return cfg, path


@lru_cache(maxsize=2)
def _tuning(request_json: str) -> Tuning:
    req = TuneRequest.model_validate_json(request_json)
    cfg, path = _tuned_config(req)
    has_subgroups = "subgroups" in req.adapter.features
    return tuning_plan(cfg, training_data(cfg), path, req.limits, has_subgroups, req.max_candidates)


def tuning_for(req: TuneRequest) -> Tuning:
    """The tuning plan of a request, built once for the request and its results (the last two kept)."""
    return _tuning(req.model_dump_json())


@api.post("/tune", response_model=None, responses=answers(400, 409, 413, 422))
async def tune_plan(req: TuneRequest) -> dict[str, Any]:
    """A tuning plan for the config's matmuls on the page's adapter (webmp.tune.page): the page runs
    each case's check and time programs and posts each class's results to /api/tune/results."""
    tuning = await asyncio.to_thread(tuning_for, req)
    return {
        "adapter_key": adapter_key(req.adapter.model_dump()),
        "f16_path": tuning.path,
        "plan": tuning.plan,
        "blob": encode_blob(tuning.blob),
        "classes": tuning.describe(),
    }


@api.post("/tune/results", response_model=TuneVerdict, responses=answers(400, 409, 413, 422))
async def tune_results(body: TuneResults) -> TuneVerdict:
    """Judges a class's results (outputs against float64) and stores the fastest correct choice
    under the adapter's key, where plans asked for with ?tiles=KEY find it."""
    tuning = await asyncio.to_thread(tuning_for, body.request)
    if body.shape_class not in {c.cls for c in tuning.cases}:
        raise HTTPException(
            422, f"shape_class: {body.shape_class!r} is not one of this tuning plan's classes"
        )
    try:
        results = [CaseResult(r.case, r.seconds, r.reps, result_output(r.output)) for r in body.results]
        verdict = judge(tuning, body.shape_class, results)
    except TuneResultError as e:
        raise HTTPException(422, f"results: {e}") from None
    key = adapter_key(body.request.adapter.model_dump())
    if verdict["tiles"] is not None:
        store_choice(key, body.shape_class, verdict["tiles"])
    return TuneVerdict(adapter_key=key, shape_class=verdict.pop("class"), **verdict)


def forms_for(req: TuneRequest) -> FormsTuning:
    """The form choices of a request's config, on the tiles tuned for its adapter so far (built
    anew each time: the class results posted in between change those tiles)."""
    cfg, path = _tuned_config(req)
    return forms_plan(cfg, path, adapter_key(req.adapter.model_dump()))


@api.post("/tune/forms", response_model=None, responses=answers(400, 409, 413, 422))
async def tune_forms_plan(req: TuneRequest) -> dict[str, Any]:
    """After the classes: the forms the config's plan uses (webmp.tune.page.forms_plan), each a
    program; the page runs each once, digests its outputs, times it and posts each choice's results
    to /api/tune/forms/results. No choice (the plain MLP): no plan and an empty list."""
    forms = await asyncio.to_thread(forms_for, req)
    return {
        "adapter_key": adapter_key(req.adapter.model_dump()),
        "plan": forms.plan,
        "blob": encode_blob(forms.blob),
        "forms": forms.describe(),
    }


@api.post("/tune/forms/results", response_model=TuneFormVerdict, responses=answers(400, 409, 413, 422))
async def tune_forms_results(body: TuneFormResults) -> TuneFormVerdict:
    """Keeps the faster form of a choice where every form's outputs had the same digest, else the
    default, and stores it under the adapter's key, where plans asked for with ?tiles=KEY find it."""
    forms = await asyncio.to_thread(forms_for, body.request)
    spec = forms.spec(body.what)
    if spec is None:
        raise HTTPException(422, f"what: {body.what!r} is not one of this config's form choices")
    try:
        verdict = judge_forms(spec, [FormResult(r.form, r.seconds, r.reps, r.digest) for r in body.results])
    except TuneResultError as e:
        raise HTTPException(422, f"results: {e}") from None
    key = adapter_key(body.request.adapter.model_dump())
    store_form(key, spec.what, verdict["form"])
    return TuneFormVerdict(adapter_key=key, **verdict)


@api.websocket("/runs/{run_id}/ws")
async def run_socket(ws: WebSocket, run_id: str) -> None:
    refused = request_refusal("GET", ws.headers, ws.app.state.hosts)
    if not token_ok(ws.app.state.token, given_token(ws.headers, ws.cookies)) or refused:
        await ws.close(code=4401)  # a missing token, a page of another site, or another Host
        return
    store: RunStore = ws.app.state.store
    try:
        run: PageRun | None = store.get(run_id)
        why = f"run {run_id} already has a page connected"  # when it has
    except PageRunError as e:  # an unknown run, or a native one
        run, why = None, str(e)
    await ws.accept()
    if run is None or run.connected:
        await ws.send_json({"type": "error", "message": why})
        await ws.close(code=4404 if run_id not in store.native and run is None else 4409)
        return
    run.connected = True
    run.notify()  # followers of a created run learn that a page is preparing it
    limit = RateLimit()
    try:
        await ws.send_json(
            {"type": "welcome", "run_id": run.id, "status": run.status, "last_step": run.last_step}
        )
        while True:
            frame = await ws.receive()
            if frame["type"] == "websocket.disconnect":
                break
            text, data = frame.get("text"), frame.get("bytes")
            over = limit.take(len(text.encode()) if text is not None else len(data or b""))
            if over:
                await ws.close(code=WS_RATE_CLOSE, reason=over)
                break
            await ws.send_json(await reply_to(run, text))
            await asyncio.sleep(0)  # let other requests run between frames of a busy socket
    except WebSocketDisconnect:
        pass
    finally:
        run.disconnected()


FOLLOW_CHUNK = 500  # records per message to a follower (the backlog goes in chunks of this)
FOLLOW_IDLE_S = 15.0  # a follower's loop looks at the run at least this often


@api.websocket("/runs/{run_id}/follow")
async def follow_run(ws: WebSocket, run_id: str) -> None:
    """A viewer of a run (any number per run, browser or native): the records so far, then each new
    batch as the training page posts it, and the run's status when it changes; closed after an ended
    run's status (any status but created and running: a disconnected run is resumed by a page that
    opens it, which a viewer may follow anew). Nothing is queued per follower: each sends what the
    run holds past the last record it sent, so a slow follower catches up in bigger messages and
    never holds back the trainer."""
    refused = request_refusal("GET", ws.headers, ws.app.state.hosts)
    if not token_ok(ws.app.state.token, given_token(ws.headers, ws.cookies)) or refused:
        await ws.close(code=4401)
        return
    store: RunStore = ws.app.state.store
    await ws.accept()
    try:
        run = store.view(run_id)
    except PageRunError as e:
        await ws.send_json({"type": "error", "message": str(e)})
        await ws.close(code=4404)
        return
    closed = asyncio.ensure_future(ws.receive())  # the viewer leaving (it sends nothing else)
    sent_step, sent_status = -1, None
    changed: asyncio.Future[None] | None = None
    try:
        while True:
            changed = asyncio.ensure_future(run.wait_changed(FOLLOW_IDLE_S))  # a change from now on
            records = run.records  # only grows while a viewer follows (a resume truncates it first)
            new = len(records)
            while new > 0 and records[new - 1]["step"] > sent_step:
                new -= 1
            for i in range(new, len(records), FOLLOW_CHUNK):
                chunk = records[i : i + FOLLOW_CHUNK]
                message = {"type": "records", "records": chunk}
                await ws.send_text(json.dumps(json_safe(message)))
                sent_step = int(chunk[-1]["step"])
            connected = run.kind == "native" or run.connected
            status = (run.status, run.message, run.stop_requested, connected)
            if status != sent_status:
                await ws.send_json(
                    {
                        "type": "status",
                        "status": status[0],
                        "message": status[1],
                        "last_step": run.last_step,
                        "stop_requested": status[2],
                        "connected": connected,
                    }
                )
                sent_status = status
            if status[0] not in ("created", "running"):
                await ws.close(code=1000)
                break
            await asyncio.wait({changed, closed}, return_when=asyncio.FIRST_COMPLETED)
            if closed.done():
                break
    except (WebSocketDisconnect, RuntimeError):  # the viewer left while a message was on its way
        pass
    finally:
        closed.cancel()
        if changed is not None:
            changed.cancel()


class RateLimit:
    """Token buckets for one socket: WS_MESSAGE_BURST messages refilled at WS_MESSAGES_PER_S, and
    WS_BYTES_BURST bytes at WS_BYTES_PER_S."""

    def __init__(self, clock: Any = time.monotonic):
        self.clock = clock
        self.last = clock()
        self.messages, self.bytes = WS_MESSAGE_BURST, WS_BYTES_BURST

    def take(self, nbytes: int) -> str | None:
        """Spend one message of nbytes; None, or the reason (a close reason, under 123 bytes) when
        the socket has gone over a limit."""
        now = self.clock()
        elapsed, self.last = now - self.last, now
        self.messages = min(WS_MESSAGE_BURST, self.messages + elapsed * WS_MESSAGES_PER_S) - 1
        self.bytes = min(WS_BYTES_BURST, self.bytes + elapsed * WS_BYTES_PER_S) - nbytes
        if self.messages < 0:
            return f"over {WS_MESSAGES_PER_S:g} messages/s (burst {WS_MESSAGE_BURST:g})"
        if self.bytes < 0:
            return f"over {WS_BYTES_PER_S / 2**20:g} MiB/s (burst {WS_BYTES_BURST / 2**20:g} MiB)"
        return None


async def reply_to(run: PageRun, text: str | None) -> dict[str, Any]:
    """The answer to one WebSocket frame: an ack, or an error (the message is then dropped)."""
    if text is None:
        return {"type": "error", "message": "only JSON text messages are accepted"}
    if len(text.encode()) > MAX_MESSAGE_BYTES:
        return {"type": "error", "message": f"message over {MAX_MESSAGE_BYTES} bytes dropped"}
    try:
        msg = parse_page_message(json.loads(text))
    except ValidationError as e:
        return {"type": "error", "message": f"message dropped: {_error_text(e)}"}
    except ValueError as e:
        return {"type": "error", "message": f"message dropped: invalid JSON ({e})"}
    except RecursionError:
        return {"type": "error", "message": "message dropped: JSON nested too deeply"}
    try:
        return await run.handle(msg)
    except PageRunError as e:
        return {"type": "error", "message": str(e)}


LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_JSON_BODY = 1 << 20  # a TrainConfig is a few hundred bytes; POST bodies above this get 413


def host_name(netloc: str) -> str:
    """The host of a Host header or an Origin's netloc, lowercased, without port or brackets."""
    return (urlsplit(f"//{netloc}").hostname or "").lower()


def request_refusal(
    method: str, headers: Any, allowed_hosts: frozenset[str] | None
) -> tuple[int, str] | None:
    """(status, one line) when a request must be refused before any route runs, else None.

    - Host must name this server (allowed_hosts; None: any, for a wildcard bind, where the token
      guards): a page of another site whose name was re-pointed at 127.0.0.1 (DNS rebinding)
      sends its own name.
    - Origin, when sent, must be this server's own (same host and port as Host): a page of another
      site may send requests but not read their answers, and must not change anything.
    - POST bodies must be JSON (a cross-site form or text/plain POST needs no preflight) and at
      most MAX_JSON_BODY bytes (Content-Length, refused before the body is read)."""
    host = headers.get("host", "")
    if allowed_hosts is not None and host_name(host) not in allowed_hosts:
        shown = host_name(host) or "(none)"
        return 403, f"Host {shown!r} is not this server's name (a guard against DNS rebinding)"
    origin = headers.get("origin")
    if origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != host.lower()):
        return 403, f"requests from another site ({origin}) are refused"
    if method == "POST":
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            return 415, f"POST bodies must be application/json, got {ctype or 'no content type'}"
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_JSON_BODY):
            return 413, f"POST bodies are at most {MAX_JSON_BODY} bytes"
    return None


TOKEN_COOKIE = "webmp_token"


def given_token(headers: Any, cookies: Any) -> str | None:
    """The token a request presents: `Authorization: Bearer`, or the cookie the page got when it
    was opened with ?token= (never a query string: URLs end up in logs and histories)."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return str(auth[7:])
    cookie = cookies.get(TOKEN_COOKIE)
    return str(cookie) if cookie is not None else None


def token_ok(token: str | None, given: str | None) -> bool:
    return token is None or (given is not None and secrets.compare_digest(given.encode(), token.encode()))


def create_app(
    runs_root: str | Path = "runs",
    token: str | None = None,
    hosts: frozenset[str] | None = LOOPBACK_NAMES,
) -> FastAPI:
    """The app; `hosts`: the names a request's Host may give (default: loopback; None: any)."""
    # the schema under /api/, where the token applies (at /openapi.json it would be public)
    app = FastAPI(
        title="webmp",
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
        default_response_class=SafeJSONResponse,
    )
    app.state.store = RunStore(runs_root)
    app.state.token = token
    app.state.hosts = hosts

    @app.middleware("http")
    async def require_token(request: Request, call_next: Any) -> Any:
        refusal = request_refusal(request.method, request.headers, hosts)
        if refusal is not None:
            return JSONResponse({"detail": refusal[1]}, status_code=refusal[0])
        if token is not None and "token" in request.query_params and not request.url.path.startswith("/api/"):
            # the page's URL as `webmp serve` printed it: the token becomes a cookie and leaves the URL
            if not token_ok(token, request.query_params["token"]):
                return JSONResponse({"detail": "wrong token in the URL"}, status_code=401)
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + ("?" + urlencode(rest) if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/")
            return response
        if request.url.path.startswith("/api/") and token is not None:
            given = given_token(request.headers, request.cookies)
            if not token_ok(token, given):
                return JSONResponse(
                    {"detail": "a valid token is required (Authorization: Bearer <token>)"}, status_code=401
                )
        return await call_next(request)

    @app.exception_handler(PageRunError)
    async def page_run_error(request: Request, exc: PageRunError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=HTTP_STATUS.get(type(exc), 400))

    app.include_router(api)
    app.mount("/shaders", StaticFiles(directory=SHADER_DIR), name="shaders")
    if UPLOT_DIR.is_dir():
        app.mount("/vendor/uplot", StaticFiles(directory=UPLOT_DIR), name="uplot")
    else:  # a 404 that says why (StaticFiles answers 500 for a missing directory)

        @app.get("/vendor/uplot/{path:path}", include_in_schema=False)
        def no_uplot(path: str) -> JSONResponse:
            detail = "the chart library is not installed: run `npm ci --prefix web`"
            return JSONResponse({"detail": detail}, status_code=404)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:  # what browsers and tools ask for by default; the page links favicon.svg
        return Response((WEB_DIR / "favicon.svg").read_bytes(), media_type="image/svg+xml")

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
        raise ValueError(
            f"refusing to bind {host}: it is reachable from other machines. Pass --allow-remote "
            "(a token is then required by the API and the page) or bind 127.0.0.1"
        )
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


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 0 to 65535, got {text!r}")
    return port


def cli_serve(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="webmp serve",
        description="Serve the browser runtime: the page trains "
        "on navigator.gpu and streams its records to this server",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)"
    )
    p.add_argument("--port", type=port_number, default=8000, help="TCP port (default 8000; 0: any free one)")
    p.add_argument("--runs", default="runs", help="directory holding the run directories (default runs/)")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow binding an address other machines can reach; requires a token",
    )
    p.add_argument(
        "--token",
        default=None,
        help="token the API and page must present (default: none on loopback; generated, or "
        "$WEBMP_TOKEN, with --allow-remote)",
    )
    args = p.parse_args(argv)
    try:
        token = server_token(args.host, args.allow_remote, args.token)
    except ValueError as e:
        print(f"webmp serve: {e}", file=sys.stderr)
        return 2
    wildcard = args.host in ("0.0.0.0", "::")
    # a wildcard bind has no one name: any Host, the (then required) token guards
    hosts = None if wildcard else LOOPBACK_NAMES | {host_name(args.host)}
    app = create_app(args.runs, token, hosts)
    if not UPLOT_DIR.is_dir():
        print(
            "webmp serve: web/node_modules/uplot is missing, so the page draws no charts; run "
            "`npm ci --prefix web`",
            file=sys.stderr,
        )
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as e:
        print(f"webmp serve: cannot bind {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    server = make_server(app)
    # Ctrl-C at any moment asks the server to stop. uvicorn has its own handler only while it
    # serves (and raises the signal again once it has shut down); before that, Python's default
    # handler would raise KeyboardInterrupt wherever the start-up happens to be, and inside asyncio's
    # runner that can be swallowed, leaving a server that never started shutting down.
    interrupted: list[int] = []

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted.append(signum)
        server.should_exit = True

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        print(
            f"webmp: serving the browser runtime at {page_url(args.host, sock.getsockname()[1], token)}"
            f"  (runs in {args.runs}/)",
            flush=True,
        )
        if not is_loopback(args.host):
            print(
                "webmp: note: browsers only expose WebGPU to secure contexts (https or localhost); from "
                "another machine, forward the port (ssh -L 8000:localhost:8000 ...) or put the server "
                "behind https",
                flush=True,
            )
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        interrupted.append(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:  # Ctrl-C is how a server is ended, not a failure: status 0, as `python -m http.server`
        print("webmp serve: stopped (Ctrl-C)", file=sys.stderr, flush=True)
    return 0
