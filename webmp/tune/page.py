"""The page's tuning pass: matmul tiles measured on the page's own adapter, cached on the server.

A browser does not name its adapter the way wgpu-py does (Chromium reports vendor "google",
architecture "swiftshader" and no device name for both SwiftShader and lavapipe), so the table
`webmp bench --tune` measures natively cannot be matched to a page. Instead the page tunes itself:

1. It sends its `AdapterSignature` (what the browser reports: vendor, architecture, device,
   description, subgroup sizes, features); `adapter_key` names the cache entry for it
   ("page-" + a hash), under which `TileTable.for_adapter` finds the choices like any other.
2. For a training config it asks for a tuning plan (`tuning_plan`): for each of the config's matmul
   shape classes, and each tile choice its device allows (the class's untuned default first, then
   `webmp.tune.matmul_cases.candidates`, the first `max_candidates`), a `check_i` program (the class's
   shape cut to at most 67 x 35 x 41, on random operands in the blob) and a `time_i` program (the
   real shape, on zeros: scratch buffers shared by every class).
3. It runs each check once and reads its output, times each time program (many repetitions in one
   submit, one wait), and posts a class's results at a time; `judge` checks each output against
   float64 (`MatmulSpec.error_ratio`, the native tuner's tolerance), keeps the fastest correct
   choice and stores it in the cache. A choice whose output is wrong is never stored.
4. Then the forms (webmp.tune.form_cases) the config's plan uses: the row kernels' where it has LayerNorm
   or attention, the weights' for the GPT, the latter's products on the tiles just tuned
   (`forms_plan`). The page runs each form's program once and sends a digest of its outputs (the
   outputs are megabytes; only their sameness is judged), then times it; `judge_forms` keeps the
   faster form where every form's digest is the same, else the default, and `store_form` caches it.

Nothing here imports wgpu; the page does the running (web/tune.js), the server the deciding.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import TrainConfig
from ..data.tables import Dataset
from ..data.text import TextCorpus
from ..engine.plan import KernelPlan, PlanBuilder, h_bytes
from ..engine.tiles import RESERVED_KEYS, ROWS_KEY, WEIGHTS_KEY, Tiles, TileTable, default_tiles, shape_class
from ..engine.tune_cache import load_cache, update_cache
from ..models import build_plan
from ..ops import matmul
from .form_cases import FormSpec, faster_form, row_forms, weight_forms
from .matmul_cases import MatmulSpec, batch_layouts, candidates, fits, kebab_limits

CHECK_SHAPE = (67, 35, 41)  # M, N, K of the correctness check: ragged against every tile edge
ADAPTER_KEY_PREFIX = "page-"
ADAPTER_KEY_PATTERN = r"^page-[0-9a-f]{16}$"


def adapter_key(signature: Mapping[str, Any]) -> str:
    """The cache entry of a page's adapter: a hash of what the browser reports about it."""
    canonical = json.dumps(signature, sort_keys=True, separators=(",", ":"))
    return ADAPTER_KEY_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def tuned_classes(key: str) -> dict[str, Tiles]:
    """The shape classes tuned for an adapter key so far (the reserved entries left out)."""
    return {c: t for c, t in load_cache().get(key, {}).items() if c not in RESERVED_KEYS}


def plan_shape_classes(plan: Mapping[str, Any]) -> list[tuple[str, tuple[int, int, int, int, int, int]]]:
    """(class, (M, N, K, trans_a, trans_b, batch)) of a training plan's matmuls, one shape per class
    (the first met), classes with the most work first. batch: the products one dispatch computes
    (attention's batch-heads), timed as the plan dispatches them, as the native tuner does."""
    path = plan["f16_path"] or "fp32"
    first: dict[str, tuple[int, int, int, int, int, int]] = {}
    for m in plan["matmuls"]:
        shape = (m["M"], m["N"], m["K"], m["trans_a"], m["trans_b"])
        first.setdefault(shape_class(path, *shape), (*shape, m["batch"]))
    return sorted(first.items(), key=lambda kv: -kv[1][0] * kv[1][1] * kv[1][2] * kv[1][5])


def tuned_forms(key: str) -> dict[str, str]:
    """The form choices made for an adapter key so far: {"rows" or "weights": the form}."""
    entry = load_cache().get(key, {})
    forms = (ROWS_KEY, WEIGHTS_KEY)
    return {what: str(entry[what].get("form")) for what in forms if isinstance(entry.get(what), dict)}


