"""What a page's form checks before a run: its data upload (PUT /api/data: checked by `webmp train
--data`'s loaders, stored by its SHA-256; webmp/serve/page_data.py) and its network's layer table
(POST /api/network: webmp.models.summary.layer_table, or the network's one-line error).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Query, Request
from pydantic import BaseModel

from ..models.summary import layer_table
from .api import answers, api_router, run_store
from .budget import check_plan_size
from .errors import InvalidConfig
from .form import page_config
from .page_data import check_network_data
from .routes_runs import browser_config_schema, json_body
from .security import MAX_UPLOAD_BYTES, read_body


class Upload(BaseModel):
    data: str  # what the config's data field names it by: "sha256:<hex>"
    name: str
    format: str  # npz, csv or text
    bytes: int
    description: str


router = api_router()
# A file's name as the page's file picker gives it: only its suffix (the format) and the messages
# read it, never a path on the server; one with a folder in it is refused.
FILE_NAME = Query(
    ...,
    min_length=1,
    max_length=255,
    pattern=r"^[^/\\\x00-\x1f]+$",
    description="the file's name: .npz or .csv, a table; anything else, UTF-8 text",
)


@router.put(
    "/data",
    response_model=Upload,
    responses=answers(413, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload_data(request: Request, name: str = FILE_NAME) -> Upload:
    """Training data for browser runs (at most MAX_UPLOAD_BYTES): checked as `webmp train --data`
    checks a file (422 in its words) and stored in the runs directory under its SHA-256, which a
    config's data field then names ("sha256:<hex>")."""
    raw = await read_body(request, MAX_UPLOAD_BYTES, f"a data upload is at most {MAX_UPLOAD_BYTES} bytes")
    return Upload(**await asyncio.to_thread(run_store(request).data.upload, raw, name))


@router.post(
    "/network",
    response_model=None,
    responses=answers(413, 415, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": browser_config_schema()}},
        }
    },
)
async def network_table(request: Request) -> dict[str, Any]:
    """The layer table (webmp.models.summary.LayerTable.to_dict()) of a config's network at its
    batch size, on its data (the page sends model_spec, batch_size and data); 422 with the line that
    POST /api/runs would answer (the network, its data, the page's memory budget)."""
    cfg = page_config(await json_body(request))
    if cfg.model_spec is None:
        raise InvalidConfig("invalid model_spec: a layer table is a network's: give model_spec")
    data = await asyncio.to_thread(run_store(request).data.load, cfg)
    check_network_data(cfg, data)
    check_plan_size(cfg, data)
    try:
        table = await asyncio.to_thread(layer_table, cfg.model_spec, cfg.batch_size, data)
    except ValueError as e:  # a launcher's limit (the plan cannot be built at this size)
        raise InvalidConfig(f"this config makes no plan: {e}") from None
    return table.to_dict()
