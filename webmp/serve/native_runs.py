"""Run directories that `webmp train` wrote under the server's runs directory (native runs), as the
runs panel and the compare view see them: read-only, next to the browser runs of webmp/serve/runs.py.

A native run has no status file: it is `finished` once summary.json exists (`failed` when its loss
diverged: webmp.train.rundir.divergence); without one it is
`running` while its files keep changing (metrics.jsonl or config.json written in the last
NATIVE_QUIET_S seconds), else `stopped` (interrupted, or it failed: the message says it has no
summary). The server serves its records and summary like a browser run's; it never trains one
(`webmp train --resume DIR` continues it, on the GPU that started it).

`downsample` thins a long run's records for the compare view's charts.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Awaitable
from pathlib import Path

from ..config import TrainConfig
from ..train.rundir import CONFIG, Record, RunDir, divergence
from .messages import RUN_ID_RE, RunInfo, RunStatus, read_label

NATIVE_QUIET_S = 120.0  # a native run without summary.json whose files are older than this has ended
NATIVE_POLL_S = 0.5  # how often a wait on a running native run looks at its metrics file
NATIVE_RESUME = (
    "a native run (webmp train) is served read-only; continue it with `webmp train --resume {path}`"
)


def final_loss(records: list[Record]) -> float | None:
    """The last record's loss (None without records; NaN stays NaN: a diverged run)."""
    return float(records[-1]["loss"]) if records else None


class NativeRun:
    """A run directory written by `webmp train`: its config, records and summary, read on demand
    (the records are re-read when metrics.jsonl changes)."""

    kind = "native"
    starts = 0  # never started by a page (webmp train --resume continues it in a new process)
    stop_requested = False  # nothing stops a native run from here
    connected = False  # no page trains it

    def __init__(self, path: Path):
        """ValueError / OSError for a directory that is not a readable native run."""
        self.id = path.name
        self.dir = RunDir(path)
        facts = self.dir.read_json(CONFIG)
        if facts.get("runtime") != "native":
            raise ValueError(f"config.json says runtime {facts.get('runtime')!r}, not 'native'")
        self.cfg: TrainConfig = self.dir.read_config()
        self.f16_path: str | None = facts.get("f16_path")
        self.adapter: str | None = facts.get("adapter")
        self.created = (path / CONFIG).stat().st_mtime
        self._records: list[Record] = []
        self._read_at: tuple[int, int] | None = None  # (mtime_ns, size) of the metrics file read

    def _metrics_stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.dir.metrics_path)
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    @property
    def records(self) -> list[Record]:
        stamp = self._metrics_stamp()
        if stamp is None:
            return []
        if stamp != self._read_at:
            self._records, self._read_at = self.dir.read_metrics(), stamp
        return self._records

    @property
    def last_step(self) -> int:
        records = self.records
        return int(records[-1]["step"]) if records else -1

    @property
    def status(self) -> RunStatus:
        if self.dir.has_summary():
            return "failed" if divergence(self.records) else "finished"
        stamp = self._metrics_stamp()
        newest = max(stamp[0] / 1e9 if stamp else 0.0, (self.dir.path / CONFIG).stat().st_mtime)
        return "running" if time.time() - newest < NATIVE_QUIET_S else "stopped"

    @property
    def message(self) -> str:
        status = self.status
        if status == "failed":
            return divergence(self.records) or ""
        if status == "stopped":
            return (
                f"no summary.json and no new record for over {NATIVE_QUIET_S:g} s: the native run ended "
                f"before finishing (interrupted, or it failed); {self.resume_note}"
            )
        return ""

    @property
    def resume_note(self) -> str:
        return NATIVE_RESUME.format(path=self.dir.path)

    @property
    def page_url(self) -> str:
        return f"/?run={self.id}"

    def wait_changed(self, timeout: float) -> Awaitable[None]:
        """Waits until metrics.jsonl or the status changes from what they are at this call, or
        `timeout` seconds (as PageRun.wait_changed)."""
        return self._wait(self._metrics_stamp(), self.status, timeout)

    async def _wait(self, before: tuple[int, int] | None, status: RunStatus, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            await asyncio.sleep(min(NATIVE_POLL_S, max(0.0, deadline - time.monotonic())))
            if self._metrics_stamp() != before or self.status != status:
                return

    def info(self) -> RunInfo:
        records = self.records
        checkpoint = self.dir.path / "checkpoint.json"
        step = None
        if checkpoint.is_file():
            try:
                step = int(self.dir.read_json("checkpoint.json")["step"])
            except (OSError, ValueError, KeyError, TypeError):
                step = None
        return RunInfo(
            id=self.id,
            kind="native",
            status=self.status,
            message=self.message,
            steps=self.cfg.steps,
            last_step=self.last_step,
            records=len(records),
            checkpoint_step=step,
            f16_path=self.f16_path,
            adapter=self.adapter,
            page_url=self.page_url,
            config=self.cfg.model_dump(),
            created=self.created,
            final_loss=final_loss(records),
            generates_text=self.cfg.trains_on_text,
            **read_label(self.dir.path).model_dump(),
        )


def downsample(records: list[Record], max_points: int) -> list[Record]:
    """At most max_points (>= 2) of `records`, evenly spaced by position: the first, every k-th, and
    always the last (a chart then ends where the run ended)."""
    n = len(records)
    if n <= max_points:
        return records
    stride = math.ceil((n - 1) / (max_points - 1))
    picked = records[::stride]
    if picked[-1] is not records[-1]:
        picked.append(records[-1])
    return picked


def scan_native(root: Path, known: set[str]) -> tuple[dict[str, NativeRun], dict[str, str]]:
    """Native run directories directly under `root` that are not in `known`: ({id: run}, {name: why
    skipped}). A directory is a native run when its config.json says runtime 'native'; directories
    with symbolic links, or names that are not run ids, are skipped (as browser runs are)."""
    found: dict[str, NativeRun] = {}
    skipped: dict[str, str] = {}
    if not root.is_dir():
        return found, skipped
    for path in sorted(root.iterdir()):
        if (
            path.name in known
            or path.name.startswith(".")
            or not (path / CONFIG).is_file()
            or path.is_symlink()
        ):
            continue
        if (path / "browser.json").exists():
            continue  # a browser run (webmp/serve/runs.py loads it)
        if not RUN_ID_RE.match(path.name):
            skipped[path.name] = "its name is not a run id (letters, digits, '-' and '_', 64 at most)"
            continue
        links = [p.name for p in path.iterdir() if p.is_symlink()]
        if links:
            skipped[path.name] = f"symbolic links are not followed ({', '.join(links)})"
            continue
        try:
            found[path.name] = NativeRun(path)
        except (OSError, ValueError) as e:
            skipped[path.name] = str(e).splitlines()[0] if str(e) else type(e).__name__
    return found, skipped
