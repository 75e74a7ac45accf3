"""Fingerprints of what the engine computes, to compare a change that must not change it (a refactor):
the SHA-256 of the plan JSON and blob of 12 configurations (3 models x native mixed, emulated mixed,
fp32, fp16-noscale), and the curves (every metrics record but wall time, and the summary's results,
SUMMARY) of six MLP runs and a GPT run, trained natively on the default adapter with default tiles
(no tune cache).

    python3 scripts/fingerprint.py OUT.json            # then diff two OUT.json files
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PLAN_CONFIGS = [
    (model, precision, path)
    for model in ("mlp", "mlp-ln", "gpt")
    for precision, path in (
        ("mixed", "native"), ("mixed", "emulated"), ("fp32", "fp32"), ("fp16-noscale", "native")
    )
]  # fmt: skip
SMALL = {"mlp": {}, "mlp-ln": {}, "gpt": {"n_layer": 1, "d_model": 64, "context": 32, "batch_size": 8}}
CURVES = [
    *[(m, p, ["--steps", "40", "--log-every", "10"])
      for m in ("mlp", "mlp-ln") for p in ("mixed", "fp32", "fp16-noscale")],
    ("gpt", "mixed", ["--steps", "12", "--log-every", "4", "--n-layer", "1", "--d-model", "64",
                      "--context", "32", "--batch-size", "8", "--val-tokens", "2048"]),
]  # fmt: skip
VOLATILE = {"time", "wall", "elapsed", "t", "seconds", "steps_per_s", "ms"}
# the summary's results (summary.json; the MLPs' test split, the GPT's validation loss)
SUMMARY = (
    "final_train_loss", "last_loss", "test_accuracy", "test_correct", "val_loss", "val_bits_per_char",
    "skipped_steps", "final_scale",
)  # fmt: skip


def _imports():
    from webmp.config import TrainConfig
    from webmp.data.text import load_training_data
    from webmp.engine.tiles import TileTable
    from webmp.models import build_plan

    return TrainConfig, TileTable, build_plan, load_training_data


def plans() -> dict[str, dict[str, str]]:
    TrainConfig, TileTable, build_plan, load_training_data = _imports()
    out = {}
    for model, precision, path in PLAN_CONFIGS:
        cfg = TrainConfig(model=model, precision=precision, **SMALL[model])
        plan, blob = build_plan(cfg, load_training_data(cfg), path, TileTable())
        text = json.dumps(plan, sort_keys=True)
        out[f"{model}/{precision}/{path}"] = {
            "plan": hashlib.sha256(text.encode()).hexdigest(),
            "blob": hashlib.sha256(blob).hexdigest(),
        }
    return out


def curves() -> dict[str, str]:
    out = {}
    for model, precision, args in CURVES:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "WEBMP_TUNE_CACHE": str(Path(tmp) / "no-tune-cache.json")}
            run = Path(tmp) / "run"
            cmd = [sys.executable, "-m", "webmp", "train", "--model", model, "--precision", precision,
                   "--out", str(run), "--quiet", *args]  # fmt: skip
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
            records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            kept = [{k: v for k, v in r.items() if k not in VOLATILE} for r in records]
            summary = json.loads((run / "summary.json").read_text())
            final = {k: summary[k] for k in SUMMARY}
            text = json.dumps([kept, final], sort_keys=True)
            out[f"{model}/{precision}"] = hashlib.sha256(text.encode()).hexdigest()
    return out


if __name__ == "__main__":
    result = {"plans": plans(), "curves": curves()}
    Path(sys.argv[1]).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, indent=1, sort_keys=True))
