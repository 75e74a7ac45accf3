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
    inputs = {**io, "result": np.array([5, 9], np.uint32)}
    reset = run_op(ops.eval_reset, inputs, ["result"], B=B, C=C, path=path, gpu=default_gpu())
    inputs = {**io, "result": np.array([100, 200], np.uint32)}
    count = run_op(ops.eval_count, inputs, ["result"], B=B, C=C, path=path, gpu=default_gpu())
    return io, {"reset": reset, "count": count}


def test_eval_counters(path):
    io, out = run("eval/70x10", path)
    assert out["reset"]["result"].tolist() == [0, 0]
    correct, counted = ref.eval_count(io["logits"], io["labels"])
    assert counted == 67 and correct > 0
    assert out["count"]["result"].tolist() == [100 + correct, 200 + counted], (
        "counts add to the running totals"
    )


# --- native and emulated f16 agree bit for bit ---------------------------------------------------

test_native_matches_emulated = CASES.native_matches_emulated()
