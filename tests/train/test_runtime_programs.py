"""The wgpu-py runtime makes a program's pipelines at its first use when given `first` (as `webmp
train` does: the evaluation's kernels need not delay the first step), with the same results as
one that makes them all up front."""

from __future__ import annotations

import pytest

from webmp.config import TrainConfig
from webmp.data.text import load_training_data
from webmp.engine.runtime import Runtime, default_gpu
from webmp.models import build_plan


def kernels_of(plan, *programs):
    return {d["kernel"] for p in programs for d in plan["programs"][p]}


def test_first_programs_only_then_on_first_use():
    cfg = TrainConfig(model="mlp", steps=3, batch_size=32)
    plan, blob = build_plan(cfg, load_training_data(cfg), "native")
    gpu = default_gpu()
    eager = Runtime(plan, blob, gpu)
    lazy = Runtime(plan, blob, gpu, first=["train_step"])
    assert set(eager.pipelines) == {k["name"] for k in plan["kernels"]}
    assert set(lazy.pipelines) == kernels_of(plan, "train_step") and set(lazy.programs) == {"train_step"}
    assert kernels_of(plan, "eval") - kernels_of(plan, "train_step"), (
        "the eval program has kernels of its own"
    )
    for rt in (eager, lazy):
        for _ in range(3):
            rt.run("train_step")
        rt.run("eval")
    assert set(lazy.pipelines) == kernels_of(plan, "train_step", "eval")
    result = plan["eval"]["result_buffer"]
    assert lazy.read(result) == eager.read(result) and lazy.read("state") == eager.read("state")
    with pytest.raises(KeyError):
        lazy.run("no_such_program")
