"""The runs of the server's runs directory: the browser runs (webmp/serve/runs.py), reloaded from disk
when the server starts, and the native runs `webmp train --out ROOT/NAME` wrote there
(webmp/serve/native_runs.py), looked for again whenever the runs are listed or an unknown id is
asked for. A run is labelled (its name and note, label.json in its directory) and deleted here:
a deleted run's directory moves to ROOT/.deleted/ (nothing is erased; move it back to restore it).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..config import TrainConfig
from ..train.rundir import CONFIG, RunDir, atomic_write, new_run_dir
from .budget import PlanCache, check_plan_size
from .errors import InvalidConfig, RunStateConflict, UnknownRun
from .form import check_browser_config
from .messages import LABEL_FILE, RUN_ID_RE, Label, RunInfo
from .native_runs import NativeRun, scan_native
from .page_data import PageData, check_network_data
from .runs import STATE_FILE, PageRun

DELETED = ".deleted"  # where delete moves run directories (not a run: the scans skip dot names)


class RunStore:
    """The page runs under one root directory and the native runs there."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.runs: dict[str, PageRun] = {}
        self.native: dict[str, NativeRun] = {}
        self.skipped: set[str] = set()  # native run directories reported as unreadable once
        self.plans = PlanCache()  # shared by the runs: at most MAX_CACHED_PLANS held in all
        self.data = PageData(self.root)  # the built-in data and the pages' uploads
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
            run = PageRun(path, cfg, state, sha256, self.plans, self.data)
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
        data = self.data.load(cfg)  # checks the config before the run directory exists
        check_network_data(cfg, data)
        check_plan_size(cfg, data)
        path = new_run_dir(self.root, prefix="browser")
        run = PageRun(path, cfg, data_sha256=data.sha256, cache=self.plans, data=self.data)
        run.save()
        self.runs[run.id] = run
        return run

    def label(self, run_id: str, label: Label) -> RunInfo:
        """Give a run (browser or native) its name and note."""
        run = self.view(run_id)
        atomic_write(run.dir.path / LABEL_FILE, label.model_dump_json().encode())
        return run.info()

    def delete(self, run_id: str) -> Path:
        """Move an ended run's directory to ROOT/.deleted/ (its name, or its name and the time when
        one is there); RunStateConflict while it trains or a page prepares it."""
        run = self.view(run_id)
        if run.status == "running" or (isinstance(run, PageRun) and run.connected):
            raise RunStateConflict(f"run {run_id} is training; stop it before deleting it")
        bin_dir = self.root / DELETED
        bin_dir.mkdir(exist_ok=True)
        to = bin_dir / run_id
        if to.exists():
            to = bin_dir / f"{run_id}-{time.time_ns()}"
        run.dir.path.rename(to)
        self.runs.pop(run_id, None)
        self.native.pop(run_id, None)
        return to

    def get(self, run_id: str) -> PageRun:
        """A browser run, to train or change; RunStateConflict for a native run (read-only here)."""
        run = self.view(run_id)
        if isinstance(run, NativeRun):
            raise RunStateConflict(f"run {run_id}: {run.resume_note}")
        return run
