"""A run directory: the files every run writes, native or browser, in one format, written here only.

  config.json     the TrainConfig plus runtime facts (f16 path, adapter, runtime, data file's sha256)
  metrics.jsonl   one JSON object per logged step, the fields of webmp.engine.state.METRIC_FIELDS in order
  summary.json    final figures (`RunSummary`: train loss, test accuracy, steps, skipped, memory, ...)
  curves.png      loss and loss-scale curves on log axes, skipped steps marked
  histograms.jsonl  the gradient-range lens: per log read, each layer's log2 histogram of its
                  activation gradients' |values| (`histogram_line`, layout webmp.engine.plan.HistogramSpec)
  histograms.png  the last of them against f16's range, as stored and unscaled (`plot_histograms`)
  checkpoint.safetensors + checkpoint.json   (see webmp/train/checkpoint.py)

Every file is strict JSON: NaN and the infinities (a skipped step's grad_norm is NaN) are the
strings "NaN", "Infinity" and "-Infinity" (`json_safe`); `read_metrics` and `read_summary` turn
them back into floats. Native runs (webmp/train/loop.py) and browser runs (webmp/serve/runs.py) both
build their summary with `run_summary` and write it with `RunDir.write_summary`, so the two cannot
drift apart.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

from ..config import TrainConfig
from .format_lens import format_shares, range_counts

Runtime = Literal["native", "browser"]
Record = dict[str, Any]  # one metrics record: {field of METRIC_FIELDS: value}


class RunFacts(TypedDict):
    """RunSummary's keys that every run has."""

    final_train_loss: float | None  # mean loss over the last log_every records
    last_loss: float | None
    test_accuracy: float  # gpt: next-character accuracy on the evaluated validation characters
    test_correct: int
    test_count: int
    val_loss: float | None  # gpt: mean cross-entropy (nats) on the evaluated validation characters
    val_bits_per_char: float | None  # val_loss / ln 2
    unigram_bits_per_char: float | None  # the baseline (webmp.data.text.unigram_bits_per_char)
    steps: int  # optimizer steps attempted, skipped ones included
    micro_batches: int  # micro-batches an optimizer step (grad_accum; 1 without accumulation)
    effective_batch: int  # examples an optimizer step: batch_size x micro_batches
    optimizer_steps: int
    skipped_steps: int
    final_scale: float  # the loss scale of the last step (its record's: the curve's last point)
    min_scale_events: int
    precision: str
    f16_path: str  # native, emulated or none
    f16_description: str
    adapter: str
    runtime: Runtime
    matmul_tiles: str  # "default", or how many shape classes were tuned
    gpu_memory_bytes: dict[str, int]
    wall_seconds: float
    steps_per_second: float | None
    readbacks: int  # metrics-ring maps
    run_dir: str


class RunSummary(RunFacts, total=False):
    """summary.json: RunFacts, and for data-parallel runs `data_parallel` (DataParallelStep.summary:
    the ranks, the fused buffer's bytes, milliseconds per step of readback, all-reduce, upload);
    for precision fp8 `fp8`, its recipe and quantised layers (the plan's "fp8"); for data-parallel
    runs `optimizer_memory` (Trainer.optimizer_memory: bytes of masters and Adam moments each rank
    holds, and the unsharded figure); for a model with attention `attention`, its form, why and the
    log's line (webmp.models.attention_form.plan_attention)."""

    data_parallel: dict[str, Any]
    optimizer_memory: dict[str, Any]
    fp8: dict[str, Any]
    attention: dict[str, str]


