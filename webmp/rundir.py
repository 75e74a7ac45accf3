"""A run directory: the files every run writes, native or browser, in one format.

  config.json     the TrainConfig plus runtime facts (precision, f16 path, adapter)
  metrics.jsonl   one JSON object per logged step: step, loss, scale, skipped, lr, grad_norm, ...
  summary.json    final figures (train loss, test accuracy, steps, skipped, memory by category, ...)
  curves.png      loss and loss-scale curves on log axes, skipped steps marked
  checkpoint.safetensors + checkpoint.json   (see webmp/checkpoint.py)
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


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


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def write_json(self, name: str, obj) -> None:
        atomic_write(self.path / name, (json.dumps(obj, indent=2) + "\n").encode())

    def read_json(self, name: str):
        return json.loads((self.path / name).read_text())

    def append_metrics(self, records: list[dict]) -> None:
        if not records:
            return
        with open(self.metrics_path, "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read_metrics(self) -> list[dict]:
        if not self.metrics_path.exists():
            return []
        out = []
        for line in self.metrics_path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
        return out

    def truncate_metrics_after(self, step: int) -> None:
        """Drop records past `step` (a resumed run rewrites them)."""
        keep = [r for r in self.read_metrics() if r["step"] <= step]
        atomic_write(self.metrics_path, "".join(json.dumps(r) + "\n" for r in keep).encode())

    def plot_curves(self, title: str = "") -> Path:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        recs = self.read_metrics()
        out = self.path / "curves.png"
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
        steps = [r["step"] for r in recs]
        a1.plot(steps, [max(r["loss"], 1e-12) for r in recs], lw=1)
        a1.set_yscale("log")
        a1.set_ylabel("training loss")
        a2.plot(steps, [r["scale"] for r in recs], lw=1, color="tab:orange")
        a2.set_yscale("log", base=2)
        a2.set_ylabel("loss scale")
        skipped = [r for r in recs if r.get("skipped")]
        if skipped:
            a2.scatter([r["step"] for r in skipped], [r["scale"] for r in skipped], color="red", s=12,
                       marker="x", label=f"skipped ({len(skipped)})", zorder=3)
            a2.legend(loc="best")
        a2.set_xlabel("step")
        if title:
            a1.set_title(title)
        fig.tight_layout()
        fig.savefig(out, dpi=100)
        plt.close(fig)
        return out
