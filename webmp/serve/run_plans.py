"""A browser run's training plans: built for the page's f16 path and tuned tiles (in a worker thread),
held in the store's PlanCache, resumed from the run's checkpoint, and the layout a checkpoint upload
must have. The run's status is its caller's (webmp/serve/runs.py): nothing here changes a run.
"""

from __future__ import annotations

from ..config import TrainConfig
from ..engine.plan import FIRST_PROGRAMS, Plan, resolve_f16_path
from ..engine.state import decode_state
from ..engine.tiers import QuickTable, add_quick_tier
from ..engine.tiles import TileTable
from ..models import build_plan
from ..train.checkpoint import load_checkpoint, resume_blob
from ..train.rundir import RunDir
from .budget import PlanCache
from .errors import InvalidUpload, RunStateConflict
from .messages import Offer
from .page_data import PageData

Layout = list[tuple[str, int]]  # (buffer, bytes) of a checkpoint upload, in order


class RunPlans:
    """The plans of one run (`run_id`, trained with `cfg` on `data`'s data in `run_dir`), cached in
    `cache`."""

    def __init__(self, run_id: str, cfg: TrainConfig, run_dir: RunDir, cache: PlanCache, data: PageData):
        self.run_id, self.cfg, self.dir, self.cache, self.data = run_id, cfg, run_dir, cache, data

    def path_for(self, offer: Offer) -> str:
        """The f16 path for a page whose adapter has ('native') or lacks ('emulated') shader-f16."""
        try:
            return resolve_f16_path(self.cfg.precision, self.cfg.f16, offer == "native")
        except RuntimeError as e:
            raise RunStateConflict(str(e)) from None

    def paths(self) -> set[str]:
        """The f16 paths a page may train the run on (with shader-f16 or without)."""
        found = set()
        for has_f16 in (True, False):
            try:
                found.add(resolve_f16_path(self.cfg.precision, self.cfg.f16, has_f16))
            except RuntimeError:
                pass
        return found

    def base(self, path: str, tiles: str | None = None) -> tuple[Plan, bytes]:
        """The run's plan and initial blob on an f16 path, with the matmul tiles tuned for the
        page's adapter key `tiles` (webmp.tune.page; None or nothing tuned yet: the defaults).
        With the quick tier of its first programs where their matmuls' tiles are not already the
        quick ones (webmp.engine.tiers: a page whose driver compiles at first dispatch runs those
        while it compiles the plan's own). Cached; runs in a worker thread."""
        built = self.cache.get((self.run_id, path, tiles))
        if built is None:
            data, table = self.data.load(self.cfg), TileTable.for_adapter(tiles)
            plan, blob = build_plan(self.cfg, data, path, table)
            quick, _ = build_plan(self.cfg, data, path, QuickTable(table), dry=True)
            add_quick_tier(plan, quick, FIRST_PROGRAMS)
            built = plan, blob
            self.cache.put((self.run_id, path, tiles), built)
        return built

    def resumed(
        self, offer: Offer, tiles: str | None, checkpoint_step: int | None
    ) -> tuple[Plan, bytes, int]:
        """(plan, blob, start step) for the page: resumed from the run's checkpoint if it has one
        (`checkpoint_step`), unless the training data changed since (RunStateConflict, as native
        resume refuses)."""
        plan, blob = self.base(self.path_for(offer), tiles)
        if checkpoint_step is None:
            return plan, blob, 0
        contents, meta = load_checkpoint(self.dir.path)
        then, now = meta.get("data_sha256"), self.data.load(self.cfg).sha256
        if then != now:
            raise RunStateConflict(
                f"cannot resume run {self.run_id}: its training data, {self.data.name(self.cfg)}, changed "
                f"since the checkpoint at step {meta['step']} (sha256 {then or 'not recorded'} then, "
                f"{now} now)"
            )
        plan, blob = resume_blob(plan, blob, contents)
        return plan, blob, int(meta["step"])

    def checkpoint_layout(self, offer: Offer) -> tuple[Plan, Layout]:
        """The plan and the (buffer, bytes) a checkpoint upload holds, in order."""
        plan, _ = self.base(self.path_for(offer))
        sizes = {b["name"]: b["bytes"] for b in plan["buffers"]}
        return plan, [(n, sizes[n]) for n in plan["checkpoint_buffers"]]

    def checkpoint_contents(self, offer: Offer, step: int, body: bytes) -> tuple[Plan, dict[str, bytes]]:
        """The plan and the buffers of an uploaded checkpoint, checked against the plan (its size,
        its state's step); InvalidUpload naming what does not fit."""
        plan, layout = self.checkpoint_layout(offer)
        expected = sum(n for _, n in layout)
        if len(body) != expected:
            raise InvalidUpload(f"a checkpoint of this plan is {expected} bytes, got {len(body)}")
        contents, offset = {}, 0
        for name, n in layout:
            contents[name] = body[offset : offset + n]
            offset += n
        iteration = decode_state(contents[plan["state"]["buffer"]])["iteration"]
        if iteration != step or step > self.cfg.steps:
            raise InvalidUpload(f"the checkpoint's state says step {iteration}, the upload says {step}")
        return plan, contents

    def drop(self) -> None:
        """Forget the run's built plans (a GPT's blob is ~17 MB: rebuilt in ~1 s if it is resumed)."""
        self.cache.drop(self.run_id)
