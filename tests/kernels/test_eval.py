"""The evaluation counters (webmp/ops/eval.py) against numpy on each storage path."""

from __future__ import annotations

import numpy as np
from kernel_cases import NO_LABEL, Cases, rng_for

from webmp import ops
from webmp.engine.runtime import default_gpu
from webmp.testing import reference as ref
from webmp.testing.probe import run_op

# Every kernel run is a registered case, cached per path (kernel_cases.Cases).
CASES = Cases()
kernel_case, run = CASES.case, CASES.run


@kernel_case("eval/70x10")
def _eval_case(name, path):
    rng = rng_for(name, path)
    B, C = 70, 10
    logits = rng.standard_normal((B, C)).astype(np.float32)
    labels = rng.integers(0, C, B).astype(np.uint32)
    labels[[3, 50, 69]] = NO_LABEL
    io = {"logits": logits, "labels": labels}
    runs = {}
    for name, launcher in (
        ("reset", ops.eval_reset),
        ("count", ops.eval_count),
        ("next", ops.eval_next_chunk),
    ):
        inputs = {**io, "result": np.array([100, 200], np.uint32), "chunk": np.array([6], np.uint32)}
        runs[name] = run_op(launcher, inputs, ["result", "chunk"], B=B, C=C, path=path, gpu=default_gpu())
    return io, runs


def test_eval_counters(path):
    """eval_reset zeroes both counters and the chunk counter, eval_next_chunk advances the chunk
    and nothing else, eval_count adds to the totals and leaves the chunk."""
    io, out = run("eval/70x10", path)
    assert out["reset"]["result"].tolist() == [0, 0] and out["reset"]["chunk"].tolist() == [0]
    assert out["next"]["result"].tolist() == [100, 200] and out["next"]["chunk"].tolist() == [7]
    assert out["count"]["chunk"].tolist() == [6]
    correct, counted = ref.eval_count(io["logits"], io["labels"])
    assert counted == 67 and correct > 0
    assert out["count"]["result"].tolist() == [100 + correct, 200 + counted], (
        "counts add to the running totals"
    )


# --- native and emulated f16 agree bit for bit ---------------------------------------------------

test_native_matches_emulated = CASES.native_matches_emulated()
