"""Matmul auto-tuning: time candidate tile shapes per adapter and shape class, cache the fastest;
and the forms of webmp.tune.form_cases (the row kernels', the GPT's weights: `tune_rows`, `tune_weights`).

`tune_shapes` (run by `webmp bench --tune`, or `python -m webmp.tune.native`) fills the cache that
webmp/engine/tiles.py reads; training uses it through `TileTable.for_adapter`. Nothing here runs
implicitly. `MatmulCase` (one matmul on random data, checked against numpy, timed with many
dispatches in one encoder and one wait) is shared with webmp/bench/matmul.py.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..data.tables import load_digits
from ..engine.adapters import shipped_tiles
from ..engine.plan import Plan, PlanBuilder, resolve_f16_path
from ..engine.runtime import Runtime, default_gpu
from ..engine.subgroups import subgroup_width
from ..engine.tiles import (
    ATTENTION_KEY,
    ROWS_KEY,
    WEIGHTS_KEY,
    Tiles,
    TileTable,
    attention_class,
    shape_class,
)
from ..engine.tune_cache import cache_path, load_cache, update_cache
from ..models import build_plan
from .form_cases import (
    FormSpec,
    attention_forms,
    faster_attention,
    faster_form,
    row_forms,
    same_outputs,
    weight_forms,
)
from .matmul_cases import MatmulSpec, candidates


def time_dispatches(rt: Runtime, dispatches, reps: int, last_written: str) -> float:
    """Seconds for `reps` rounds of a runtime's prepared dispatches recorded in one compute pass,
    submitted once and waited for once: by mapping a 4-byte copy of `last_written`, a buffer the
    dispatches write, made after them (wgpu-py 0.32's on_submitted_work_done is broken)."""
    import wgpu

    enc = rt.device.create_command_encoder()
    cpass = enc.begin_compute_pass()
    for _ in range(reps):
        for pipeline, bg, (x, y, z) in dispatches:
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, bg)
            cpass.dispatch_workgroups(x, y, z)
    cpass.end()
    enc.copy_buffer_to_buffer(rt.buffers[last_written], 0, rt.staging, 0, 4)
    cmd = enc.finish()
    t0 = time.perf_counter()
    rt.device.queue.submit([cmd])
    rt.staging.map_sync(wgpu.MapMode.READ)
    dt = time.perf_counter() - t0
    rt.staging.unmap()
    return dt


# --- one matmul, on its own ----------------------------------------------------------------------


class MatmulCase(MatmulSpec):
    """A MatmulSpec (one matmul of one variant on random data, its reference and tolerance) on a
    wgpu-py device of its own plan."""

    def __init__(self, gpu, *spec: Any, **spec_kw: Any):
        """gpu, then MatmulSpec's arguments (path, M, N, K, variant, trans_a, trans_b, tiles, seed)."""
        super().__init__(*spec, **spec_kw)
        pb = PlanBuilder(self.path)
        # the kernel a run on this device compiles: one K loop where its subgroup layout is known
        pb.subgroup_width = subgroup_width(getattr(gpu, "info", None))
        pb.u32("flags", (4,), "other")
        self.out = self.add_buffers(pb)
        self.dispatch(pb, "mm")
        plan = pb.kernel_plan(state="flags", metrics="flags")
        self.rt = Runtime(plan, bytes(pb.blob), gpu)
        self.device = self.rt.device

    def result(self) -> np.ndarray:
        return self.decode(self.rt.read(self.out))

    def check(self) -> float:
        """Runs once and returns the worst error as a multiple of its tolerance (<= 1 passes)."""
        self.run(1)
        return self.error_ratio(self.result())

    def run(self, reps: int) -> float:
        """Seconds for `reps` dispatches in one pass (time_dispatches)."""
        return time_dispatches(self.rt, self.rt.programs["mm"], reps, self.out)

    def gflops(self, target_s: float = 0.2, batches: int = 1) -> float:
        """GFLOP/s of the fastest of `batches` batches of dispatches, each lasting about target_s
        (after a warm-up). The fastest, not the mean: on a shared CPU the same kernel's batches
        differ by up to 2x with what else runs, and the fastest is what the kernel can do."""
        return interleaved_gflops([self], target_s, rounds=batches)[0]


