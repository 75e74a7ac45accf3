"""A run's files for download (the page's Downloads line, any HTTP client): every regular file at
the top of its run directory (config, metrics, summary, checkpoint, curves, lens), the metrics as
CSV, and the whole directory as one zip. Only those names are served: no path is taken from the
request, and links are left out.

  GET /api/runs/{id}/files               [{name, bytes, what}]: what can be downloaded
  GET /api/runs/{id}/files/{name}        that file, as an attachment (metrics.csv: made from
                                         metrics.jsonl; {id}.zip: the directory)
"""

from __future__ import annotations

import asyncio
import csv
import io
import zipfile
from pathlib import Path

from fastapi import HTTPException, Request
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel

from ..train.rundir import RunDir
from .api import answers, api_router, run_store

router = api_router()

WHAT = {
    "config.json": "the run's settings",
    "metrics.jsonl": "every metrics record, one JSON object a line",
    "summary.json": "the result and the run's facts",
    "checkpoint.safetensors": "the last checkpoint's tensors (f32 masters, optimizer state, working copies)",
    "checkpoint.json": "the last checkpoint's step, config and scaler state",
    "curves.png": "the loss and loss-scale curves",
    "histograms.jsonl": "the gradient-range lens's reads",
    "histograms.png": "the gradient-range lens's last read",
    "browser.json": "the server's record of a browser run (status, adapter)",
}
CSV = "metrics.csv"


class RunFile(BaseModel):
    name: str
    bytes: int | None  # None: made when asked (the CSV, the zip)
    what: str


def stored_files(d: Path) -> list[Path]:
    """The regular files at the top of run directory `d` (no links, no folders), by name."""
    return sorted(p for p in d.iterdir() if p.is_file() and not p.is_symlink())


def metrics_csv(run_dir: RunDir) -> bytes:
    """metrics.jsonl as CSV: a header of the records' fields, a row a record."""
    records = run_dir.read_metrics()
    out = io.StringIO()
    fields = list(records[0]) if records else ["step"]
    writer = csv.DictWriter(out, fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return out.getvalue().encode()


def zipped(d: Path, files: list[Path]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in files:
            z.write(p, f"{d.name}/{p.name}")
    return buf.getvalue()


@router.get("/runs/{run_id}/files", response_model=list[RunFile], responses=answers(404))
def run_files(request: Request, run_id: str) -> list[RunFile]:
    run = run_store(request).view(run_id)
    d = run.dir.path
    files = [RunFile(name=p.name, bytes=p.stat().st_size, what=WHAT.get(p.name, "")) for p in stored_files(d)]
    if (d / "metrics.jsonl").is_file():
        files.append(RunFile(name=CSV, bytes=None, what="every metrics record, one CSV row a record"))
    files.append(RunFile(name=f"{run.id}.zip", bytes=None, what="the whole run directory, zipped"))
    return files


@router.get("/runs/{run_id}/files/{name}", response_model=None, responses=answers(404, binary=True))
async def run_file(request: Request, run_id: str, name: str) -> Response:
    run = run_store(request).view(run_id)
    d = run.dir.path
    attachment = {"Content-Disposition": f'attachment; filename="{name}"'}
    if name == f"{run.id}.zip":
        body = await asyncio.to_thread(zipped, d, stored_files(d))
        return Response(body, media_type="application/zip", headers=attachment)
    if name == CSV and (d / "metrics.jsonl").is_file():
        body = await asyncio.to_thread(metrics_csv, run.dir)
        return Response(body, media_type="text/csv", headers=attachment)
    chosen = next((p for p in stored_files(d) if p.name == name), None)
    if chosen is None:
        raise HTTPException(
            404, f"run {run_id} has no file {name!r}; GET /api/runs/{run_id}/files lists them"
        )
    return FileResponse(chosen, filename=name)