def run_summary(
    cfg: TrainConfig,
    records: Sequence[Record],
    state: Mapping[str, float | int],
    *,
    test_correct: int,
    test_count: int,
    val_loss_sum: float | None = None,
    unigram_bits: float | None = None,
    f16_path: str | None,
    f16_description: str,
    adapter: str,
    runtime: Runtime,
    matmul_tiles: str,
    memory: Mapping[str, int],
    wall_seconds: float,
    steps_run: int,
    readbacks: int,
    run_dir: Path,
    fp8: dict[str, Any] | None = None,
    attention: Mapping[str, str] | None = None,
) -> RunSummary:
    """The summary of a finished run from its records and final GPU state (webmp.engine.state names).
    Language models also pass val_loss_sum (program 'eval''s summed loss over test_count
    characters) and unigram_bits (the corpus's baseline); the MLPs leave the val_* keys None.

    The last step's figures are its record's, the last point of the curves: last_loss, and
    final_scale the scale that step ran with (the state's scale is the next step's, already grown
    or backed off by the last step's outcome: the checkpoint keeps that one)."""
    tail = records[-min(len(records), cfg.log_every) :] if records else []
    val_loss = val_loss_sum / test_count if val_loss_sum is not None and test_count else None
    summary: RunSummary = {
        "final_train_loss": math.fsum(r["loss"] for r in tail) / len(tail) if tail else None,
        "last_loss": records[-1]["loss"] if records else None,
        "test_accuracy": test_correct / max(1, test_count),
        "test_correct": int(test_correct),
        "test_count": int(test_count),
        "val_loss": val_loss,
        "val_bits_per_char": val_loss / math.log(2) if val_loss is not None else None,
        "unigram_bits_per_char": unigram_bits,
        "steps": int(state["iteration"]),
        "micro_batches": cfg.grad_accum,
        "effective_batch": cfg.effective_batch,
        "optimizer_steps": int(state["opt_step"]),
        "skipped_steps": int(state["skipped_total"]),
        "final_scale": float(records[-1]["scale"] if records else state["scale"]),
        "min_scale_events": int(state["min_scale_events"]),
        "precision": cfg.precision,
        "f16_path": f16_path if f16_path not in (None, "fp32") else "none",
        "f16_description": f16_description,
        "adapter": adapter,
        "runtime": runtime,
        "matmul_tiles": matmul_tiles,
        "gpu_memory_bytes": dict(memory),
        "wall_seconds": round(wall_seconds, 3),
        "steps_per_second": round(steps_run / wall_seconds, 2) if wall_seconds > 0 else None,
        "readbacks": int(readbacks),
        "run_dir": str(run_dir),
    }
    if fp8 is not None:
        summary["fp8"] = fp8
    if attention is not None:
        summary["attention"] = dict(attention)
    return summary


NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def json_safe(value: Any) -> Any:
    """NaN and infinities as the strings "NaN", "Infinity", "-Infinity" (JSON has no literal for them;
    a skipped step's grad_norm is NaN). Every file of a run directory and every API reply is
    written so; `from_json_safe` and the page turn them back into numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def from_json_safe(record: dict[str, Any]) -> dict[str, Any]:
    """A record's "NaN" / "Infinity" / "-Infinity" strings back into floats (one level deep)."""
    return {k: NON_FINITE.get(v, v) if isinstance(v, str) else v for k, v in record.items()}


def dumps(obj: Any, indent: int | None = None) -> str:
    """Strict JSON (non-finite floats as json_safe's strings): what every run file holds."""
    return json.dumps(json_safe(obj), indent=indent, allow_nan=False)


def result_line(summary: RunSummary) -> str:
    """The run's result in words: validation loss for a language model, else test accuracy."""
    if summary["val_loss"] is not None:
        return (
            f"validation loss {summary['val_loss']:.4f} ({summary['val_bits_per_char']:.3f} bits/char, "
            f"unigram {summary['unigram_bits_per_char']:.3f})"
        )
    return f"test accuracy {100 * summary['test_accuracy']:.2f} %"