def interleaved_gflops(cases: list[MatmulCase], target_s: float = 0.2, rounds: int = 3) -> list[float]:
    """GFLOP/s of each case: the fastest of `rounds` batches (each about target_s, at most 200
    dispatches, after a one-dispatch warm-up), the rounds going through all the cases in turn. A
    CPU adapter's speed drifts with what else its host runs (2x over minutes, docs/benchmarks.md):
    batches of one case taken back to back can all fall in a slow minute, batches spread over the
    whole run rarely do, and every case meets the same ones."""
    reps = [int(min(200, max(2, target_s / max(c.run(1), 1e-6)))) for c in cases]
    best = [math.inf] * len(cases)
    for _ in range(rounds):
        for i, c in enumerate(cases):
            best[i] = min(best[i], c.run(reps[i]))
    return [c.flops * n / t / 1e9 for c, n, t in zip(cases, reps, best, strict=True)]


# --- the forms: row kernels, and how the backward pass reads its weights ---------------------------


class FormCase:
    """One of webmp.tune.form_cases' choices (`build`: row_forms or weight_forms, with `kw`) run through
    wgpu-py: each form's program once to compare outputs, then timed."""

    def __init__(self, gpu, path: str, build, **kw):
        pb = PlanBuilder(path)
        pb.u32("flags", (4,), "other")
        self.spec: FormSpec = build(pb, **kw)
        self.rt = Runtime(pb.kernel_plan(state="flags", metrics="flags"), bytes(pb.blob), gpu)

    def identical(self) -> bool:
        """Runs each form once: whether every output of the forms is the same bytes."""
        for form in self.spec.forms:
            self.run(form, 1)
        return same_outputs({f: [self.rt.read(o) for o in out] for f, out in self.spec.outputs.items()})

    def run(self, form: str, reps: int) -> float:
        """Seconds for `reps` passes over the form's dispatches in one submit and one wait (as
        MatmulCase.run)."""
        program = self.rt.programs[self.spec.program(form)]
        return time_dispatches(self.rt, program, reps, self.spec.outputs[form][-1])

    def seconds(self, reps: int = 3, rounds: int = 3) -> dict[str, float]:
        """{form: best seconds a pass}, the forms alternated `rounds` times (the CPUs may be shared)."""
        best = {form: float("inf") for form in self.spec.forms}
        for _ in range(rounds):
            for form in self.spec.forms:
                best[form] = min(best[form], self.run(form, reps) / reps)
        return best


def tune_form(case: FormCase, log=print) -> dict:
    """form_cases.faster_form's choice for a case, timed only where its forms agree."""
    identical = case.identical()
    choice = faster_form(case.spec, identical, case.seconds() if identical else {})
    what, secs = case.spec.what, choice["seconds"]
    if secs is None:
        log(f"tune {what}: the forms' results differ on this adapter; keeping {choice['form']}")
    else:
        log(
            f"tune {what}: "
            + ", ".join(f"{f} {1e3 * s:.2f} ms" for f, s in secs.items())
            + f" -> {choice['form']}"
        )
    return choice


def tune_rows(gpu, path: str, log=print) -> dict:
    """The row kernels' form (form_cases.row_forms), default "workgroup"."""
    return tune_form(FormCase(gpu, path, row_forms), log)


def tune_attention(gpu, path: str, table: TileTable, contexts=(64, 256), log=print) -> dict:
    """{attention class: faster_attention's choice} for the default GPT's attention (batch 16, 4
    heads of 32) at each context of `contexts`, the three-kernel form on `table`'s tiles and row
    form (tune those first)."""
    report = {}
    for T in contexts:
        case = FormCase(gpu, path, attention_forms, table=table, T=T)
        choice = faster_attention(case.seconds(reps=1, rounds=2))
        cls = attention_class(path, T, 32)
        log(
            f"tune {cls}: "
            + ", ".join(f"{f} {1e3 * s:.1f} ms" for f, s in choice["seconds"].items())
            + f" -> {choice['form']}"
        )
        report[cls] = choice
    return report


def tune_weights(gpu, path: str, table: TileTable, log=print) -> dict:
    """How the GPT's backward pass reads its weights (form_cases.weight_forms, with the tiles
    `table` gives), default "as_stored"."""
    return tune_form(FormCase(gpu, path, weight_forms, table=table), log)


