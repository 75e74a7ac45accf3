"""A first step's kernels compiled on several devices at once where the driver compiles a kernel at
its first dispatch (webmp.engine.precompile): which adapters get helpers, that the compiling lands
in the driver's cache before the first step, and that it changes no bit of what the step computes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from webmp.config import TrainConfig
from webmp.data.text import load_training_data
from webmp.engine.adapters import AdapterInfo
from webmp.engine.precompile import helpers_for, precompile
from webmp.engine.runtime import GPU, Runtime, default_gpu, make_pipeline
from webmp.models import build_plan

LAVAPIPE = AdapterInfo(device="llvmpipe (LLVM 15.0.6, 256 bits)", adapter_type="CPU")
BROWSER_CPU = AdapterInfo(vendor="google", architecture="swiftshader")
A_GPU = AdapterInfo(vendor="nvidia", device="NVIDIA H200", adapter_type="DiscreteGPU")


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("WEBMP_COMPILE_HELPERS", raising=False)
    monkeypatch.delenv("MESA_SHADER_CACHE_DISABLE", raising=False)
    return monkeypatch


def test_helpers_only_where_the_driver_compiles_at_first_dispatch(clean_env):
    assert helpers_for(LAVAPIPE, ["shader-f16"], cores=2)[0] == 1
    assert helpers_for(LAVAPIPE, [], cores=16)[0] == 3  # at most MAX_HELPERS
    assert helpers_for(LAVAPIPE, [], cores=1) == (0, "one CPU core")
    assert helpers_for(LAVAPIPE, [], cores=None)[0] == 3  # a page's: it takes one fewer than its cores
    # a GPU's driver and SwiftShader compile at pipeline creation: a helper would compile twice
    assert helpers_for(A_GPU, ["shader-f16"], cores=16)[0] == 0
    assert helpers_for(BROWSER_CPU, ["subgroups"], cores=16)[0] == 0
    # a browser's "SwiftShader" with shader-f16 is lavapipe behind the harness's spoofing layer
    n, why = helpers_for(BROWSER_CPU, ["shader-f16", "subgroups"], cores=4)
    assert n == 3 and "lavapipe" in why
    clean_env.setenv("MESA_SHADER_CACHE_DISABLE", "true")  # nothing would hand the helpers' work over
    assert helpers_for(LAVAPIPE, [], cores=8)[0] == 0
    clean_env.setenv("WEBMP_COMPILE_HELPERS", "2")
    assert helpers_for(A_GPU, [], cores=8) == (2, "WEBMP_COMPILE_HELPERS")
    clean_env.setenv("WEBMP_COMPILE_HELPERS", "many")
    with pytest.raises(ValueError, match="WEBMP_COMPILE_HELPERS='many'"):
        helpers_for(LAVAPIPE, [], cores=8)
    clean_env.setenv("WEBMP_COMPILE_HELPERS", "-1")
    with pytest.raises(ValueError, match="0 or more"):
        helpers_for(LAVAPIPE, [], cores=8)


def mlp_plan():
    cfg = TrainConfig(model="mlp", steps=3, batch_size=32, hidden=[48])
    return build_plan(cfg, load_training_data(cfg), "native" if default_gpu().has_f16 else "emulated")


def test_precompiled_steps_compute_the_same_bits():
    plan, blob = mlp_plan()
    gpu = default_gpu()
    plain = Runtime(plan, blob, gpu, first=["train_step"])
    helped = Runtime(plan, blob, gpu, first=["train_step"], compile_helpers=1)
    report = helped.precompiled
    names = {d["kernel"] for d in plan["programs"]["train_step"]}
    assert plain.precompiled is None
    assert report["kernels"] == len(names) and report["helpers"] == 1 and report["helper_errors"] == []
    assert 0 <= report["by_helpers"] <= len(names)
    assert set(helped.pipelines) == names  # the step's, no more
    for rt in (plain, helped):
        for _ in range(3):
            rt.run("train_step")
    for b in plan["checkpoint_buffers"]:
        assert helped.read(b) == plain.read(b), b
    assert helped.read("state") == plain.read("state")


def test_a_failing_helper_costs_only_time():
    plan, blob = mlp_plan()
    rt = Runtime(plan, blob, default_gpu(), first=["train_step"])
    names = [d["kernel"] for d in plan["programs"]["train_step"]]

    def no_device():
        raise RuntimeError("no second device here")

    report = precompile(
        rt.device, lambda n: (rt.pipelines[n], rt.layouts[n]), rt.kernels, names, [no_device], make_pipeline
    )
    assert report["by_helpers"] == 0 and report["kernels"] == len(set(names))
    assert report["helper_errors"] == ["RuntimeError: no second device here"]
    rt.run("train_step")  # and the step runs


_COLD = """
import json, os, sys
from pathlib import Path
from webmp.config import TrainConfig
from webmp.data.text import load_training_data
from webmp.engine.runtime import Runtime, default_gpu
from webmp.models import build_plan
cfg = TrainConfig(model="mlp", steps=3, batch_size=32, hidden=[40])
gpu = default_gpu()
plan, blob = build_plan(cfg, load_training_data(cfg), "native" if gpu.has_f16 else "emulated")
rt = Runtime(plan, blob, gpu, first=["train_step"], compile_helpers=1)
cached = sum(f.stat().st_size for f in Path(sys.argv[1]).rglob("*") if f.is_file())
print(json.dumps({"report": rt.precompiled, "cached_before_the_first_step": cached, "adapter": gpu.name}))
"""


@pytest.mark.slow  # a new process compiling an MLP's kernels with an empty cache (~3 s)
def test_the_kernels_are_compiled_before_the_first_step(tmp_path):
    """With an empty Mesa cache, creating the runtime with a helper compiles the step's kernels:
    the cache holds them before anything ran, some compiled by the helper device."""
    if "llvmpipe" not in default_gpu().name:
        pytest.skip("the driver's cache is Mesa's: lavapipe")
    env = dict(os.environ, MESA_SHADER_CACHE_DIR=str(tmp_path), PYTHONPATH=str(Path(__file__).parents[2]))
    env.pop("MESA_SHADER_CACHE_DISABLE", None)
    out = subprocess.run(
        [sys.executable, "-c", _COLD, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["report"]["helper_errors"] == []
    assert got["report"]["by_helpers"] >= 1, got
    assert got["cached_before_the_first_step"] > 10_000, got


def test_helper_devices_share_the_runs_adapter():
    gpu = default_gpu()
    helper = GPU(adapter=gpu.adapter)
    assert helper.device is not gpu.device and helper.features == gpu.features