def divergence(records: Sequence[Record]) -> str | None:
    """What the first record with a training loss that is not finite says (the model diverged: the
    loss is NaN or infinite from there on, in any precision), or None without one."""
    bad = next((r for r in records if not math.isfinite(r["loss"])), None)
    if bad is None:
        return None
    loss = "NaN" if math.isnan(bad["loss"]) else "infinite"
    return (
        f"diverged: the training loss is {loss} at step {bad['step']} (a smaller lr, a longer "
        "warmup or gradient clipping may help); its records, summary and curves are kept"
    )


def scale_collapse(records: Sequence[Record], min_scale: float) -> str | None:
    """What the first min-scale event among `records` says (an overflow with the loss scale already
    at min_scale), or None without one: for native runs and page runs alike."""
    events = [r for r in records if r["min_scale_event"]]
    if not events:
        return None
    return (
        f"loss scale collapse at step {events[0]['step']}: gradients overflowed with the scale already at "
        f"min_scale={min_scale:g} ({len(events)} such step(s) in this interval)"
    )


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def new_run_dir(root: str | Path = "runs", prefix: str = "run") -> Path:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        p = root / f"{prefix}-{stamp}" if i == 0 else root / f"{prefix}-{stamp}-{i}"
        try:
            p.mkdir()
            return p
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a run directory under {root}")


CONFIG, METRICS, SUMMARY, CURVES = "config.json", "metrics.jsonl", "summary.json", "curves.png"
HISTOGRAMS, HISTOGRAMS_PNG = "histograms.jsonl", "histograms.png"

# f16's range in log2: values below 2^-24 flush to zero, below 2^-14 are subnormal, 65504 (just
# under 2^16) is the largest
F16_LOG2_SUBNORMAL_MIN, F16_LOG2_NORMAL_MIN, F16_LOG2_MAX = -24, -14, math.log2(65504.0)


def histogram_line(
    step: int, scale: float, e_min: int, e_max: int, layers: Sequence[tuple[str, Sequence[int]]]
) -> Record:
    """One line of histograms.jsonl: the lens's counts after step `step` (0-based, as in
    metrics.jsonl), whose gradients were scaled by `scale`; per layer (name, counts) in the
    bucket layout of webmp.engine.plan.HistogramSpec (zero, below 2^e_min, e_min..e_max, above, overflow)."""
    return {
        "step": int(step),
        "scale": float(scale),
        "e_min": int(e_min),
        "e_max": int(e_max),
        "layers": [{"name": name, "counts": [int(c) for c in counts]} for name, counts in layers],
    }


def scale_shift(scale: float) -> float:
    """The exponent shift from stored to unscaled gradients: -log2(scale) (0 for a scale that is
    not finite and positive, which a hostile page could report)."""
    return -math.log2(scale) if math.isfinite(scale) and scale > 0 else 0.0


def lens_view(line: Record, reads: int) -> dict[str, Any]:
    """A histograms.jsonl line as the page's lens draws it (GET /api/runs/{id}/histograms): the
    counts, the bucket exponents, f16's range and each layer's shares as stored and unscaled."""
    shift = scale_shift(line["scale"])
    e_min, e_max = line["e_min"], line["e_max"]
    layers = [
        {
            "name": lay["name"],
            "counts": lay["counts"],
            "stored": histogram_shares(lay["counts"], e_min, e_max),
            "unscaled": histogram_shares(lay["counts"], e_min, e_max, shift),
            "formats": format_shares(lay["counts"], e_min, e_max, shift),
        }
        for lay in line["layers"]
    ]
    f16_range = {
        "subnormal_min": 2.0**F16_LOG2_SUBNORMAL_MIN,
        "normal_min": 2.0**F16_LOG2_NORMAL_MIN,
        "max": 65504.0,
    }
    view = {"step": line["step"], "scale": line["scale"], "e_min": e_min, "e_max": e_max, "reads": reads}
    return json_safe({**view, "f16_range": f16_range, "layers": layers})


