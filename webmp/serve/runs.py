"""Runs trained by a browser page, on the server's side: their state, plans, records and checkpoints.

No web framework here: webmp/serve/app.py maps the `PageRunError`s raised below to HTTP statuses and
WebSocket replies. A run lives in a run directory of the same format as a native run
(webmp/train/rundir.py), plus `browser.json` holding its status. Every change happens on the server's
event loop (plans and checkpoints are built in worker threads, but stored from the loop), so two
pages never interleave writes to the same files.

A finished GPT run also generates text for its page: `PageRun.sample_plan` builds the sampling plan
of its final checkpoint with webmp/sample/job.py, the code of `webmp sample`, and the page replays
it (web/runner.js) and decodes the tokens with the plan's vocabulary.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from ..config import TrainConfig
from ..data.tables import Dataset, load_dataset
from ..data.text import TextCorpus, checkpoint_facts, load_text, run_baseline_bits
from ..engine.plan import Plan, SamplePlan, describe_f16, resolve_f16_path
from ..engine.state import decode_state
from ..engine.tiles import TileTable
from ..models import build_plan
from ..sample.job import (
    SampleError,
    SampleJob,
    parse_settings,
    prepare,
)
from ..train.checkpoint import load_checkpoint, resume_blob, save_checkpoint
from ..train.rundir import (
    CONFIG,
    Record,
    RunDir,
    histogram_line,
    histogram_shares,
    json_safe,
    new_run_dir,
    result_line,
    run_summary,
    scale_collapse,
    scale_shift,
)
from .budget import PlanCache, check_plan_size
from .errors import InvalidConfig, InvalidSample, InvalidUpload, RunStateConflict, UnknownRun
from .form import MAX_PAGE_PROMPT, MAX_PAGE_TOKENS, check_browser_config
from .messages import (
    RUN_ID_RE,
    Failed,
    Hello,
    Histograms,
    PageMessage,
    Records,
    RunInfo,
    RunStatus,
    Stopped,
    Summary,
)
from .native_runs import NativeRun, final_loss, scan_native

STATE_FILE = "browser.json"  # the browser run's status, next to the native-format files
RESUMABLE = {"created", "disconnected", "failed", "stopped"}  # a page may (re)start these
CONTINUABLE = RESUMABLE - {"created"}  # ...and these have trained: RunInfo.resumable, the page's Resume
MAX_PENDING = 100_000  # records held back waiting for an earlier step
Offer = Literal["native", "emulated"]  # whether the page's adapter has shader-f16


@lru_cache(maxsize=4)
def _dataset(name: str, input_scale: float) -> Dataset:
    return load_dataset(name, input_scale)


@lru_cache(maxsize=1)
def _default_corpus() -> TextCorpus:
    return load_text(None)  # what native `webmp train --model gpt` reads without --data


def training_data(cfg: TrainConfig) -> Dataset | TextCorpus:
    """What a browser run trains on: webmp.data.text.load_training_data for a config without data
    (check_browser_config), loaded once per server process."""
    check_browser_config(cfg)
    return _default_corpus() if cfg.model == "gpt" else _dataset(cfg.dataset, cfg.input_scale)


# --- what a run's plan would hold, before it is built ----------------------------------------------


DEFAULT_CORPUS = "the default corpus (the server's Python standard library sources)"


# --- the page's form -------------------------------------------------------------------------------


class PageRun:
    """One run trained by a page: its directory, its status and the records stored so far."""

    kind = "browser"

    def __init__(
        self,
        path: Path,
        cfg: TrainConfig,
        state: dict[str, Any] | None = None,
        data_sha256: str | None = None,
        plans: PlanCache | None = None,
    ):
        """data_sha256: the training data's (config.json's), None for a built-in MLP dataset;
        plans: the cache of built plans (the store's, shared by its runs)."""
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
        self.records: list[Record] = self.dir.read_metrics()
        self.histograms_step = self._last_histograms_step()  # of histograms.jsonl's last line
        self.pending: dict[int, Record] = {}
        self.connected = False
        self.plans = plans if plans is not None else PlanCache()
        self.matmul_tiles = "default"  # TileTable.describe() of the last plan the page asked for
        self.sampled: tuple[tuple[Any, ...], SamplePlan, bytes, SampleJob] | None = None  # the last plan
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

    # --- plans and checkpoints ---------------------------------------------------------------------
    def path_for(self, offer: Offer) -> str:
        """The f16 path for a page whose adapter has ('native') or lacks ('emulated') shader-f16."""
        try:
            return resolve_f16_path(self.cfg.precision, self.cfg.f16, offer == "native")
        except RuntimeError as e:
            raise RunStateConflict(str(e)) from None

    def base_plan(self, path: str, tiles: str | None = None) -> tuple[Plan, bytes]:
        """The run's plan and initial blob on an f16 path, with the matmul tiles tuned for the
        page's adapter key `tiles` (webmp.tune.page; None or nothing tuned yet: the defaults).
        Cached; runs in a worker thread."""
        built = self.plans.get((self.id, path, tiles))
        if built is None:
            built = build_plan(self.cfg, training_data(self.cfg), path, TileTable.for_adapter(tiles))
            self.plans.put((self.id, path, tiles), built)
        return built

    def plan(self, offer: Offer, tiles: str | None = None) -> tuple[Plan, bytes, int]:
        """(plan, blob, start step) for the page, with the tiles tuned for its adapter key `tiles`:
        resumed from the last checkpoint if there is one, unless the training data changed since
        (RunStateConflict, as native resume refuses)."""
        plan, blob = self.base_plan(self.path_for(offer), tiles)
        self.matmul_tiles = TileTable.for_adapter(tiles).describe()
        if self.checkpoint_step is None:
            return plan, blob, 0
        contents, meta = load_checkpoint(self.dir.path)
        then, now = meta.get("data_sha256"), training_data(self.cfg).sha256
        if then != now:
            what = DEFAULT_CORPUS if self.cfg.model == "gpt" else f"the {self.cfg.dataset} dataset"
            raise RunStateConflict(
                f"cannot resume run {self.id}: its training data, {what}, changed since the checkpoint "
                f"at step {meta['step']} (sha256 {then or 'not recorded'} then, {now} now)"
            )
        plan, blob = resume_blob(plan, blob, contents)
        return plan, blob, int(meta["step"])

    def checkpoint_layout(self, offer: Offer) -> tuple[Plan, list[tuple[str, int]]]:
        """The plan and the (buffer, bytes) a checkpoint upload holds, in order."""
        plan, _ = self.base_plan(self.path_for(offer))
        sizes = {b["name"]: b["bytes"] for b in plan["buffers"]}
        return plan, [(n, sizes[n]) for n in plan["checkpoint_buffers"]]

    def save_checkpoint(self, offer: Offer, step: int, body: bytes) -> None:
        """Checks an uploaded checkpoint against the plan and writes it (call from a worker thread;
        then `checkpoint_saved` from the event loop)."""
        if self.status != "running":
            raise RunStateConflict(f"run {self.id} is {self.status}; only a running page uploads checkpoints")
        if self.f16_path is not None and self.path_for(offer) != self.f16_path:
            raise InvalidUpload(
                f"a checkpoint for the {self.path_for(offer)} f16 path; this run trains on {self.f16_path}"
            )
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
        extra = {"adapter": self.adapter, "runtime": "browser", **checkpoint_facts(training_data(self.cfg))}
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
        paths = set()
        for has_f16 in (True, False):
            try:
                paths.add(resolve_f16_path(self.cfg.precision, self.cfg.f16, has_f16))
            except RuntimeError:
                pass
        if hello.f16_path not in paths:
            raise RunStateConflict(
                f"f16 path {hello.f16_path} does not match the run's config ({' or '.join(sorted(paths))})"
            )
        if self.records and self.last_step >= expected:
            self.dir.truncate_metrics_after(expected - 1)  # the resumed page sends these steps again
            self.records = [r for r in self.records if r["step"] < expected]
            self.histograms_step = self._last_histograms_step()
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
        self.save()

    def add_records(self, records: list[Record]) -> tuple[int, int]:
        """Store records once each, in step order; returns (stored, duplicates)."""
        if self.status != "running":
            raise RunStateConflict(f"run {self.id} is {self.status}; send hello first")
        bad = [r["step"] for r in records if r["step"] >= self.cfg.steps]
        if bad:
            raise InvalidUpload(f"step {bad[0]} is past the run's {self.cfg.steps} steps")
        dups = 0
        for r in records:
            if r["step"] <= self.last_step or r["step"] in self.pending:
                dups += 1
            else:
                self.pending[r["step"]] = r
        if len(self.pending) > MAX_PENDING:
            self.pending.clear()
            raise InvalidUpload("too many records waiting for an earlier step; dropped them")
        ready: list[Record] = []
        while self.last_step + len(ready) + 1 in self.pending:
            ready.append(self.pending.pop(self.last_step + len(ready) + 1))
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

    def _last_histograms_step(self) -> int | None:
        lines = self.dir.read_histograms()
        return int(lines[-1]["step"]) if lines else None

    async def check_histograms(self, lens: Histograms, records: list[Record]) -> tuple[Plan, Record]:
        """The plan and the record of the lens's step, if its counts fit the plan (a list per layer,
        of its bucket count, adding up to the layer's rows x cols values), its step's record is
        stored or among `records` (those of the same message) and it comes after the last stored
        histograms; else InvalidUpload naming what is wrong."""
        if self.status != "running" or self.f16_path is None:
            raise RunStateConflict(f"run {self.id} is {self.status}; send hello first")
        plan, _ = await asyncio.to_thread(self.base_plan, self.f16_path)
        spec = plan["histograms"]
        if len(lens.counts) != len(spec["layers"]):
            raise InvalidUpload(
                f"histograms for {len(lens.counts)} layers; the plan has {len(spec['layers'])}"
            )
        for counts, lay in zip(lens.counts, spec["layers"], strict=True):
            values = lay["shape"][0] * lay["shape"][1]
            if len(counts) != spec["buckets"] or sum(counts) != values:
                raise InvalidUpload(
                    f"histograms of layer {lay['name']}: {len(counts)} counters adding up to {sum(counts)}; "
                    f"the plan's lens has {spec['buckets']} adding up to its {values} values"
                )
        record = next((r for r in [*records, *reversed(self.records)] if r["step"] == lens.step), None)
        if record is None:
            raise InvalidUpload(
                f"histograms of step {lens.step}, whose record is neither stored nor sent with them"
            )
        if self.histograms_step is not None and lens.step <= self.histograms_step:
            raise InvalidUpload(f"histograms of step {lens.step} after those of step {self.histograms_step}")
        return plan, record

    def store_histograms(self, lens: Histograms, plan: Plan, record: Record) -> dict[str, Any]:
        """Append checked counts (check_histograms) to histograms.jsonl with their step's scale; each
        layer's shares against f16's range, as stored and unscaled (rundir.histogram_shares)."""
        spec = plan["histograms"]
        names = [lay["name"] for lay in spec["layers"]]
        layers = list(zip(names, lens.counts, strict=True))
        self.dir.append_histograms(
            histogram_line(lens.step, record["scale"], spec["e_min"], spec["e_max"], layers)
        )
        self.histograms_step = lens.step
        shift = scale_shift(record["scale"])
        shares = [
            {
                "name": name,
                "stored": histogram_shares(c, spec["e_min"], spec["e_max"]),
                "unscaled": histogram_shares(c, spec["e_min"], spec["e_max"], shift),
            }
            for name, c in layers
        ]
        return json_safe(
            {"step": lens.step, "scale": record["scale"], "shares": shares}
        )  # a page's NaN scale

    def store(self, records: list[Record]) -> None:
        if records:
            self.dir.append_metrics(records)
            self.records += records
            self.notify()

    def flush_pending(self) -> None:
        """Keep records still waiting for a gap to fill (a page that left): all received are kept."""
        self.store([self.pending[s] for s in sorted(self.pending)])
        self.pending.clear()

    def request_stop(self) -> None:
        """A Stop asked by another page or the API: the training page stops at its next metrics read
        (it learns of it from the ack of its next records) and reports `stopped` as its own Stop does."""
        if self.status != "running":
            raise RunStateConflict(f"run {self.id} is {self.status}; only a running run can be stopped")
        self.stop_requested = True
        self.notify()

    def end(self, status: RunStatus, message: str = "") -> None:
        self.flush_pending()
        self.stop_requested = False
        self.status, self.message = status, message
        self.plans.drop(self.id)  # a GPT's blob is ~17 MB: rebuilt (in ~1 s) if the run is resumed
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
        plan, _ = await asyncio.to_thread(self.base_plan, self.f16_path)
        sums_loss = plan["eval"]["loss_buffer"] is not None
        if sums_loss != (msg.val_loss_sum is not None):
            raise InvalidUpload(
                "this plan's eval program sums the validation loss: the summary needs val_loss_sum"
                if sums_loss
                else "this plan's eval program sums no loss: the summary must not carry val_loss_sum"
            )
        data = await asyncio.to_thread(training_data, self.cfg)
        unigram = await asyncio.to_thread(run_baseline_bits, self.cfg, data)
        self.flush_pending()
        summary = run_summary(
            self.cfg,
            self.records,
            msg.state.model_dump(),
            test_correct=msg.test_correct,
            test_count=msg.test_count,
            val_loss_sum=msg.val_loss_sum,
            unigram_bits=unigram,
            f16_path=self.f16_path,
            f16_description=describe_f16(self.f16_path),
            adapter=self.adapter or "unknown adapter",
            runtime="browser",
            matmul_tiles=self.matmul_tiles,
            memory=plan["memory"],
            wall_seconds=msg.wall_seconds,
            steps_run=msg.steps_run,
            readbacks=msg.readbacks,
            run_dir=self.dir.path,
        )
        self.dir.write_summary(summary)
        title = f"{self.cfg.precision} / {summary['f16_path']} (browser) — {result_line(summary)}"
        await asyncio.to_thread(self.dir.plot_curves, title)
        await asyncio.to_thread(self.dir.plot_histograms)
        self.end("finished")

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
        """The sampling plan of the run's final checkpoint for a page whose adapter has ('native')
        or lacks ('emulated') shader-f16, built as `webmp sample` builds it (webmp.sample.job,
        default matmul tiles like the training plans); the settings as text (None: `webmp
        sample`'s defaults). InvalidSample (one line) for bad settings or a prompt outside the
        vocabulary; RunStateConflict unless the run is a finished GPT run. With `keep` the plan is
        kept for the blob request that follows it, which passes keep=False (so a run holds no blob
        once the page has it). Runs in a worker thread."""
        if self.cfg.model != "gpt":
            raise RunStateConflict(
                f"run {self.id} is a {self.cfg.model!r} run; only a gpt run generates text"
            )
        if self.status != "finished":
            raise RunStateConflict(
                f"run {self.id} is {self.status}; text is generated from a finished run's final checkpoint"
            )
        try:
            n, t, s = parse_settings(tokens, temperature, seed)
        except SampleError as e:
            raise InvalidSample(str(e)) from None
        if n > MAX_PAGE_TOKENS:
            raise InvalidSample(f"tokens must be at most {MAX_PAGE_TOKENS} on the page, got {n}")
        if len(prompt) > MAX_PAGE_PROMPT:
            raise InvalidSample(f"the prompt must be at most {MAX_PAGE_PROMPT} characters, got {len(prompt)}")
        key = (offer, prompt, n, t, s, self.checkpoint_step)
        kept, self.sampled = self.sampled, None
        if kept is not None and kept[0] == key:
            self.sampled = kept if keep else None
            return kept[1:]
        try:
            job = prepare(self.dir.path, prompt, tokens=n, temperature=t, seed=s)
            path = job.path(offer == "native")
        except SampleError as e:
            raise InvalidSample(str(e)) from None
        except RuntimeError as e:  # f16 'native' asked of an adapter without shader-f16
            raise RunStateConflict(str(e)) from None
        plan, blob = job.plan(path)
        if keep:
            self.sampled = (key, plan, blob, job)
        return plan, blob, job

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
                ack["histograms"] = self.store_histograms(msg.histograms, *lens)
            return {**ack, "stop": True} if self.stop_requested else ack
        elif isinstance(msg, Summary):
            await self.finish(msg)
        elif isinstance(msg, Failed):
            if self.status != "failed":  # else the server ended it and its message says why
                self.end("failed", msg.message)
        elif isinstance(msg, Stopped):
            self.end("stopped", f"stopped by the user after {msg.step} steps")
        return {"type": "ack", "last_step": self.last_step}


class RunStore:
    """The page runs under one root directory, reloaded from disk when the server starts, and the
    native runs there (`webmp train --out ROOT/NAME`: webmp/serve/native_runs.py), looked for again
    whenever the runs are listed or an unknown id is asked for."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.runs: dict[str, PageRun] = {}
        self.native: dict[str, NativeRun] = {}
        self.skipped: set[str] = set()  # native run directories reported as unreadable once
        self.plans = PlanCache()  # shared by the runs: at most MAX_CACHED_PLANS held in all
        if self.root.is_dir():
            for state_file in sorted(self.root.glob(f"*/{STATE_FILE}")):
                self._load(state_file.parent)
        self.scan_native()

    def scan_native(self) -> None:
        found, skipped = scan_native(self.root, set(self.runs) | set(self.native))
        self.native.update(found)
        for name, why in skipped.items():
            if name not in self.skipped:
                self.skipped.add(name)
                print(f"webmp serve: not listing {self.root / name}: {why}", file=sys.stderr)

    def listing(self) -> list[RunInfo]:
        """Every run, browser and native, oldest first."""
        self.scan_native()
        infos = [r.info() for r in self.runs.values()] + [r.info() for r in self.native.values()]
        return sorted(infos, key=lambda i: (i.created, i.id))

    def view(self, run_id: str) -> PageRun | NativeRun:
        """A run to read (status, records, summary), browser or native; UnknownRun if neither."""
        if RUN_ID_RE.match(run_id):
            if run_id not in self.runs and run_id not in self.native:
                self.scan_native()
            run = self.runs.get(run_id) or self.native.get(run_id)
            if run is not None:
                return run
        raise UnknownRun(f"no run {run_id!r}")

    def _load(self, path: Path) -> None:
        links = [p.name for p in (path, *path.iterdir()) if p.is_symlink()]
        if links:  # a link could make reads and writes reach outside the runs directory
            print(
                f"webmp serve: skipping {path}: symbolic links are not followed ({', '.join(links)})",
                file=sys.stderr,
            )
            return
        try:
            state = json.loads((path / STATE_FILE).read_text())
            run_dir = RunDir(path)
            cfg = run_dir.read_config()
            check_browser_config(cfg)
            sha256 = run_dir.read_json(CONFIG).get("data_sha256")
        except (OSError, ValueError, InvalidConfig) as e:
            print(f"webmp serve: skipping {path}: {e}", file=sys.stderr)
            return
        if state.get("status") == "running":  # the server stopped while a page was training
            state["status"], state["message"] = "disconnected", "the server restarted during the run"
        try:
            run = PageRun(path, cfg, state, sha256, self.plans)
        except ValueError as e:  # a damaged metrics line: the run is kept on disk, not served
            print(f"webmp serve: skipping {path}: {e}", file=sys.stderr)
            return
        if run.dir.torn_tail:
            print(
                f"webmp serve: {path.name}: metrics.jsonl ends in a torn line ({run.dir.torn_tail} bytes, "
                f"a write that failed); serving its {len(run.records)} whole records, the next append "
                "cuts it",
                file=sys.stderr,
            )
        self.runs[path.name] = run

    def create(self, cfg: TrainConfig) -> PageRun:
        """A new run; config.json records its training data's sha256, as a native run's does (the
        data is loaded once per server process: call from a worker thread the first time)."""
        data = training_data(cfg)  # checks the config before the run directory exists
        check_plan_size(cfg, data)
        sha256 = data.sha256
        run = PageRun(new_run_dir(self.root, prefix="browser"), cfg, data_sha256=sha256, plans=self.plans)
        run.save()
        self.runs[run.id] = run
        return run

    def get(self, run_id: str) -> PageRun:
        """A browser run, to train or change; RunStateConflict for a native run (read-only here)."""
        run = self.view(run_id)
        if isinstance(run, NativeRun):
            raise RunStateConflict(f"run {run_id}: {run.resume_note}")
        return run