@dataclass
class TuneCase:
    index: int
    cls: str
    tiles: Tiles
    check: MatmulSpec  # the small shape, random operands: judged against float64
    flops: float  # of one time_{index} dispatch (the real shape)
    default: bool  # the tiles the class gets untuned (its shipped tiles, else engine.tiles.default_tiles)


@dataclass
class Tuning:
    path: str
    plan: KernelPlan
    blob: bytes
    cases: list[TuneCase]

    def describe(self) -> list[dict[str, Any]]:
        """What the page needs besides the plan: per class, its cases' programs and output buffer."""
        out: dict[str, dict[str, Any]] = {}
        for c in self.cases:
            entry = out.setdefault(c.cls, {"class": c.cls, "flops": c.flops, "cases": []})
            entry["cases"].append(
                {
                    "case": c.index,
                    "tiles": c.tiles,
                    "check": f"check_{c.index}",
                    "output": f"{c.cls}:C",
                    "time": f"time_{c.index}",
                }
            )
        return list(out.values())


def tuning_plan(
    cfg: TrainConfig,
    data: Dataset | TextCorpus,
    path: str,
    limits: Mapping[str, float],
    has_subgroups: bool,
    max_candidates: int,
    untuned: TileTable | None = None,
) -> Tuning:
    """The tuning plan for a config's matmuls on a device with these limits (WebGPU's camelCase
    names or wgpu-py's) and features; see the module's docstring. untuned: the table the page's
    plans get for a class nothing tuned (TileTable.for_adapter of its key), whose choice is tried
    first; None: the defaults."""
    train_plan, _ = build_plan(cfg, data, path)
    classes = plan_shape_classes(train_plan)
    allowed = candidates(kebab_limits(limits), has_subgroups)
    pb = PlanBuilder(path)
    pb.u32("flags", (4,), "other")
    # scratch operands for the timing dispatches, large enough for every class (zeros: the
    # kernels' work does not depend on the values)
    # (each batch of a batched class on its own operands, one after another: batch_layouts)
    big = {"A": 0, "B": 0, "Zprev": 0, "C": 0, "bias": 0}
    for _, (M, N, K, ta, tb, batch) in classes:
        big["A"] = max(big["A"], batch * (h_bytes(K, M, path) if ta else h_bytes(M, K, path)))
        big["B"] = max(big["B"], batch * (h_bytes(N, K, path) if tb else h_bytes(K, N, path)))
        big["Zprev"] = max(big["Zprev"], h_bytes(M, N, path))
        big["C"] = max(big["C"], 4 * M * N * batch)
        big["bias"] = max(big["bias"], 4 * N)
    for name in ("A", "B", "Zprev"):
        pb.buffer(f"time:{name}", big[name], "activations", "h", (big[name] // 4,))
    pb.buffer("time:C", big["C"], "activations", "f32", (big["C"] // 4,))
    pb.buffer("time:bias", big["bias"], "other", "f32", (big["bias"] // 4,))
    cases: list[TuneCase] = []
    for cls, (M, N, K, ta, tb, batch) in classes:
        small = (min(M, CHECK_SHAPE[0]), min(N, CHECK_SHAPE[1]), min(K, CHECK_SHAPE[2]))
        MatmulSpec(path, *small, trans_a=ta, trans_b=tb).add_buffers(pb, prefix=f"{cls}:")
        # what the class gets untuned (`untuned`: the page's table, its class's shipped tiles): tried first
        default = untuned.for_shape(path, M, N, K, ta, tb) if untuned is not None else default_tiles(M, N, K)
        first = [default] if fits(default, kebab_limits(limits), has_subgroups) else []
        for tiles in (first + [c for c in allowed if c != default])[:max_candidates]:
            i = len(cases)
            spec = MatmulSpec(path, *small, trans_a=ta, trans_b=tb, tiles=tiles)
            spec.dispatch(pb, f"check_{i}", prefix=f"{cls}:")
            a_layout, b_layout, c_layout = batch_layouts(M, N, K, ta, tb, batch, spec.out_h)
            matmul(
                pb,
                f"time_{i}",
                spec.variant,
                A="time:A",
                B="time:B",
                C="time:C",
                M=M,
                N=N,
                K=K,
                trans_a=ta,
                trans_b=tb,
                bias="time:bias",
                Zprev="time:Zprev",
                out_act=1,
                tiles=tiles,
                batch=batch,
                a_layout=a_layout,
                b_layout=b_layout,
                c_layout=c_layout,
            )
            cases.append(TuneCase(i, cls, dict(tiles), spec, 2.0 * M * N * K * batch, tiles == default))
    return Tuning(path, pb.kernel_plan(state="flags", metrics="flags"), bytes(pb.blob), cases)


@dataclass
class CaseResult:
    case: int
    seconds: float  # for `reps` dispatches in one submit
    reps: int
    output: bytes  # the check program's output buffer


class TuneResultError(ValueError):
    """Results that do not belong to the tuning plan (an unknown case, another class's, twice)."""


def judge(tuning: Tuning, cls: str, results: Sequence[CaseResult]) -> dict[str, Any]:
    """Checks a class's results and returns {"class", "tiles" (the fastest correct choice, None when
    none is), "gflops", "default_gflops", "tried", "wrong": [cases whose output failed the check]}."""
    by_index = {c.index: c for c in tuning.cases if c.cls == cls}
    seen: set[int] = set()
    timed: list[tuple[float, TuneCase]] = []
    wrong: list[int] = []
    for r in results:
        case = by_index.get(r.case)
        if case is None:
            raise TuneResultError(f"case {r.case} is not one of class {cls}'s ({sorted(by_index)})")
        if r.case in seen:
            raise TuneResultError(f"case {r.case} given twice")
        seen.add(r.case)
        expected = case.check.M * case.check.N * 4
        if len(r.output) != expected:
            raise TuneResultError(
                f"case {r.case}'s output has {len(r.output)} bytes, the check writes {expected}"
            )
        if case.check.error_ratio(case.check.decode(r.output)) > 1.0:
            wrong.append(r.case)
            continue
        timed.append((case.flops * r.reps / r.seconds / 1e9, case))
    best = max(timed, key=lambda t: t[0], default=None)
    default = next((gf for gf, c in timed if c.default), None)
    return {
        "class": cls,
        "tiles": best[1].tiles if best else None,
        "gflops": best[0] if best else None,
        "default_gflops": default,
        "tried": len(results),
        "wrong": wrong,
    }


@dataclass
class FormsTuning:
    plan: KernelPlan | None  # None: no choice to make
    blob: bytes
    specs: list[FormSpec]

    def spec(self, what: str) -> FormSpec | None:
        return next((s for s in self.specs if s.what == what), None)

    def describe(self) -> list[dict[str, Any]]:
        """What the page needs besides the plan: per choice, each form's program and outputs."""
        return [
            {
                "what": s.what,
                "default": s.default,
                "forms": [
                    {"form": form, "program": s.program(form), "outputs": list(outputs)}
                    for form, outputs in s.outputs.items()
                ],
            }
            for s in self.specs
        ]


def forms_plan(cfg: TrainConfig, path: str, key: str) -> FormsTuning:
    """The form choices a config's plan makes (none for the plain MLP, which has no row kernels and
    reads its weights as stored), as webmp.tune.native makes them natively; the weights' products with the
    tiles tuned for the page's adapter `key` so far."""
    pb = PlanBuilder(path)
    pb.u32("flags", (4,), "other")
    specs = []
    if cfg.model != "mlp":  # LayerNorm (mlp-ln, gpt) and attention (gpt)
        specs.append(row_forms(pb))
    if cfg.model == "gpt":
        specs.append(weight_forms(pb, TileTable.for_adapter(key)))
    if not specs:
        return FormsTuning(None, b"", [])
    return FormsTuning(pb.kernel_plan(state="flags", metrics="flags"), bytes(pb.blob), specs)


@dataclass
class FormResult:
    form: str
    seconds: float  # for `reps` passes over the form's program in one submit
    reps: int
    digest: str  # of the form's outputs, read after one pass (web/tune.js `digest`)


def judge_forms(spec: FormSpec, results: Sequence[FormResult]) -> dict[str, Any]:
    """{"what", "form", "seconds" ({form: seconds a pass}, None where the forms differ), "identical"}:
    form_cases.faster_form over every form of the choice, each given once."""
    given = [r.form for r in results]
    if sorted(given) != sorted(spec.forms):
        raise TuneResultError(f"{spec.what}: results for {given}, the forms are {spec.forms} (each once)")
    identical = len({r.digest for r in results}) == 1
    choice = faster_form(spec, identical, {r.form: r.seconds / r.reps for r in results})
    return {"what": spec.what, "identical": identical, **choice}


def store_form(key: str, what: str, form: str) -> None:
    update_cache(key, {what: {"form": form}})


def store_choice(key: str, cls: str, tiles: Tiles) -> None:
    update_cache(key, {cls: tiles})


def encode_blob(blob: bytes) -> str:
    return base64.b64encode(blob).decode()


def result_output(text: str) -> bytes:
    """A case's output as the page sends it (base64)."""
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise TuneResultError("a case's output is not base64") from None