def histogram_shares(counts: Sequence[int], e_min: int, e_max: int, shift: float = 0.0) -> dict[str, float]:
    """Shares of a layer's values (counts as in histogram_line) against f16's range, its exponents
    shifted by `shift` (0: as stored; -log2(scale): the unscaled gradients, exact for a power-of-two
    scale): zero (exactly 0), underflow (nonzero, below 2^-24: flushes to zero in f16), subnormal
    (2^-24 .. 2^-14) and overflow (2^16 and above, and what the overflow test flagged)."""
    total = sum(counts)
    if total == 0:
        return {"zero": 0.0, "underflow": 0.0, "subnormal": 0.0, "overflow": 0.0}
    under, sub, over = range_counts(counts, e_min, e_max, shift, "fp16")
    return {
        "zero": counts[0] / total,
        "underflow": under / total,
        "subnormal": sub / total,
        "overflow": over / total,
    }


def formats_line(shares: Mapping[str, Any]) -> str:
    """Two lines of format_shares for a plot: each format's flush to zero / subnormal / overflow."""
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    parts = [
        f"{name} ({s['view']}) {pct(s['underflow'])}/{pct(s['subnormal'])}/{pct(s['overflow'])}"
        for name, s in shares.items()
        if "view" in s
    ]
    half = (len(parts) + 1) // 2
    return "flush/subnormal/overflow %: " + ", ".join(parts[:half]) + "\n" + ", ".join(parts[half:])


# matplotlib's figures are per call, but its mathtext parser (the log axes' tick labels) is one shared
# pyparsing object that is not thread-safe: two runs finishing at once on the server's worker
# threads made it raise ParseException. One plot at a time.
PLOT_LOCK = threading.Lock()


