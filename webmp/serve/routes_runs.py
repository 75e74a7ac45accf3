"""The runs' REST routes: the server's info and the page's form, creating and listing runs, a run's
status, records, summary, lens, training plan and blob, checkpoint uploads and stop requests
(thin routes over webmp/serve/store.py and runs.py, whose errors map to HTTP statuses in app.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import HTTPException, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel

from ..config import TrainConfig
from ..resources import UPLOT_DIR
from ..train.rundir import lens_view
from .api import F16, TILES, answers, api_router, run_store
from .errors import RunStateConflict
from .form import page_config, page_form
from .messages import Label, Offer, RunInfo
from .native_runs import downsample
from .security import MAX_JSON_BODY, read_body

MAX_POINTS = 100_000  # the most records a downsampled metrics answer may be asked for


class Info(BaseModel):
    version: str
    token_required: bool
    uplot: bool


class Metrics(BaseModel):
    status: str
    records: list[dict[str, Any]]


class CheckpointSaved(BaseModel):
    checkpoint_step: int


router = api_router()


async def json_body(request: Request) -> Any:
    """A POST's JSON body (at most MAX_JSON_BODY bytes, else 413), parsed; 422 if it is not JSON."""
    raw = await read_body(request, MAX_JSON_BODY, f"POST bodies are at most {MAX_JSON_BODY} bytes")
    try:
        return json.loads(raw)
    except ValueError:
        raise HTTPException(422, "the body must be a JSON object of TrainConfig fields") from None
    except RecursionError:
        raise HTTPException(422, "the body nests deeper than the server's JSON parser goes") from None


def browser_config_schema() -> dict:
    """TrainConfig's JSON schema as a page may send it, its network an object or its JSON text (the
    network's own schema, webmp.nn.network_schema(), is left out: with it the API fuzzer's generated
    bodies almost never made a run; page_network checks it in `webmp train --model-spec`'s words)."""
    schema = TrainConfig.model_json_schema()
    spec = schema["properties"]["model_spec"]
    schema["properties"]["model_spec"] = {
        "anyOf": [{"type": "object"}, {"type": "string"}, {"type": "null"}],
        "default": None,
        "description": spec.get("description", ""),
    }
    schema.pop("$defs", None)
    return schema


@router.get("/info", response_model=None, responses=answers(ok=Info))
def api_info(request: Request) -> dict[str, Any]:
    from .. import __version__

    return {
        "version": __version__,
        "token_required": request.app.state.token is not None,
        "uplot": UPLOT_DIR.is_dir(),
    }


@router.get("/form", response_model=None)
def api_form() -> dict[str, Any]:
    """The fields the page's form offers and each model's defaults (webmp.serve.form.page_form)."""
    return page_form()


@router.get("/runs", response_model=list[RunInfo])
def list_runs(request: Request) -> list[RunInfo]:
    """Every run in the runs directory, oldest first: browser runs and those `webmp train` wrote
    there (kind 'native', read-only)."""
    return run_store(request).listing()


@router.post(
    "/runs",
    status_code=201,
    response_model=RunInfo,
    responses=answers(413, 415, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": browser_config_schema()}},
        }
    },
)
async def create_run(request: Request) -> RunInfo:
    cfg = page_config(await json_body(request))
    store = run_store(request)
    await asyncio.to_thread(store.data.load, cfg)  # loaded once per process, off the event loop
    return store.create(cfg).info()


@router.get("/runs/{run_id}", response_model=RunInfo, responses=answers(404))
def run_status(request: Request, run_id: str) -> RunInfo:
    return run_store(request).view(run_id).info()


@router.post("/runs/{run_id}/label", response_model=RunInfo, responses=answers(404, 413, 415, 422))
def label_run(request: Request, run_id: str, label: Label) -> RunInfo:
    """Name a run and note what it was for (any run: browser or native); {"name": "", "note": ""}
    clears both."""
    return run_store(request).label(run_id, label)


class Deleted(BaseModel):
    id: str
    moved_to: str  # where its directory now is (ROOT/.deleted/...): nothing is erased


