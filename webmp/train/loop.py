"""The training loop: build the plan, run it on the GPU, log, checkpoint, evaluate, summarise.

The host never touches a step: it submits train_step (one encoder, one submit) and, every log_every
steps, maps the metrics ring. Weights are read back only for checkpoints.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..config import FIELD_META, TrainConfig, resumed_config
from ..data.tables import Dataset
from ..data.text import TextCorpus, checkpoint_facts, describe_data, load_training_data, run_baseline_bits
from ..engine.fp8 import describe_fp8
from ..engine.plan import FIRST_PROGRAMS, Plan, describe_f16, resolve_f16_path
from ..engine.precompile import cpu_cores, helpers_for
from ..engine.runtime import GPU, Runtime, default_gpu, gpu_for_rank
from ..engine.state import decode_records
from ..engine.tiles import TileTable, plan_classes
from ..models import build_plan, network_of
from ..models.attention_form import plan_attention
from .checkpoint import (
    TENSORS,
    checkpoint_buffers,
    checkpoint_dir,
    initial_weights_blob,
    load_checkpoint,
    load_initial_weights,
    resume_blob,
    save_checkpoint,
)
from .distributed import BeforeAllreduce, DataParallelStep, World, detect_world, digest
from .rundir import (
    METRICS,
    RunDir,
    RunSummary,
    divergence,
    histogram_line,
    new_run_dir,
    result_line,
    run_summary,
    scale_collapse,
)
from .sharded import ShardedStep

# Fields that must match between a checkpoint and the run resuming it (their Meta.locked).
RESUME_LOCKED = tuple(name for name, meta in FIELD_META.items() if meta.locked)


def _quiet(*args, **kwargs) -> None:
    """The log of a Trainer given log=None, and of every rank but 0."""


# first-use tuning: (adapter, the run's dry plan, its tile table) -> (the table to use, a line for the log)
Tuner = Callable[[GPU, Plan, TileTable], tuple[TileTable, str]]


class ScaleCollapseError(RuntimeError):
    """An overflow happened with the loss scale already at min_scale (policy 'raise')."""


@dataclass(frozen=True)
class Resume:
    """A checkpoint to continue from, read once (load_checkpoint): the path it was given as (a run
    directory or its checkpoint.safetensors), its buffers and its checkpoint.json."""

    path: Path
    contents: dict[str, bytes]
    meta: dict[str, Any]

    @classmethod
    def read(cls, path: str | Path) -> Resume:
        contents, meta = load_checkpoint(path)
        return cls(Path(path), contents, meta)

    @property
    def step(self) -> int:
        return self.meta["step"]

    def config(self, given: dict[str, Any]) -> TrainConfig:
        """The config `--resume` continues with: the checkpoint's own, with the fields in `given` changed."""
        cfg, _ = resumed_config(self.meta["config"], given)
        return cfg

    def check(self, cfg: TrainConfig) -> list[str]:
        """ValueError unless `cfg` can continue this checkpoint (more steps, RESUME_LOCKED unchanged);
        else what it changes, one line each (config.resumed_config)."""
        if cfg.steps <= self.step:
            raise ValueError(
                f"cannot resume: the checkpoint is at step {self.step} and steps is {cfg.steps}; "
                f"give steps > {self.step} to train further"
            )
        old = TrainConfig(**self.meta["config"])
        _, changes = resumed_config(old.model_dump(), cfg.model_dump())
        clash = [
            f"{k}: checkpoint {getattr(old, k)!r} vs {getattr(cfg, k)!r}"
            for k in RESUME_LOCKED
            if getattr(old, k) != getattr(cfg, k)
        ]
        if clash:
            raise ValueError("cannot resume: the config differs from the checkpoint's in " + "; ".join(clash))
        return changes

    def check_data(self, data: Dataset | TextCorpus, cfg: TrainConfig) -> None:
        """ValueError when the training data is not the checkpoint's (its SHA-256 changed)."""
        if self.meta.get("data_sha256") != data.sha256:
            raise ValueError(
                f"cannot resume: the data file {cfg.data} changed since the checkpoint "
                f"(sha256 {self.meta.get('data_sha256')} then, {data.sha256} now)"
            )