REPAIR_BLOCK = 1 << 16  # bytes repair_metrics reads at a time, from the end of metrics.jsonl


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # one line for the CLI: an unwritable place, a file in the way
            raise OSError(f"cannot create the run directory {self.path}: {e.strerror or e}") from None

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write(self.path / name, (dumps(obj, indent=2) + "\n").encode())

    def read_json(self, name: str) -> Any:
        return json.loads((self.path / name).read_text())

    def write_config(
        self,
        cfg: TrainConfig,
        *,
        f16_path: str | None,
        adapter: str | None,
        runtime: Runtime,
        data_sha256: str | None = None,
    ) -> None:
        """config.json; data_sha256 is the data file's (Dataset.sha256), None when built in."""
        facts = {"f16_path": f16_path, "adapter": adapter, "runtime": runtime, "data_sha256": data_sha256}
        self.write_json(CONFIG, {**cfg.model_dump(), **facts})

    def read_config(self) -> TrainConfig:
        """The TrainConfig of config.json (the runtime facts beside it are left out)."""
        saved = self.read_json(CONFIG)
        return TrainConfig(**{k: v for k, v in saved.items() if k in TrainConfig.model_fields})

    def write_summary(self, summary: RunSummary) -> None:
        self.write_json(SUMMARY, summary)

    def read_summary(self) -> RunSummary:
        summary: RunSummary = from_json_safe(self.read_json(SUMMARY))  # type: ignore[assignment]
        return summary

    def has_summary(self) -> bool:
        return (self.path / SUMMARY).is_file()

    def append_metrics(self, records: list[dict]) -> None:
        if not records:
            return
        self.repair_metrics()
        # O_NOFOLLOW: a symbolic link put in place of the file is an error, not followed
        fd = os.open(self.metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "a") as f:
            for r in records:
                f.write(dumps(r) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def repair_metrics(self) -> int:
        """Cut a torn last line (what a failed write, e.g. a full disk, leaves: no newline at the end)
        off metrics.jsonl; the number of bytes cut."""
        if self.metrics_path.is_symlink():
            raise OSError(f"{self.metrics_path} is a symbolic link; run files are not written through links")
        if not self.metrics_path.exists():
            return 0
        with open(self.metrics_path, "r+b") as f:
            keep = size = f.seek(0, os.SEEK_END)
            # from the end back to the last newline, a block at a time: every append calls this,
            # and reading the whole file each time would make a run's appends quadratic
            while keep > 0:
                start = max(0, keep - REPAIR_BLOCK)
                f.seek(start)
                newline = f.read(keep - start).rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                keep = start
            if keep < size:
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())
        return size - keep

    def read_metrics(self) -> list[dict]:
        """The records of metrics.jsonl. A torn last line (no newline after it) is left out and
        reported once in `self.torn_tail` (bytes), to be cut by the next append; a damaged line
        elsewhere is an error naming its line number."""
        self.torn_tail = 0
        if not self.metrics_path.exists():
            return []
        raw = self.metrics_path.read_bytes()
        whole = raw[: raw.rfind(b"\n") + 1]
        self.torn_tail = len(raw) - len(whole)
        out = []
        for n, line in enumerate(whole.decode("utf-8", "replace").splitlines(), 1):
            if line.strip():
                try:
                    out.append(from_json_safe(json.loads(line)))
                except ValueError:
                    raise ValueError(f"{self.metrics_path}: line {n} is not a JSON record") from None
        return out

    def truncate_metrics_after(self, step: int) -> None:
        """Drop records and histograms past `step` (a resumed run rewrites them)."""
        keep = [r for r in self.read_metrics() if r["step"] <= step]
        atomic_write(self.metrics_path, "".join(dumps(r) + "\n" for r in keep).encode())
        if (self.path / HISTOGRAMS).exists():
            lines = [h for h in self.read_histograms() if h["step"] <= step]
            atomic_write(self.path / HISTOGRAMS, "".join(dumps(h) + "\n" for h in lines).encode())

    def append_histograms(self, line: Record) -> None:
        """One line of histograms.jsonl (histogram_line)."""
        path = self.path / HISTOGRAMS
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "a") as f:
            f.write(dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read_histograms(self) -> list[Record]:
        """The lines of histograms.jsonl (none if the run has none); a torn last line is left out,
        a damaged line elsewhere is an error naming its line number."""
        path = self.path / HISTOGRAMS
        if not path.exists():
            return []
        raw = path.read_bytes()
        out = []
        for n, line in enumerate(raw[: raw.rfind(b"\n") + 1].decode("utf-8", "replace").splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    raise ValueError(f"{path}: line {n} is not a JSON line of histograms") from None
        return out

    def plot_histograms(self, title: str = "") -> Path | None:
        """histograms.png from the last line of histograms.jsonl (None when there is none)."""
        lines = self.read_histograms()
        if not lines:
            return None
        with PLOT_LOCK:
            return self._plot_histograms(lines[-1], title)

    def _plot_histograms(self, line: Record, title: str) -> Path:
        from matplotlib.figure import Figure

        out = self.path / HISTOGRAMS_PNG
        layers, e_min, e_max, scale = line["layers"], line["e_min"], line["e_max"], line["scale"]
        shift = scale_shift(scale)
        exps = list(range(e_min, e_max + 1))
        height = 1.0 + 2.0 * len(layers)
        fig = Figure(figsize=(9, height))
        axes = fig.subplots(len(layers), 1, sharex=True, squeeze=False)[:, 0]
        lo, hi = e_max, e_min
        for counts in (lay["counts"] for lay in layers):
            used = [e for e, n in zip(exps, counts[2:-2], strict=True) if n]
            if used:
                lo, hi = min(lo, used[0], int(used[0] + shift)), max(hi, used[-1], int(used[-1] + shift))
        lo, hi = min(lo, F16_LOG2_SUBNORMAL_MIN) - 2, max(hi, 16) + 2
        for ax, lay in zip(axes, layers, strict=True):
            counts = lay["counts"]
            total = max(1, sum(counts))
            frac = [n / total for n in counts[2:-2]]
            ax.bar(
                [e + 0.5 for e in exps],
                frac,
                width=1.0,
                color="tab:blue",
                alpha=0.75,
                label="as stored (scaled)",
            )
            if shift:
                ax.step([e + shift for e in exps] + [e_max + 1 + shift], [*frac, 0], where="post",
                        color="tab:orange", lw=1.2, label=f"unscaled (÷ {scale:g})")  # fmt: skip
            ax.axvspan(lo, F16_LOG2_SUBNORMAL_MIN, color="tab:red", alpha=0.08, lw=0)  # flushes to zero
            ax.axvspan(
                F16_LOG2_SUBNORMAL_MIN, F16_LOG2_NORMAL_MIN, color="gold", alpha=0.15, lw=0
            )  # subnormal
            ax.axvspan(F16_LOG2_MAX, hi, color="tab:red", alpha=0.08, lw=0)  # overflows
            for x, style, what in (
                (F16_LOG2_SUBNORMAL_MIN, ":", "2^-24"),
                (F16_LOG2_NORMAL_MIN, "--", "2^-14"),
                (F16_LOG2_MAX, "-", "65504"),
            ):
                ax.axvline(x, color="gray", ls=style, lw=1)
                ax.text(
                    x, 1.0, what, transform=ax.get_xaxis_transform(), fontsize=7, ha="center", va="bottom"
                )
            stored, unscaled = (
                histogram_shares(counts, e_min, e_max),
                histogram_shares(counts, e_min, e_max, shift),
            )
            ax.set_ylabel(lay["name"], fontsize=8)
            ax.text(
                0.01, 0.95,
                f"stored: zero {stored['zero']:.1%}, subnormal {stored['subnormal']:.1%}, "
                f"overflow {stored['overflow']:.1%}\nunscaled: flush to zero {unscaled['underflow']:.1%}, "
                f"subnormal {unscaled['subnormal']:.1%}, overflow {unscaled['overflow']:.1%}\n"
                + formats_line(format_shares(counts, e_min, e_max, shift)),
                transform=ax.transAxes, fontsize=7, va="top",
                bbox={"facecolor": "white", "alpha": 0.85, "lw": 0},
            )  # fmt: skip
            ax.set_xlim(lo, hi)
        axes[0].legend(loc="upper right", fontsize=7)
        axes[-1].set_xlabel("log2 |activation gradient|")
        fig.suptitle(title or f"gradient range at step {line['step']} (loss scale {scale:g})", fontsize=9)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / height))  # the title above the first f16 marks
        fig.savefig(out, dpi=100)
        return out

    def plot_curves(self, title: str = "") -> Path:
        recs = self.read_metrics()
        with PLOT_LOCK:
            return self._plot(recs, title)

    def _plot(self, recs: list[dict], title: str) -> Path:
        # matplotlib's object API, not pyplot: no global figure state (PLOT_LOCK guards the rest)
        from matplotlib.figure import Figure

        out = self.path / CURVES
        fig = Figure(figsize=(8, 6))
        a1, a2 = fig.subplots(2, 1, sharex=True)
        steps = [r["step"] for r in recs]
        a1.plot(steps, [max(r["loss"], 1e-12) for r in recs], lw=1)
        a1.set_yscale("log")
        a1.set_ylabel("training loss")
        a2.plot(steps, [r["scale"] for r in recs], lw=1, color="tab:orange")
        a2.set_yscale("log", base=2)
        a2.set_ylabel("loss scale")
        skipped = [r for r in recs if r.get("skipped")]
        if skipped:
            a2.scatter(
                [r["step"] for r in skipped],
                [r["scale"] for r in skipped],
                color="red",
                s=12,
                marker="x",
                label=f"skipped ({len(skipped)})",
                zorder=3,
            )
            a2.legend(loc="best")
        a2.set_xlabel("step")
        if title:
            a1.set_title(title)
        fig.tight_layout()
        fig.savefig(out, dpi=100)
        return out
