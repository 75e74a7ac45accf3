"""The browser runtime's server (FastAPI): the app, mounting the API's routers and the static files.

It serves the page (web/), the WGSL kernels (shaders/) and the chart library (uPlot, from
web/node_modules) as static files, and the API below; what a run is and how its reports are
stored lives in webmp/serve/runs.py and store.py, whose errors map to HTTP statuses here (the
statuses: webmp/serve/api.py). Who may talk to it is webmp/serve/security.py's; `webmp serve`
(binding, the URL it prints) is webmp/serve/cli.py's.

  GET  /api/form                        the page's form: TrainConfig fields, kinds, help, per-model defaults
  POST /api/runs                        create a run from a TrainConfig (JSON body)   -> RunInfo
                                        (its model_spec a network as JSON, its data an upload's hash)
  GET  /api/runs, /api/runs/{id}        list / status                                -> RunInfo
                                        (browser runs, and kind 'native': run directories `webmp
                                        train` wrote under the runs directory, read-only)
  GET  /api/runs/{id}/metrics?after=&wait=&max_points=   records with step > after; waits up to
                                        `wait` s for new ones; max_points thins them evenly (charts)
  GET  /api/runs/{id}/summary           summary.json once finished
  POST /api/runs/{id}/stop              ask the page training the run to stop (409 unless running)
  POST /api/runs/{id}/label             {name, note}: the run's name and note (any run)
  DELETE /api/runs/{id}                 an ended run off the list: its directory moves to .deleted/
  GET  /api/runs/{id}/plan?f16=native|emulated   the plan for a page whose adapter has (native) or
                                        lacks (emulated) shader-f16, resumed from the last checkpoint
  GET  /api/runs/{id}/blob?f16=...      the plan's initial-contents blob (octet-stream)
  PUT  /api/runs/{id}/checkpoint?f16=&step=   raw bytes of plan["checkpoint_buffers"], in order
                                        (those: webmp/serve/routes_runs.py)
  GET  /api/runs/{id}/files             what can be downloaded: the run directory's files, the
                                        metrics as CSV, the directory zipped
  GET  /api/runs/{id}/files/{name}      one of them, as an attachment (webmp/serve/routes_files.py)
  PUT  /api/data?name=FILE              the page's training data (raw bytes): checked by `webmp train
                                        --data`'s loaders, stored by SHA-256  -> {data: "sha256:..."}
  POST /api/network                     a config's network's layer table (or its one-line 422)
                                        (both: webmp/serve/routes_data.py)
  WS   /api/runs/{id}/ws                records and the summary (see webmp/serve/messages.py); a socket
                                        sending faster than WS_MESSAGES_PER_S / WS_BYTES_PER_S
                                        allow is closed with code 4429; one page per run trains
  WS   /api/runs/{id}/follow            a viewer: the records so far, then the new ones and status
                                        changes as they come (any number of viewers per run)
                                        (both: webmp/serve/sockets.py)
  GET  /api/runs/{id}/sample?f16=&prompt=&tokens=&temperature=&seed=   a finished GPT run's sampling
                                        plan (`webmp sample`'s, of its final checkpoint; settings left
                                        out: its defaults, served in /api/form), the vocabulary in
                                        plan["sample"]["vocab"]; 422 with one line for bad settings
  GET  /api/runs/{id}/sample/blob?...   that plan's blob (the same query)
                                        (both: webmp/serve/routes_sample.py)
  POST /api/adapters, /api/tune, /api/tune/results, /api/tune/forms, /api/tune/forms/results
                                        the page's tuning pass (webmp/serve/routes_tune.py)
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from ..resources import UPLOT_DIR, WEB_DIR
from . import routes_data, routes_files, routes_runs, routes_sample, routes_tune, sockets
from .api import HTTP_STATUS, SafeJSONResponse
from .errors import PageRunError
from .security import LOOPBACK_NAMES, request_guard
from .shaders import ShaderFiles, shader_texts
from .store import RunStore


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
    app.middleware("http")(request_guard(token, hosts))

    @app.exception_handler(PageRunError)
    async def page_run_error(request: Request, exc: PageRunError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=HTTP_STATUS.get(type(exc), 400))

    for routes in (
        routes_runs,
        routes_files,
        routes_data,
        routes_sample,
        routes_tune,
        sockets,
    ):  # the schema's order
        app.include_router(routes.router)
    mount_static(app)
    return app


def mount_static(app: FastAPI) -> None:
    """The kernels (each file, and all of them in one answer), the chart library and the page
    (web/, last: it answers every other path)."""

    @app.get("/shaders.json", include_in_schema=False)
    def all_shaders() -> JSONResponse:
        # the page's runner reads a plan's ~40 kernel files; one request a file took 0.35 s of a
        # cold start (the browser's six connections to one host), this one answer ~190 kB
        return JSONResponse(shader_texts())

    app.mount("/shaders", ShaderFiles(), name="shaders")
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