# --- the tuner -----------------------------------------------------------------------------------


def plan_shapes(plan: Plan) -> list[tuple]:
    """The distinct (path, M, N, K, trans_a, trans_b, batch) of a plan's matmul kernels (batch: the
    products one dispatch computes, attention's batch-heads)."""
    path = plan["f16_path"] or "fp32"
    return [(path, m["M"], m["N"], m["K"], m["trans_a"], m["trans_b"], m["batch"]) for m in plan["matmuls"]]


KEEP_FOR_SECOND_ROUND = 5  # candidates per class timed twice (tune_classes)


def shape_work(shape: tuple) -> int:
    """The multiply-adds of a (path, M, N, K, trans_a, trans_b, batch) shape."""
    return shape[1] * shape[2] * shape[3] * shape[6]


def classes_of(shapes) -> list[tuple[str, tuple]]:
    """(class, its first shape given, with batch) per shape class, the classes with the most work first."""
    by_class: dict[str, tuple] = {}
    for s in shapes:
        s = tuple(s) if len(s) == 7 else (*s, 1)
        by_class.setdefault(shape_class(*s[:6]), s)
    return sorted(by_class.items(), key=lambda kv: -shape_work(kv[1]))


def untuned_table(gpu) -> TileTable:
    """What a class gets without a cache entry on this adapter: its class's shipped tiles
    (webmp.engine.adapters), else the defaults."""
    return TileTable({}, gpu.name, shipped_tiles(getattr(gpu, "info", None)))


def _time_candidate(gpu, cls: str, shape: tuple, tiles: Tiles, log, check: bool = True) -> list | None:
    """[GFLOP/s, tiles, case] of one candidate, or None when it computes wrong results: correctness
    on a small shape with ragged edges (unless check is False), speed on the real one."""
    path, M, N, K, ta, tb, batch = shape
    if check:
        small = MatmulCase(gpu, path, min(M, 67), min(N, 35), min(K, 41), trans_a=ta, trans_b=tb, tiles=tiles)
        if small.check() > 1.0:
            log(f"tune {cls}: {tiles} gives wrong results; skipped")
            return None
    case = MatmulCase(gpu, path, M, N, K, trans_a=ta, trans_b=tb, tiles=tiles, batch=batch)
    return [case.gflops(target_s=0.05), tiles, case]


def tune_classes(
    gpu,
    shapes,
    budget_s: float,
    log=print,
    max_candidates: int | None = None,
    hard_budget: bool = False,
    min_candidates: int = 1,
    check_untuned: bool = True,
) -> dict:
    """For each shape class (represented by the first of its shapes given), times the candidates
    that fit the device, the class's untuned choice (untuned_table) first, then the most promising,
    until the class's share of the budget is spent (at most max_candidates); the fastest that
    passes its correctness check wins. Classes with the most work go first, and time one class
    leaves unused goes to the next. With hard_budget the classes in turn may take all that is
    left, and none is started once the budget is spent (else every class times at least its
    untuned choice); a class started times at least min_candidates (that fit and compute right)
    whatever the budget. check_untuned False: the untuned choice (what the run uses anyway) is timed
    without its correctness check (one compile less). Writes nothing.
    Returns {class: {"tiles", "gflops", "default_gflops", "tried"}} for the classes timed."""
    order = classes_of(shapes)
    allowed = candidates(gpu.device.limits, gpu.has_subgroups)
    untuned = untuned_table(gpu)
    report = {}
    t_budget_end = time.perf_counter() + budget_s
    for i, (cls, shape) in enumerate(order):
        if hard_budget and time.perf_counter() >= t_budget_end:
            break
        # a share of what is left per class; with hard_budget the classes in turn take what is left
        left = t_budget_end - time.perf_counter()
        t_end = time.perf_counter() + (left if hard_budget else left / (len(order) - i))
        # [GFLOP/s, tiles, case]; the cases of the fastest few are kept for a second round
        tried: list[list[Any]] = []
        default = untuned.for_shape(*shape[:6])  # what the class gets untuned: tried first
        for n, tiles in enumerate([default] + [c for c in allowed if c != default]):
            if max_candidates is not None and n >= max_candidates:
                break
            if len(tried) >= min_candidates and time.perf_counter() > t_end:
                break
            timed = _time_candidate(gpu, cls, shape, tiles, log, check=check_untuned or tiles != default)
            if timed is None:
                continue
            tried.append(timed)
            tried.sort(key=lambda t: -t[0])
            for t in tried[KEEP_FOR_SECOND_ROUND:]:
                t[2] = None  # its buffers go
        if not tried:
            continue
        # the fastest few timed again, in turn, after all were tried: a slow minute of the host
        # during the first round then no longer decides between them
        for t in tried[:KEEP_FOR_SECOND_ROUND]:
            t[0] = max(t[0], t[2].gflops(target_s=0.05))
        results: list[tuple[float, Tiles]] = [(gf, tiles) for gf, tiles, _ in tried]
        best_gf, best = max(results, key=lambda r: r[0])
        default_gf = next((gf for gf, t in results if t == default), None)
        report[cls] = {"tiles": best, "gflops": best_gf, "default_gflops": default_gf, "tried": len(results)}
        log(f"tune {cls}: {best} {best_gf:.2f} GFLOP/s (untuned {default_gf or 0:.2f}, {len(results)} tried)")
    return report


