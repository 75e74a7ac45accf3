"""`webmp train`'s first-use tuning: the run's own matmul shape classes that the tune cache lacks
for its adapter, timed within a small budget before the plan is built, the winners cached.

The run's classes come from a dry plan (the products do not depend on the tiles, only on the
weights' form, which the table already fixes). Each missing class, the most work first, times its
untuned choice (the adapter class's shipped tiles, else the defaults: the run uses them anyway, so
they are timed without the correctness check every other candidate passes first) and the next most
promising candidates (webmp.tune.native.tune_classes), at most `max_candidates`, while the budget lasts. No
class starts once it is spent, and a class started times two candidates whatever the budget (one
timed alone compares nothing): so every run with a budget caches at least one class, and may
overrun the budget by one class's two candidates. A class is cached only where two candidates
were timed against each other; the rest keep the shipped tiles until a later run tunes them. The
forms (row kernels, weights) are left to `webmp bench --tune`: the shipped table holds measured
ones. Every tile choice gives the same bits, so tuning never changes what a run computes.

An adapter whose class has a measured shipped table (lavapipe, SwiftShader: webmp.engine.adapters)
is not tuned unless asked (`even_measured`, `webmp train --tune-budget S`): that table is the tuned
choice of its class (on lavapipe first-use tuning kept it every time), and the 3 - 4 s of compiles
would take the GPT's cold start past 15 s. The GPU rule is a heuristic, so GPUs are tuned.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..engine.plan import Plan
from ..engine.tiles import TileTable, shape_class
from ..engine.tune_cache import cache_path, update_cache
from .native import plan_shapes, tune_classes

FIRST_USE_BUDGET_S = 3.0  # a small share of a cold start (the GPT's is ~13 s on lavapipe)
FIRST_USE_CANDIDATES = 2  # per class: the untuned choice and the next most promising (each costs compiles)


def _quiet(*args, **kwargs) -> None:
    pass


@dataclass(frozen=True)
class FirstUseTuning:
    """The Trainer's `tuner`: called with the adapter, the run's dry plan and its tile table; returns
    the table to build the run with and one line for the log."""

    budget_s: float = FIRST_USE_BUDGET_S
    max_candidates: int = FIRST_USE_CANDIDATES
    # False: an adapter whose class has a measured shipped entry (lavapipe, SwiftShader) is not
    # tuned: that entry is a tuned table already (first-use tuning found it best every time on
    # lavapipe), and its compiles would take a cold start past 15 s
    even_measured: bool = False

    def skipped(self, table: TileTable) -> str | None:
        """Why this table is not tuned (a measured shipped class table), or None."""
        shipped = table.shipped
        if shipped is not None and shipped.measured and not self.even_measured:
            return (
                f"skipped: the {shipped.describe()} is this adapter class's tuned choice "
                "(--tune-budget S tunes this machine's own first)"
            )
        return None

    def __call__(self, gpu, plan: Plan, table: TileTable) -> tuple[TileTable, str]:
        why = self.skipped(table)
        if why is not None:
            return table, why
        shapes = plan_shapes(plan)
        classes = {shape_class(*s[:6]) for s in shapes}
        missing = [s for s in shapes if shape_class(*s[:6]) not in table.by_class]
        n_missing = len({shape_class(*s[:6]) for s in missing})
        if not missing:
            return table, f"every one of the run's {len(classes)} shape classes is in the tune cache"
        t0 = time.perf_counter()
        report = tune_classes(
            gpu,
            missing,
            self.budget_s,
            log=_quiet,
            max_candidates=self.max_candidates,
            hard_budget=True,
            min_candidates=min(2, self.max_candidates),
            check_untuned=False,  # the run uses it anyway: its check is the test suite's (one compile less)
        )
        keep = {cls: r["tiles"] for cls, r in report.items() if r["tried"] >= 2}
        if keep:
            update_cache(gpu.name, keep)
        seconds = time.perf_counter() - t0
        gains = [
            r["gflops"] / r["default_gflops"]
            for cls, r in report.items()
            if cls in keep and r["default_gflops"]
        ]
        line = (
            f"tuned {len(keep)} of the {n_missing} shape classes missing from the tune cache in "
            f"{seconds:.1f} s (budget {self.budget_s:g} s"
            + (f"; best {max(gains):.2f}x the untuned tiles" if gains else "")
            + f"), cached in {cache_path()}"
        )
        if n_missing > len(keep):
            line += f"; {n_missing - len(keep)} keep their untuned tiles until a later run tunes them"
        new = TileTable.for_adapter(gpu.name, getattr(gpu, "info", None))
        return new, line
