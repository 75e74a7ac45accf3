"""What the /api routers share (webmp/serve/routes_*.py, sockets.py): each router, the JSON response
that writes non-finite floats as JSON has no literal for them, the error body and the answers a
route documents (the OpenAPI schema states every status a route answers), the HTTP status of each
PageRunError, the query parameters naming the page's f16 offer and adapter, and the run store.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from ..tune.page import ADAPTER_KEY_PATTERN
from .errors import (
    InvalidConfig,
    InvalidData,
    InvalidSample,
    InvalidUpload,
    RunStateConflict,
    TooLarge,
    UnknownRun,
)
from .messages import json_safe
from .store import RunStore

HTTP_STATUS = {
    UnknownRun: 404,
    RunStateConflict: 409,
    InvalidUpload: 400,
    InvalidConfig: 422,
    InvalidSample: 422,
    InvalidData: 422,
    TooLarge: 413,
}
F16 = Query(..., pattern="^(native|emulated)$", description="does the page's adapter have shader-f16")
# the page's adapter key (POST /api/adapters): the run's plan takes the matmul tiles tuned for it
TILES = Query(None, pattern=ADAPTER_KEY_PATTERN, description="the page's adapter key: its tuned matmul tiles")


class SafeJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return super().render(json_safe(content))


class Problem(BaseModel):
    """Every error's body: one line, or (a query FastAPI itself refuses, 422) pydantic's list."""

    detail: str | list[dict[str, Any]]


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


def api_router() -> APIRouter:
    """A router of /api routes. Every /api route may answer 401 (a missing or wrong token) and 403
    (request_refusal: another Host or Origin) before it runs.

    Routes that return plain dicts say response_model=None: a return annotation would otherwise make
    FastAPI serialise through pydantic, which writes NaN as null before SafeJSONResponse sees it."""
    return APIRouter(prefix="/api", responses=answers(401, 403))


def run_store(request: Request) -> RunStore:
    """The app's runs (create_app's RunStore)."""
    store: RunStore = request.app.state.store
    return store