def tune_shapes(gpu, shapes, budget_s: float = 20.0, log=print) -> dict:
    """tune_classes over the shapes, every class's winner stored in the cache under gpu.name; then
    the row kernels' form (tune_rows, on the first shape's path), stored under ROWS_KEY, and how the
    GPT's backward pass reads its weights (tune_weights, with the tiles tuned so far), under
    WEIGHTS_KEY, and the attention's form per attention class (tune_attention), under ATTENTION_KEY.
    A shape is (path, M, N, K, trans_a, trans_b) or plan_shapes' with its batch: a batched product
    is timed batched, as the plan dispatches it (one batch-head alone is bound by the dispatch).
    Returns {class: {"tiles", "gflops", "default_gflops", "tried"}, ROWS_KEY: tune_rows's,
    WEIGHTS_KEY: tune_weights's, ATTENTION_KEY: tune_attention's}."""
    order = classes_of(shapes)
    report: dict[str, Any] = tune_classes(gpu, shapes, budget_s, log)
    mine = dict(load_cache().get(gpu.name, {}))  # what the weights' pass tunes with
    tuned: dict[str, Any] = {cls: r["tiles"] for cls, r in report.items()}  # what this pass writes
    mine.update(tuned)
    path = order[0][1][0] if order else "fp32"
    rows = tune_rows(gpu, path, log)
    mine[ROWS_KEY] = tuned[ROWS_KEY] = {"form": rows["form"]}
    report[ROWS_KEY] = rows
    weights = tune_weights(gpu, path, TileTable(mine, gpu.name, untuned_table(gpu).shipped), log)
    tuned[WEIGHTS_KEY] = {"form": weights["form"]}
    report[WEIGHTS_KEY] = weights
    mine[WEIGHTS_KEY] = tuned[WEIGHTS_KEY]
    attention = tune_attention(gpu, path, TileTable(mine, gpu.name, untuned_table(gpu).shipped), log=log)
    tuned[ATTENTION_KEY] = {cls: r["form"] for cls, r in attention.items()}
    report[ATTENTION_KEY] = attention
    update_cache(gpu.name, tuned)  # keeps other passes' entries
    return report


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m webmp.tune.native", description="Tune matmul tiles for the shapes of a training plan"
    )
    p.add_argument("--hidden", default="256,256")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--precision", nargs="+", default=["mixed", "fp32"])
    p.add_argument("--budget", type=float, default=20.0, help="seconds in all")
    args = p.parse_args(argv)
    gpu = default_gpu()
    shapes = []
    for prec in args.precision:
        cfg = TrainConfig(
            hidden=[int(x) for x in args.hidden.split(",")], batch_size=args.batch_size, precision=prec
        )
        plan, _ = build_plan(cfg, load_digits(), resolve_f16_path(prec, "auto", gpu.has_f16))
        shapes += plan_shapes(plan)
    tune_shapes(gpu, shapes, args.budget)
    print(f"cache: {cache_path()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