class Trainer:
    def __init__(
        self,
        cfg: TrainConfig,
        out: str | Path | None = None,
        resume: str | Path | Resume | None = None,
        gpu: GPU | None = None,
        dataset: Dataset | TextCorpus | None = None,
        progress: bool = True,
        log=print,
        world: World | None = None,
        before_allreduce: BeforeAllreduce | None = None,
        tuner: Tuner | None = None,
        tiles: TileTable | None = None,
    ):
        """resume: a checkpoint (its path, or a Resume already read) this run continues. Under an MPI
        launcher (or with `world`), one data-parallel rank: every rank trains on its shard of each
        global batch, and only rank 0 writes the run directory (webmp.train.distributed).
        tuner: first-use tuning before the plan is built (`webmp train`'s
        webmp.tune.first_use.FirstUseTuning; None: none, the tune cache and shipped tables as they are).
        tiles: this table instead of the adapter's (TileTable.for_adapter), e.g. TileTable() for the
        defaults everywhere."""
        self.world = world or detect_world()
        self.writer = self.world.rank == 0
        self.log = (log or _quiet) if self.writer else _quiet
        self.progress = progress and self.writer
        self.cfg = cfg
        # the resume check, before any data or GPU work
        self.resume = Resume.read(resume) if isinstance(resume, (str, Path)) else resume
        if self.resume is None and out is not None and self.writer:
            check_new_run_dir(out)
        self.resume_changes = self.resume.check(cfg) if self.resume is not None else []
        self.data = dataset or load_training_data(cfg)
        if self.resume is not None:
            self.resume.check_data(self.data, cfg)
        self.gpu = gpu or (default_gpu() if self.world.size == 1 else gpu_for_rank(self.world.rank))
        self.path = resolve_f16_path(cfg.precision, cfg.f16, self.gpu.has_f16)
        # the tune cache's choices, else the adapter class's shipped ones, else the defaults
        self.tiles = self._limited(tiles or TileTable.for_adapter(self.gpu.name, self.gpu.info))
        self.tuning = self._first_use_tuning(tuner)
        self.tiles = self._limited(self.tiles)
        if self.resume is not None:  # an auto attention keeps the checkpoint's form
            self.tiles.kept_attention = self.resume.meta.get("attention")
        self.f16_description = describe_f16(self.path, cfg.f16, cfg.precision)
        self.plan, blob = self._build_plan()
        self.attention = plan_attention(self.plan, cfg)  # the form and why: the log, summary.json
        self.step = self.resume.step if self.resume is not None else 0
        # the step's and the lens's kernels first (the lens runs at the first read); the evaluation's
        # are made at their first use
        helpers, why = helpers_for(self.gpu.info, self.gpu.features, cpu_cores())
        if self.world.size > 1 and helpers > 0:
            helpers, why = 0, "a data-parallel run: its ranks share the cores"
        if helpers > 0:  # where the driver compiles a kernel at its first dispatch (webmp.engine.precompile)
            self.log(f"webmp: compiling the step's kernels on {helpers + 1} devices at once ({why}) ...")
        self.runtime = Runtime(self.plan, blob, self.gpu, first=FIRST_PROGRAMS, compile_helpers=helpers)
        self.compiled = self._compiled_line(self.runtime.precompiled)
        self.data_parallel: DataParallelStep | None = None
        if "data_parallel" in self.plan:
            dp = self.plan["data_parallel"]
            step_kind = ShardedStep if dp["zero"] is not None else DataParallelStep
            self.data_parallel = step_kind(self.runtime, dp, self.world, before_allreduce)
        self.run_path, self.run_dir = self._open_run_dir(out)
        self.last_checkpoint: tuple[Path, int] | None = (self.run_path, self.step) if self.resume else None
        self.records: list[dict] = []
        self.skipped_total = 0
        self.warned_min_scale = False
        self.wall = 0.0

    def _limited(self, tiles: TileTable) -> TileTable:
        """The table told this adapter's largest buffer (what TrainConfig.attention "auto" reads)."""
        limits = self.gpu.limits
        tiles.buffer_limit = min(limits.get("maxStorageBufferBindingSize", 0), limits.get("maxBufferSize", 0))
        return tiles

    def _first_use_tuning(self, tuner: Tuner | None) -> str | None:
        """Runs `tuner` on this run's shape classes (a dry plan's) and takes its table; the line
        the run's log shows for it (None: no tuner)."""
        if tuner is None:
            return None
        if self.world.size > 1:  # each rank would time its own and might choose otherwise
            return "skipped: a data-parallel run (a 1-rank run or `webmp bench --tune` fills the cache)"
        skipped = getattr(tuner, "skipped", None)  # a tuner that can say up front that it will not tune
        why = skipped(self.tiles) if skipped is not None else None
        if why is not None:
            return why
        self.log("webmp: first-use tuning of the run's matmul shapes (--no-tune skips it) ...")
        t0 = time.perf_counter()
        dry, _ = build_plan(self.cfg, self.data, self.path, self.tiles, dry=True)
        self.tiles, line = tuner(self.gpu, dry, self.tiles)
        return f"{line} [{time.perf_counter() - t0:.1f} s]"

    def _build_plan(self) -> tuple[Plan, bytes]:
        """The plan and its blob for this rank, starting from the checkpoint's buffers on a resume,
        else from the initial weights' file when the config names one, else from drawn weights."""
        cfg, world = self.cfg, self.world
        plan, blob = build_plan(cfg, self.data, self.path, self.tiles, rank=world.rank, world=world.size)
        if self.resume is not None:
            plan, blob = resume_blob(plan, blob, self.resume.contents)
            if self.resume.meta["f16_path"] != plan["f16_path"]:
                warnings.warn(
                    f"webmp: resuming a {self.resume.meta['f16_path']} checkpoint on the "
                    f"{plan['f16_path']} f16 path: results will not be bit-identical to an uninterrupted run",
                    stacklevel=3,
                )
        elif cfg.init_weights is not None:
            net = network_of(cfg, {p["name"]: p["shape"] for p in plan["params"]})
            weights = load_initial_weights(cfg.init_weights, plan, *net)
            plan, blob = initial_weights_blob(plan, blob, weights)
        return plan, blob

    def _open_run_dir(self, out: str | Path | None) -> tuple[Path, RunDir | None]:
        """The run directory: `out`, else the resumed checkpoint's, else a new one (rank 0's, the
        same on every rank). Only rank 0 writes it: the other ranks' RunDir is never made (it would
        create the directory). A resume drops the metrics after the checkpoint's step."""
        if out is None and self.resume is not None:
            out = checkpoint_dir(self.resume.path)
        if out is None and self.writer:
            out = new_run_dir()
        run_path = Path(self.world.bcast(str(out)))
        if not self.writer:
            return run_path, None
        run_dir = RunDir(run_path)
        if self.resume is not None:
            run_dir.truncate_metrics_after(self.step - 1)
        run_dir.write_config(
            self.cfg,
            f16_path=self.plan["f16_path"],
            adapter=self.gpu.name,
            runtime="native",
            data_sha256=self.data.sha256,
        )
        return run_path, run_dir

    # ------------------------------------------------------------------------------------------
    def read_state(self) -> dict[str, float | int]:
        return self.runtime.read_state()

    def checkpoint(self) -> Path:
        """Rank 0 saves the checkpoint; data-parallel ranks first check they hold the same bits."""
        contents = {n: self.runtime.read(n) for n in checkpoint_buffers(self.plan)}
        plan = self.plan
        zero = plan["data_parallel"]["zero"] if "data_parallel" in plan else None
        if zero is not None:
            contents, plan = self._gathered(contents, zero)
        elif self.world.size > 1:
            self.world.check_same(
                f"the weights, optimizer state and state words at step {self.step}",
                digest([contents[n] for n in checkpoint_buffers(self.plan)]),
            )
        path = self.run_path
        if self.run_dir is not None:
            extra: dict[str, Any] = {"adapter": self.gpu.name, **checkpoint_facts(self.data)}
            path = save_checkpoint(self.run_dir.path, plan, contents, extra)
        self.last_checkpoint = (self.run_path, self.step)
        return path

    def _gathered(self, contents: dict[str, bytes], zero: dict[str, Any]) -> tuple[dict[str, bytes], Plan]:
        """A sharded run's whole checkpoint on rank 0: the buffers every rank holds (checked the
        same bits on every rank) and each owner's masters and moments; the plan with every
        buffer of a whole checkpoint (its `absent` ones added), for save_checkpoint."""
        owned = {
            n
            for p, o in zip(self.plan["params"], zero["owners"], strict=True)
            for n in (p["master"], p["m"], p["v"])
            if o == self.world.rank
        }
        shared = [g["buffer"] for g in zero["gather"]] + ["state"]  # the same names on every rank
        self.world.check_same(
            f"the working copies and state words at step {self.step}", digest([contents[n] for n in shared])
        )
        parts = self.world.gather({n: contents[n] for n in owned})
        whole = dict(contents)
        for part in parts or []:
            whole.update(part)
        plan = dict(self.plan)
        plan["buffers"] = self.plan["buffers"] + zero["absent"]
        plan["checkpoint_buffers"] = zero["checkpoint_buffers"]
        return whole, cast(Plan, plan)

    def optimizer_memory(self) -> dict[str, Any]:
        """Bytes of masters and Adam moments on each rank (every rank's, by rank), and unsharded."""
        names = {n for p in self.plan["params"] for n in (p["master"], p["m"], p["v"])}
        unsharded = sum(b["bytes"] for b in self.plan["buffers"] if b["name"] in names)
        zero = self.plan["data_parallel"]["zero"] if "data_parallel" in self.plan else None
        if zero is not None:
            unsharded = zero["optimizer_bytes_unsharded"]
        held = sum(b["bytes"] for b in self.plan["buffers"] if b["name"] in names)
        return {
            "sharded": zero is not None,
            "ranks": self.world.size,
            "per_rank_bytes": self.world.allgather(held),
            "unsharded_bytes": unsharded,
        }

    def evaluate(self) -> dict:
        """Program 'eval': the test (or validation) counts, and a language model's summed loss."""
        self.runtime.run("eval")
        spec = self.plan["eval"]
        correct, counted = np.frombuffer(self.runtime.read(spec["result_buffer"]), np.uint32)[:2]
        loss_sum = None
        if spec["loss_buffer"] is not None:
            loss_sum = float(np.frombuffer(self.runtime.read(spec["loss_buffer"]), np.float32)[0])
        return {"test_correct": int(correct), "test_count": int(counted), "val_loss_sum": loss_sum}

    def _new_records(self, raw: bytes, first: int, last: int) -> list[dict]:
        recs = [r for r in decode_records(raw, self.plan["metrics"]["fields"]) if first <= r["step"] <= last]
        recs.sort(key=lambda r: r["step"])
        if len(recs) != last - first + 1:
            raise RuntimeError(f"metrics ring lost records between steps {first} and {last}")
        return recs

    def _histogram_line(self, last: dict) -> dict:
        """The lens's counts read with the metrics: those of the step of record `last`."""
        spec = self.plan["histograms"]
        assert self.runtime.last_histograms is not None
        counts = np.frombuffer(self.runtime.last_histograms, np.uint32)
        layers = [
            (lay["name"], counts[lay["offset"] : lay["offset"] + spec["buckets"]].tolist())
            for lay in spec["layers"]
        ]
        return histogram_line(last["step"], last["scale"], spec["e_min"], spec["e_max"], layers)

    def _handle_min_scale(self, recs: list[dict]) -> None:
        msg = scale_collapse(recs, self.cfg.min_scale)
        if msg is None:
            return
        if self.cfg.min_scale_policy == "raise":
            kept = (
                f"last checkpoint kept: {self.last_checkpoint[0]} (step {self.last_checkpoint[1]})"
                if self.last_checkpoint
                else "no checkpoint was written yet"
            )
            raise ScaleCollapseError(f"{msg}; {kept}")
        if not self.warned_min_scale:
            warnings.warn(
                "webmp: " + msg + "; continuing (min_scale_policy=warn), these steps are skipped",
                stacklevel=2,
            )
        self.warned_min_scale = True

    def run(self, stop_after: int | None = None) -> RunSummary:
        """Train to the plan's schedule.steps; with stop_after, stop (and checkpoint) once that many
        steps are done. The metrics ring is read after step s when s % log_every == 0, at the end or
        at a checkpoint (s % checkpoint_every == 0), as web/loops.js's train reads it."""
        schedule = self.plan["schedule"]
        steps, log_every, ckpt_every = schedule["steps"], schedule["log_every"], schedule["checkpoint_every"]
        end = steps if stop_after is None else min(steps, stop_after)
        self._log_start()
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=steps, initial=self.step, unit="step", dynamic_ncols=True, file=sys.stderr)
        logged = self.step - 1
        t0 = time.perf_counter()
        try:
            while self.step < end:
                s = self.step + 1  # steps completed after this submit
                ckpt = ckpt_every > 0 and s % ckpt_every == 0
                read = s % log_every == 0 or s == end or ckpt
                if self.data_parallel is not None:
                    raw = self.data_parallel.run(s, read_metrics=read, histograms=read)
                else:
                    raw = self.runtime.run("train_step", read_metrics=read, histograms=read)
                self.step = s
                if raw is not None:
                    self._take_records(self._new_records(raw, logged + 1, s - 1), bar)
                    logged = s - 1
                if ckpt and s < steps:
                    self.checkpoint()
        finally:
            if bar is not None:
                bar.close()
        self.wall = time.perf_counter() - t0
        return self.finish()

    def _log_start(self) -> None:
        cfg = self.cfg
        self.log(f"webmp: {cfg.precision}, {self.f16_description}, adapter {self.gpu.name}")
        if "fp8" in self.plan:
            self.log(f"webmp: {describe_fp8(self.plan['fp8'], cfg.loss_scaling)}")
        if self.gpu.driver_note:
            self.log(f"webmp: note: {self.gpu.driver_note}")
        self.log(f"webmp: run directory {self.run_path}")
        if self.tuning is not None:
            self.log(f"webmp: first-use tuning: {self.tuning}")
        if self.compiled is not None:
            self.log(f"webmp: {self.compiled}")
        self.log(f"webmp: matmul tiles: {self.tiles.describe(plan_classes(self.plan))}")
        if self.attention is not None:
            self.log(f"webmp: {self.attention['line']}")
        if self.world.size > 1:
            n = self.world.size
            self.log(
                f"webmp: data-parallel over {n} ranks, each {cfg.batch_size // n} of every batch of "
                f"{cfg.batch_size}"
            )
        self._log_zero()
        if cfg.grad_accum > 1:
            self.log(f"webmp: {cfg.accumulation_line}")
        for change in self.resume_changes:
            self.log(f"webmp: resuming at step {self.step} with {change}")
        if cfg.data is not None or isinstance(self.data, TextCorpus):
            self.log(f"webmp: data {describe_data(self.data)}")

    @staticmethod
    def _compiled_line(report: dict | None) -> str | None:
        if report is None:
            return None
        failed = f"; a helper failed: {report['helper_errors'][0]}" if report["helper_errors"] else ""
        return (
            f"compiled the step's {report['kernels']} kernels on {report['helpers'] + 1} devices in "
            f"{report['seconds']:.1f} s ({report['by_helpers']} by the helpers){failed}"
        )

    def _log_zero(self) -> None:
        if self.cfg.zero == 0:
            return
        zero = self.plan["data_parallel"]["zero"] if "data_parallel" in self.plan else None
        if zero is None:
            self.log("webmp: --zero 1 on one rank: there is nothing to shard (every rank would hold it all)")
            return
        mine, whole = zero["optimizer_bytes"], zero["optimizer_bytes_unsharded"]
        self.log(
            f"webmp: optimizer state sharded over {self.world.size} ranks (ZeRO-1): rank 0 holds "
            f"{mine} of {whole} bytes of masters and Adam moments; gradients reduce-scattered, "
            "updated weights all-gathered"
        )

    def _take_records(self, recs: list[dict], bar) -> None:
        """One read's records (and the lens's counts read with them): stored, counted, shown."""
        if self.run_dir is not None:
            self.run_dir.append_metrics(recs)
            self.run_dir.append_histograms(self._histogram_line(recs[-1]))
        self.records += recs
        self.skipped_total += sum(r["skipped"] for r in recs)
        if bar is not None:
            last = recs[-1]
            loss, scale = f"{last['loss']:.4f}", f"{last['scale']:g}"
            bar.set_postfix(loss=loss, scale=scale, skipped=self.skipped_total, refresh=False)
            bar.update(len(recs))
        self._handle_min_scale(recs)

    def finish(self) -> RunSummary:
        """Evaluate, checkpoint, summarise; rank 0 writes summary.json and curves.png (the other
        ranks' summaries count only the records of this session)."""
        state = self.read_state()
        ev = self.evaluate()
        self.checkpoint()
        summary = run_summary(
            self.cfg,
            self.run_dir.read_metrics() if self.run_dir is not None else self.records,
            state,
            test_correct=ev["test_correct"],
            test_count=ev["test_count"],
            val_loss_sum=ev["val_loss_sum"],
            unigram_bits=run_baseline_bits(self.cfg, self.data),
            f16_path=self.plan["f16_path"],
            f16_description=self.f16_description,
            adapter=self.gpu.name,
            runtime="native",
            matmul_tiles=self.tiles.describe(plan_classes(self.plan)),
            memory=self.plan["memory"],
            wall_seconds=self.wall,
            steps_run=len(self.records),
            readbacks=self.runtime.readbacks,
            run_dir=self.run_path,
            fp8=self.plan.get("fp8"),
            attention=self.attention,
        )
        if self.data_parallel is not None:
            summary["data_parallel"] = self.data_parallel.summary()
            summary["optimizer_memory"] = self.optimizer_memory()
        if self.run_dir is None:
            return summary
        self.run_dir.write_summary(summary)
        self.run_dir.plot_curves(f"{self.cfg.precision} / {summary['f16_path']} — {result_line(summary)}")
        self.run_dir.plot_histograms()
        self.log(
            f"webmp: done — train loss {summary['final_train_loss']:.4f}, {result_line(summary)}, "
            f"{summary['skipped_steps']} skipped steps"
        )
        diverged = divergence(self.run_dir.read_metrics())
        if diverged:
            print(f"webmp: the run {diverged}", file=sys.stderr)
        if self.data_parallel is not None:
            dp = summary["data_parallel"]
            self.log(
                f"webmp: {dp['ranks']} ranks, per step: {dp['step_ms']:.2f} ms, of which readback "
                f"{dp['readback_ms']:.2f}, all-reduce {dp['allreduce_ms']:.2f} ({dp['fused_bytes']} bytes), "
                f"upload {dp['upload_ms']:.2f}"
            )
        self.log(f"webmp: run directory {self.run_dir.path}")
        return summary


def check_new_run_dir(out: str | Path) -> None:
    """ValueError (one line) when `out` cannot hold a new run: a file, or a run directory already
    (a second run would append to its metrics; --resume continues it)."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise ValueError(f"--out {p}: is a file, not a directory")
    if (p / METRICS).exists() or (p / TENSORS).exists():
        raise ValueError(
            f"--out {p}: holds a run already; continue it with --resume {p}, or choose another --out"
        )


def train(
    cfg: TrainConfig | None = None,
    out: str | Path | None = None,
    resume: str | Path | None = None,
    progress: bool = False,
    **overrides: Any,
) -> RunSummary:
    """Python API: train and return the summary (also written to the run directory). With resume
    and no cfg, the run continues with its checkpoint's config, `overrides` changed."""
    checkpoint = Resume.read(resume) if resume is not None else None
    if cfg is not None:
        cfg = cfg.model_copy(update=overrides)
    elif checkpoint is not None:
        cfg = checkpoint.config(overrides)
    else:
        cfg = TrainConfig(**overrides)
    return Trainer(
        TrainConfig(**cfg.model_dump()),
        out=out,
        resume=checkpoint,
        progress=progress,
        log=print if progress else None,
    ).run()
