"""Runs trained by a browser page, on the server's side: a run's status, and what its page reports.

No web framework here: the routes (webmp/serve/routes_*.py) and sockets (webmp/serve/sockets.py) map
the `PageRunError`s raised below to HTTP statuses and WebSocket replies. A run lives in a run
directory of the same format as a native run (webmp/train/rundir.py), plus `browser.json` holding
its status. Every change happens on the server's event loop (plans and checkpoints are built in
worker threads, but stored from the loop), so two pages never interleave writes to the same files.

A `PageRun` keeps its status and records; its helpers do the rest: its plans and checkpoint
layout (webmp/serve/run_plans.py), the order of its records and the lens's counts
(webmp/serve/reports.py), and a finished GPT run's sampling plans (webmp/serve/sampling.py). The
runs of a runs directory are webmp/serve/store.py's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..data.text import checkpoint_facts, run_baseline_bits
from ..engine.plan import Plan, SamplePlan, describe_f16
from ..engine.tiles import TileTable
from ..sample.job import SampleJob
from ..train.checkpoint import save_checkpoint
from ..train.rundir import CONFIG, Record, RunDir, divergence, result_line, run_summary, scale_collapse
from .budget import PlanCache
from .errors import InvalidUpload, RunStateConflict
from .form import check_browser_config
from .messages import (
    Failed,
    Hello,
    Histograms,
    Offer,
    PageMessage,
    Records,
    RunInfo,
    RunStatus,
    Stopped,
    Summary,
    read_label,
)
from .native_runs import final_loss
from .page_data import PageData
from .reports import PendingRecords, RunLens
from .run_plans import Layout, RunPlans
from .sampling import RunSampler, page_settings

STATE_FILE = "browser.json"  # the browser run's status, next to the native-format files
RESUMABLE = {"created", "disconnected", "failed", "stopped"}  # a page may (re)start these
CONTINUABLE = RESUMABLE - {"created"}  # ...and these have trained: RunInfo.resumable, the page's Resume


class PageRun:
    """One run trained by a page: its directory, its status and the records stored so far."""

    kind = "browser"

    def __init__(
        self,
        path: Path,
        cfg: TrainConfig,
        state: dict[str, Any] | None = None,
        data_sha256: str | None = None,
        cache: PlanCache | None = None,
        data: PageData | None = None,
    ):
        """data_sha256: the training data's (config.json's), None for a built-in MLP dataset;
        cache: the cache of built plans (the store's, shared by its runs); data: where its training
        data is (the store's; None: the built-in data only)."""
        check_browser_config(cfg)
        self.id = path.name
        self.dir = RunDir(path)
        self.cfg = cfg
        self.data_sha256 = data_sha256
        state = state or {}
        self.status: RunStatus = state.get("status", "created")
        self.message: str = state.get("message", "")
        self.f16_path: str | None = state.get("f16_path")
        self.adapter: str | None = state.get("adapter")
        self.checkpoint_step: int | None = state.get("checkpoint_step")
        # browser.json's; runs saved before it was kept: when their config.json was last written
        config = path / CONFIG
        self.created: float = state.get("created") or (
            config.stat().st_mtime if config.exists() else time.time()
        )
        self.stop_requested = False  # asked by a follower or the API; the page learns it from its next ack
        self.starts = 0  # pages that started it (a resume drops the records after its checkpoint)
        self.records: list[Record] = self.dir.read_metrics()
        self.lens = RunLens(self.dir)
        self.pending = PendingRecords()
        self.connected = False
        self.data = data if data is not None else PageData(None)
        self.plans = RunPlans(self.id, cfg, self.dir, cache if cache is not None else PlanCache(), self.data)
        self.matmul_tiles = "default"  # TileTable.describe() of the last plan the page asked for
        self.attention: dict[str, str] | None = None  # that plan's attention form and why
        self.sampler = RunSampler(self.dir)
        self._changed = asyncio.Event()

    @property
    def last_step(self) -> int:
        return int(self.records[-1]["step"]) if self.records else -1

    @property
    def page_url(self) -> str:
        return f"/?run={self.id}"

    def info(self) -> RunInfo:
        return RunInfo(
            id=self.id,
            status=self.status,
            message=self.message,
            steps=self.cfg.steps,
            last_step=self.last_step,
            records=len(self.records),
            checkpoint_step=self.checkpoint_step,
            f16_path=self.f16_path,
            adapter=self.adapter,
            page_url=self.page_url,
            config=self.cfg.model_dump(),
            created=self.created,
            final_loss=final_loss(self.records),
            stop_requested=self.stop_requested,
            connected=self.connected,
            resumable=self.status in CONTINUABLE,
            generates_text=self.cfg.trains_on_text,
            **read_label(self.dir.path).model_dump(),
        )

    def save(self) -> None:
        self.dir.write_json(
            STATE_FILE,
            {
                "status": self.status,
                "message": self.message,
                "f16_path": self.f16_path,
                "adapter": self.adapter,
                "checkpoint_step": self.checkpoint_step,
                "created": self.created,
            },
        )
        self.dir.write_config(
            self.cfg,
            f16_path=self.f16_path,
            adapter=self.adapter,
            runtime="browser",
            data_sha256=self.data_sha256,
        )
        self.notify()

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def wait_changed(self, timeout: float) -> Awaitable[None]:
        """Waits until the run changes after this call (records or status), or `timeout` seconds.
        The change to wait for is fixed when this is called, not when it is awaited: a follower
        takes it before reading the run, so a change while it sends is not missed."""
        return self._wait(self._changed, timeout)

    @staticmethod
    async def _wait(event: asyncio.Event, timeout: float) -> None:
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    # --- plans and checkpoints (worker threads; RunPlans builds them) -------------------------------
    def plan(self, offer: Offer, tiles: str | None = None) -> tuple[Plan, bytes, int]:
        """(plan, blob, start step) for the page, with the tiles tuned for its adapter key `tiles`:
        resumed from the last checkpoint if there is one (RunPlans.resumed)."""
        built = self.plans.resumed(offer, tiles, self.checkpoint_step)
        self.matmul_tiles = TileTable.for_adapter(tiles).describe()
        self.attention = built[0].get("attention")
        return built

    def checkpoint_layout(self, offer: Offer) -> tuple[Plan, Layout]:
        """The plan and the (buffer, bytes) a checkpoint upload holds, in order."""
        return self.plans.checkpoint_layout(offer)

    def save_checkpoint(self, offer: Offer, step: int, body: bytes) -> None:
        """Checks an uploaded checkpoint against the plan and writes it (call from a worker thread;
        then `checkpoint_saved` from the event loop)."""
        if self.status != "running":
            raise RunStateConflict(f"run {self.id} is {self.status}; only a running page uploads checkpoints")
        path = self.plans.path_for(offer)
        if self.f16_path is not None and path != self.f16_path:
            raise InvalidUpload(f"a checkpoint for the {path} f16 path; this run trains on {self.f16_path}")
        plan, contents = self.plans.checkpoint_contents(offer, step, body)
        extra = {"adapter": self.adapter, "runtime": "browser", **checkpoint_facts(self.data.load(self.cfg))}
        save_checkpoint(self.dir.path, plan, contents, extra)

    def checkpoint_saved(self, step: int) -> None:
        self.checkpoint_step = step
        self.save()

    # --- what the page reports (event loop only) ---------------------------------------------------
    def start(self, hello: Hello) -> None:
        if self.status not in RESUMABLE:
            raise RunStateConflict(f"run {self.id} is {self.status}; it cannot be started again")
        expected = self.checkpoint_step or 0
        if hello.start_step != expected:
            raise RunStateConflict(
                f"the page starts at step {hello.start_step} but the run resumes at step "
                f"{expected}; reload the plan"
            )
        paths = self.plans.paths()
        if hello.f16_path not in paths:
            raise RunStateConflict(
                f"f16 path {hello.f16_path} does not match the run's config ({' or '.join(sorted(paths))})"
            )
        if self.records and self.last_step >= expected:
            self.dir.truncate_metrics_after(expected - 1)  # the resumed page sends these steps again
            self.records = [r for r in self.records if r["step"] < expected]
            self.lens.reload()
        self.pending.clear()
        self.stop_requested = False
        info = hello.adapter
        self.adapter = (
            " ".join(str(info[k]) for k in ("vendor", "architecture", "device", "description") if info.get(k))
            or "unknown adapter"
        )
        self.adapter += " (browser)"
        self.f16_path = hello.f16_path
        self.status, self.message = "running", ""
        self.starts += 1
        self.save()

    def add_records(self, records: list[Record]) -> tuple[int, int]:
        """Store records once each, in step order; returns (stored, duplicates)."""
        if self.status != "running":
            raise RunStateConflict(f"run {self.id} is {self.status}; send hello first")
        bad = [r["step"] for r in records if r["step"] >= self.cfg.steps]
        if bad:
            raise InvalidUpload(f"step {bad[0]} is past the run's {self.cfg.steps} steps")
        ready, dups = self.pending.add(records, self.last_step)
        self.store(ready)
        collapse = scale_collapse(ready, self.cfg.min_scale) if self.cfg.min_scale_policy == "raise" else None
        if collapse is not None:  # as native `webmp train` stops (min_scale_policy raise)
            kept = (
                f"last checkpoint kept: step {self.checkpoint_step}"
                if self.checkpoint_step
                else "no checkpoint was uploaded yet"
            )
            self.end("failed", f"{collapse}; {kept}")
            raise RunStateConflict(self.message)
        return len(ready), dups

    async def check_histograms(self, lens: Histograms, records: list[Record]) -> tuple[Plan, Record]:
        """The plan and the record of the lens's step, if the counts fit (RunLens.check)."""
        if self.status != "running" or self.f16_path is None:
            raise RunStateConflict(f"run {self.id} is {self.status}; send hello first")
        plan, _ = await asyncio.to_thread(self.plans.base, self.f16_path)
        return plan, self.lens.check(lens, plan, records, self.records)

    def store(self, records: list[Record]) -> None:
        if records:
            self.dir.append_metrics(records)
            self.records += records
            self.notify()

    def request_stop(self) -> None:
        """A Stop asked by another page or the API: the training page stops at its next metrics read
        (it learns of it from the ack of its next records) and reports `stopped` as its own Stop does."""
        if self.status != "running":
            raise RunStateConflict(f"run {self.id} is {self.status}; only a running run can be stopped")
        self.stop_requested = True
        self.notify()

    def end(self, status: RunStatus, message: str = "") -> None:
        self.store(self.pending.drain())  # records still waiting for a gap to fill: all are kept
        self.stop_requested = False
        self.status, self.message = status, message
        self.plans.drop()
        self.save()

    def disconnected(self) -> None:
        """The page's socket closed: a running run becomes resumable from its last checkpoint."""
        self.connected = False
        if self.status != "running":
            self.notify()  # followers of a created run: the page preparing it left
            return
        at = f" at step {self.last_step}" if self.records else ""
        where = (
            f"resume from the checkpoint at step {self.checkpoint_step}"
            if self.checkpoint_step
            else "restart it"
        )
        self.end("disconnected", f"the page disconnected{at}; open {self.page_url} to {where}")

    async def finish(self, msg: Summary) -> None:
        if self.status != "running" or self.f16_path is None:
            raise RunStateConflict(f"run {self.id} is {self.status}; send hello first")
        plan, _ = await asyncio.to_thread(self.plans.base, self.f16_path)
        sums_loss = plan["eval"]["loss_buffer"] is not None
        if sums_loss != (msg.val_loss_sum is not None):
            raise InvalidUpload(
                "this plan's eval program sums the validation loss: the summary needs val_loss_sum"
                if sums_loss
                else "this plan's eval program sums no loss: the summary must not carry val_loss_sum"
            )
        data = await asyncio.to_thread(self.data.load, self.cfg)
        unigram = await asyncio.to_thread(run_baseline_bits, self.cfg, data)
        self.store(self.pending.drain())
        summary = run_summary(
            self.cfg,
            self.records,
            msg.state.model_dump(),
            test_correct=msg.test_correct,
            test_count=msg.test_count,
            val_loss_sum=msg.val_loss_sum,
            unigram_bits=unigram,
            f16_path=self.f16_path,
            f16_description=describe_f16(self.f16_path, precision=self.cfg.precision),
            adapter=self.adapter or "unknown adapter",
            runtime="browser",
            matmul_tiles=self.matmul_tiles,
            memory=plan["memory"],
            wall_seconds=msg.wall_seconds,
            steps_run=msg.steps_run,
            readbacks=msg.readbacks,
            run_dir=self.dir.path,
            fp8=plan.get("fp8"),
            attention=self.attention or plan.get("attention"),  # the page's plan's, else the base plan's
        )
        self.dir.write_summary(summary)
        title = f"{self.cfg.precision} / {summary['f16_path']} (browser) — {result_line(summary)}"
        await asyncio.to_thread(self.dir.plot_curves, title)
        await asyncio.to_thread(self.dir.plot_histograms)
        diverged = divergence(self.records)
        if diverged:
            self.end("failed", diverged)
        else:
            self.end("finished")

    async def handle(self, msg: PageMessage) -> dict[str, Any]:
        """Apply one validated page message; the reply to send (an ack)."""
        if msg.run_id != self.id:
            raise InvalidUpload(f"message for run {msg.run_id} sent on run {self.id}'s socket; dropped")
        if isinstance(msg, Hello):
            self.start(msg)
        elif isinstance(msg, Records):
            records = [r.model_dump() for r in msg.records]
            lens = await self.check_histograms(msg.histograms, records) if msg.histograms else None
            stored, dups = self.add_records(records)
            ack = {"type": "ack", "last_step": self.last_step, "stored": stored, "duplicates": dups}
            if msg.histograms and lens:
                ack["histograms"] = self.lens.store(msg.histograms, *lens)
            return {**ack, "stop": True} if self.stop_requested else ack
        elif isinstance(msg, Summary):
            await self.finish(msg)
        elif isinstance(msg, Failed):
            if self.status != "failed":  # else the server ended it and its message says why
                self.end("failed", msg.message)
        elif isinstance(msg, Stopped):
            self.end("stopped", f"stopped by the user after {msg.step} steps")
        return {"type": "ack", "last_step": self.last_step}

    # --- text generation (a finished GPT run) --------------------------------------------------------
    def sample_plan(
        self,
        offer: Offer,
        prompt: str = "",
        tokens: str | None = None,
        temperature: str | None = None,
        seed: str | None = None,
        keep: bool = True,
    ) -> tuple[SamplePlan, bytes, SampleJob]:
        """The sampling plan of the run's final checkpoint (RunSampler.plan), the settings as text
        (None: `webmp sample`'s defaults; webmp.serve.sampling.page_settings). RunStateConflict
        unless the run is a finished GPT run; InvalidSample (one line) for bad settings. Runs in a
        worker thread."""
        if not self.cfg.trains_on_text:
            raise RunStateConflict(
                f"run {self.id} is a {self.cfg.model!r} run on a table or images; only a gpt run or a "
                "network with a token input generates text"
            )
        if self.status != "finished":
            raise RunStateConflict(
                f"run {self.id} is {self.status}; text is generated from a finished run's final checkpoint"
            )
        settings = page_settings(prompt, tokens, temperature, seed)
        return self.sampler.plan(offer, prompt, settings, self.checkpoint_step, keep)
