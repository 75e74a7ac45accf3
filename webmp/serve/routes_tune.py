"""The page's tuning pass (webmp/tune/page.py): its adapter's key and what is tuned for it, the tuning
plan of a config's matmul shape classes and the verdict on each class's results, then the forms
plan of the choices the config's plan makes and the verdict on each. FastAPI reads these bodies
into their models: a body that is not JSON gets its 400, a wrong one 422.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Any

from fastapi import HTTPException, Request

from ..config import TrainConfig
from ..engine.adapters import AdapterInfo
from ..engine.plan import resolve_f16_path
from ..engine.precompile import helpers_for
from ..engine.tiles import ADAPTER_KEY, TileTable
from ..engine.tune_cache import load_cache, update_cache
from ..tune.matmul_cases import FIT_LIMITS, kebab_limits
from ..tune.page import (
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
from .api import answers, api_router, run_store
from .budget import check_plan_size
from .form import page_config
from .messages import (
    AdapterSignature,
    AdapterTiles,
    TuneFormResults,
    TuneFormVerdict,
    TuneRequest,
    TuneResults,
    TuneVerdict,
)
from .page_data import PageData

router = api_router()


@router.post("/adapters", response_model=AdapterTiles, responses=answers(400, 413, 422))
def adapter_tiles(signature: AdapterSignature) -> AdapterTiles:
    """The key of a page's adapter, the matmul tiles and forms tuned for it so far, and the shipped
    table of its class (webmp.engine.adapters) that its plans get for the rest (none: the defaults).
    What the page reported is kept under the key (tiles.ADAPTER_KEY) for its plans' ?tiles=KEY."""
    key = adapter_key(signature.model_dump())
    info = AdapterInfo.from_browser(signature.model_dump())
    if load_cache().get(key, {}).get(ADAPTER_KEY) != info.entry():  # stored once per adapter
        update_cache(key, {ADAPTER_KEY: info.entry()})
    shipped = TileTable.for_adapter(key).shipped
    helpers, why = helpers_for(info, signature.features)
    return AdapterTiles(
        adapter_key=key,
        tuned=tuned_classes(key),
        forms=tuned_forms(key),
        shipped=shipped.describe() if shipped else None,
        compile_helpers=helpers,
        compile_helpers_why=why,
    )


def _tuned_config(req: TuneRequest, data: PageData) -> tuple[TrainConfig, str]:
    """A tuning request's config and storage path, checked as POST /api/runs checks them."""
    cfg = page_config(req.config)
    missing = [k for k in FIT_LIMITS if k not in kebab_limits(req.limits)]
    if missing:
        raise HTTPException(422, f"limits: the tile choices need the adapter's {', '.join(missing)}")
    try:
        path = resolve_f16_path(cfg.precision, cfg.f16, req.f16 == "native")
    except RuntimeError as e:
        raise HTTPException(409, str(e)) from None
    check_plan_size(cfg, data.load(cfg))
    return cfg, path


@lru_cache(maxsize=2)
def _tuning(request_json: str, data: PageData) -> Tuning:
    req = TuneRequest.model_validate_json(request_json)
    cfg, path = _tuned_config(req, data)
    has_subgroups = "subgroups" in req.adapter.features
    untuned = TileTable.for_adapter(adapter_key(req.adapter.model_dump()))  # its class's shipped tiles
    return tuning_plan(cfg, data.load(cfg), path, req.limits, has_subgroups, req.max_candidates, untuned)


def tuning_for(req: TuneRequest, data: PageData) -> Tuning:
    """The tuning plan of a request on the server's data (`data`: the store's), built once for the
    request and its results (the last two kept)."""
    return _tuning(req.model_dump_json(), data)


@router.post("/tune", response_model=None, responses=answers(400, 409, 413, 422))
async def tune_plan(request: Request, req: TuneRequest) -> dict[str, Any]:
    """A tuning plan for the config's matmuls on the page's adapter (webmp.tune.page): the page runs
    each case's check and time programs and posts each class's results to /api/tune/results."""
    tuning = await asyncio.to_thread(tuning_for, req, run_store(request).data)
    return {
        "adapter_key": adapter_key(req.adapter.model_dump()),
        "f16_path": tuning.path,
        "plan": tuning.plan,
        "blob": encode_blob(tuning.blob),
        "classes": tuning.describe(),
    }


@router.post("/tune/results", response_model=TuneVerdict, responses=answers(400, 409, 413, 422))
async def tune_results(request: Request, body: TuneResults) -> TuneVerdict:
    """Judges a class's results (outputs against float64) and stores the fastest correct choice
    under the adapter's key, where plans asked for with ?tiles=KEY find it."""
    tuning = await asyncio.to_thread(tuning_for, body.request, run_store(request).data)
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


def forms_for(req: TuneRequest, data: PageData) -> FormsTuning:
    """The form choices of a request's config, on the tiles tuned for its adapter so far (built
    anew each time: the class results posted in between change those tiles)."""
    cfg, path = _tuned_config(req, data)
    return forms_plan(cfg, path, adapter_key(req.adapter.model_dump()))


@router.post("/tune/forms", response_model=None, responses=answers(400, 409, 413, 422))
async def tune_forms_plan(request: Request, req: TuneRequest) -> dict[str, Any]:
    """After the classes: the forms the config's plan uses (webmp.tune.page.forms_plan), each a
    program; the page runs each once, digests its outputs, times it and posts each choice's results
    to /api/tune/forms/results. No choice (the plain MLP): no plan and an empty list."""
    forms = await asyncio.to_thread(forms_for, req, run_store(request).data)
    return {
        "adapter_key": adapter_key(req.adapter.model_dump()),
        "plan": forms.plan,
        "blob": encode_blob(forms.blob),
        "forms": forms.describe(),
    }


@router.post("/tune/forms/results", response_model=TuneFormVerdict, responses=answers(400, 409, 413, 422))
async def tune_forms_results(request: Request, body: TuneFormResults) -> TuneFormVerdict:
    """Keeps the faster form of a choice where every form's outputs had the same digest, else the
    default, and stores it under the adapter's key, where plans asked for with ?tiles=KEY find it."""
    forms = await asyncio.to_thread(forms_for, body.request, run_store(request).data)
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