@router.delete("/runs/{run_id}", response_model=Deleted, responses=answers(404, 409))
def delete_run(request: Request, run_id: str) -> Deleted:
    """Take an ended run off the list: its directory moves to the runs directory's .deleted/ folder
    (409 while it trains or a page prepares it)."""
    return Deleted(id=run_id, moved_to=str(run_store(request).delete(run_id)))


@router.post("/runs/{run_id}/stop", response_model=RunInfo, responses=answers(404, 409, 413, 415))
def stop_run(request: Request, run_id: str) -> RunInfo:
    """Ask the page training a running browser run to stop (what a following page's Stop does): it
    stops at its next metrics read, as its own Stop does; 409 unless the run is running."""
    run = run_store(request).get(run_id)
    run.request_stop()
    return run.info()


@router.get("/runs/{run_id}/metrics", response_model=None, responses=answers(404, 422, ok=Metrics))
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
    run = run_store(request).view(run_id)
    if wait > 0 and run.last_step <= after and run.status in ("created", "running"):
        await run.wait_changed(wait)
    records = [r for r in run.records if r["step"] > after]
    return {"status": run.status, "records": downsample(records, max_points) if max_points else records}


@router.get("/runs/{run_id}/summary", response_model=None, responses=answers(404))
def run_summary(request: Request, run_id: str) -> Any:
    run = run_store(request).view(run_id)
    if not run.dir.has_summary():
        raise HTTPException(404, f"run {run_id} has no summary yet (status {run.status})")
    return run.dir.read_summary()


@router.get("/runs/{run_id}/histograms", response_model=None, responses=answers(404, 409))
def run_histograms(
    request: Request,
    run_id: str,
    read: int | None = Query(None, ge=0, description="which read (0: the first); default the last"),
) -> Any:
    """The gradient-range lens's read `read` (a line of histograms.jsonl; default the last), with each
    layer's shares against f16's range as stored and unscaled, and how many reads the run has: what
    a page shows for a run it did not train (its slider asks for each read)."""
    run = run_store(request).view(run_id)
    try:
        lines = run.dir.read_histograms()
    except ValueError as e:  # a damaged line: the file is the run's record, left as it is
        raise HTTPException(409, str(e)) from None
    if not lines:
        raise HTTPException(404, f"run {run_id} has no gradient histograms yet (status {run.status})")
    if read is not None and read >= len(lines):
        raise HTTPException(
            404, f"run {run_id} has {len(lines)} gradient histogram reads (0 .. {len(lines) - 1})"
        )
    return lens_view(lines[-1 if read is None else read], len(lines))


@router.get("/runs/{run_id}/plan", response_model=None, responses=answers(404, 409, 422))
async def run_plan(
    request: Request, run_id: str, f16: Offer = F16, tiles: str | None = TILES
) -> dict[str, Any]:
    run = run_store(request).get(run_id)
    plan, _, start = await asyncio.to_thread(run.plan, f16, tiles)
    return {
        "run_id": run.id,
        "start_step": start,
        "f16_path": plan["f16_path"] or "fp32",
        "matmul_tiles": run.matmul_tiles,
        "generates_text": run.cfg.trains_on_text,
        "plan": plan,
    }


@router.get(
    "/runs/{run_id}/blob",
    response_model=None,
    response_class=Response,
    responses=answers(404, 409, 422, binary=True),
)
async def run_blob(request: Request, run_id: str, f16: Offer = F16, tiles: str | None = TILES) -> Response:
    _, blob, _ = await asyncio.to_thread(run_store(request).get(run_id).plan, f16, tiles)
    return Response(blob, media_type="application/octet-stream")


@router.put(
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
    run = run_store(request).get(run_id)
    if run.status != "running":  # first: an ended run's plan is no longer cached, and a refusal needs none
        raise RunStateConflict(f"run {run_id} is {run.status}; only a running page uploads checkpoints")
    _, layout = await asyncio.to_thread(run.checkpoint_layout, f16)
    expected = sum(n for _, n in layout)
    body = await read_body(request, expected, f"a checkpoint of this plan is {expected} bytes")
    await asyncio.to_thread(run.save_checkpoint, f16, step, body)
    run.checkpoint_saved(step)
    return {"checkpoint_step": step}
