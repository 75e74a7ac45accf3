"""The sampling routes: a finished GPT run's sampling plan and its blob, for the page to generate text
with (webmp/serve/sampling.py builds them with `webmp sample`'s code).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import Response

from .api import F16, answers, api_router, run_store
from .messages import Offer

router = api_router()


@dataclass
class SampleQuery:
    """The query of both sample routes. The settings travel as text and are checked by
    webmp.sample.job.SampleSettings, so that a bad value is refused with one line (FastAPI's own
    validation answers with a list)."""

    f16: Offer = F16
    prompt: str = ""
    tokens: str | None = None
    temperature: str | None = None
    seed: str | None = None

    async def build(self, request: Request, run_id: str, keep: bool = True) -> Any:
        run = run_store(request).get(run_id)
        settings = {"tokens": self.tokens, "temperature": self.temperature, "seed": self.seed}
        return await asyncio.to_thread(run.sample_plan, self.f16, self.prompt, **settings, keep=keep)


@router.get("/runs/{run_id}/sample", response_model=None, responses=answers(404, 409, 422))
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


@router.get(
    "/runs/{run_id}/sample/blob",
    response_model=None,
    response_class=Response,
    responses=answers(404, 409, 422, binary=True),
)
async def run_sample_blob(request: Request, run_id: str, q: Annotated[SampleQuery, Depends()]) -> Response:
    _, blob, _ = await q.build(request, run_id, keep=False)
    return Response(blob, media_type="application/octet-stream")
