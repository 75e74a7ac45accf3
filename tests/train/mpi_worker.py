"""One rank of tests/train/test_mpi.py's runs, launched as `mpirun -n N python tests/train/mpi_worker.py JOB`.

JOB is a JSON file: {"config": TrainConfig fields, "out": run directory, "resume": null or a run,
"stop_after": null or a step, "inject": {step: "inf", "flag" or "raise"} (rank 1 only), "report": a
directory}. The rank trains through the Python API (webmp.train.loop.Trainer) and writes
REPORT/rank{r}.json: its records, final state words, and the SHA-256 of its masters, moments and
state (what must be bit-identical across ranks); then REPORT/rank{r}.pid is written at start, for
the test that kills a rank.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

from webmp.config import TrainConfig
from webmp.train.distributed import detect_world
from webmp.train.loop import Trainer


def main(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    world = detect_world()
    report = Path(job["report"])
    report.mkdir(parents=True, exist_ok=True)
    (report / f"rank{world.rank}.pid").write_text(str(os.getpid()))
    inject = {int(k): v for k, v in job.get("inject", {}).items()} if world.rank == 1 else {}

    def before_allreduce(step: int, fused: np.ndarray) -> None:
        what = inject.get(step)
        if what == "inf":  # an Inf in this rank's first gradient
            fused[trainer.plan["data_parallel"]["gradients"][0]["offset"]] = np.inf
        elif what == "flag":  # an activation overflow on this rank only (FLAG_H_STORE)
            fused[trainer.plan["data_parallel"]["flags"]["offset"]] = 1.0
        elif what == "raise":  # this rank fails with an exception while the others wait in the sum
            raise RuntimeError(f"injected failure at step {step}")

    trainer = Trainer(
        TrainConfig(**job["config"]),
        out=job["out"],
        resume=job.get("resume"),
        progress=False,
        log=None,
        world=world,
        before_allreduce=before_allreduce,
    )
    summary = trainer.run(stop_after=job.get("stop_after"))
    rt, plan = trainer.runtime, trainer.plan
    # a sharded rank (--zero 1) holds the moments and masters of its own parameters only
    held = {b["name"] for b in plan["buffers"]}
    names = [n for p in plan["params"] for n in (p["master"], p["m"], p["v"]) if n in held] + ["state"]
    names += [n for n in plan["checkpoint_buffers"] if n.startswith("fp8_")]  # fp8's scales and histories
    result = {
        "records": trainer.records,
        "state": trainer.read_state(),
        "sha256": hashlib.sha256(b"".join(rt.read(n) for n in names)).hexdigest(),
        "data_parallel": summary.get("data_parallel"),
    }
    (report / f"rank{world.rank}.json").write_text(json.dumps(result, default=float))


if __name__ == "__main__":
    main(sys.argv[1])
