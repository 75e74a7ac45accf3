"""`webmp bench` at tiny sizes: every JSON field is there with sane values, the bare-replay floor
really replays the step, readbacks are counted, and the matmul check can fail. No timing targets
are asserted (wall times depend on the machine and its neighbours)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from webmp import bench, tune
from webmp.config import TrainConfig
from webmp.models import build_plan
from webmp.plan import pack_h
from webmp.runtime import Runtime
from webmp.state import decode_state
from webmp.tilecache import DEFAULT_TILES, TILE_KEYS, TileTable


@pytest.fixture(scope="module")
def tune_cache(tmp_path_factory):
    """An empty auto-tune cache of our own, so a user's ~/.cache/webmp/tune.json plays no part."""
    mp = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp("tune") / "tune.json"
    mp.setenv("WEBMP_TUNE_CACHE", str(path))
    yield path
    mp.undo()


@pytest.fixture(scope="module")
def result(gpu, tune_cache):
    return bench.run_bench("tiny", profile=True, gpu=gpu, log=lambda *a: None)


def positive(x) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


def test_result_is_json_with_every_section(result):
    back = json.loads(json.dumps(result))
    for key in (
        "format",
        "date",
        "size",
        "adapter",
        "host",
        "tune",
        "matmul",
        "train_step",
        "memory",
        "readbacks",
        "profile",
        "summary",
        "seconds",
    ):
        assert key in back, key
    assert back["adapter"]["name"] and isinstance(back["adapter"]["shader_f16"], bool)


def test_matmul_rows(result, gpu):
    paths = ["native", "emulated", "fp32"] if gpu.has_f16 else ["emulated", "fp32"]
    kinds = {(m["kind"], m["product"]) for m in result["matmul"]}
    assert kinds == {("square", "A.B"), ("train", "A.B"), ("train", "At.B"), ("train", "A.Bt")}
    for m in result["matmul"]:
        for p in paths:
            assert positive(m["gflops"][p]), (m, p)
            assert 0 < m["error_ratio"][p] <= 1, (m, p)  # 0 would mean the check compared nothing
            assert set(m["tiles"][p]) == set(TILE_KEYS)
        assert positive(m["gflops"]["numpy_f32"])


def test_train_step_rows(result):
    rows = result["train_step"]
    want = {(m, p) for m in ("digits", "wide") for p in ("mixed", "fp32")}
    assert {(r["model"], r["precision"]) for r in rows} == want
    for r in rows:
        for key in (
            "wall_ms_per_step",
            "host_cpu_ms_per_step",
            "host_cpu_mean_ms_per_step",
            "floor_host_cpu_ms_per_step",
            "host_over_floor",
        ):
            assert positive(r[key]), (r, key)
        assert r["dispatches_per_step"] > 10 and r["steps_timed"] >= 2
    s = result["summary"]
    assert positive(s["mixed_over_fp32_step_digits"]) and positive(s["mixed_over_fp32_step_wide"])
    assert positive(s["f16_over_f32_matmul"])


def test_memory_from_plan_accounting(result):
    for name, m in result["memory"].items():
        assert m["mixed"]["master_weights"] == m["fp32"]["master_weights"] > 0
        assert m["mixed"]["working_weights"] * 2 == m["fp32"]["working_weights"]
        # f16 activations: half the bytes, except the f32 logits, loss rows and labels
        assert 0.5 <= m["activation_ratio"] <= bench.TARGETS["activation_ratio"], name
    assert result["summary"]["targets"]["activation_ratio"]["met"]


def test_readbacks_in_the_training_loop(result):
    rb = result["readbacks"]
    assert rb["steps"] == 20 and rb["log_every"] == 5
    assert rb["readbacks_per_100_steps"] == 20 == rb["limit_per_100_steps"]
    assert rb["runtime_readbacks_in_loop"] == 4  # Runtime.readbacks agrees with the wrapped calls
    assert rb["readbacks_between_logs"] == 0
    assert rb["reads_after_training"]  # the final state/eval/checkpoint reads are seen too


def test_readback_counting_sees_reads_between_logs(gpu):
    # a checkpoint every 3 steps reads weights between the log intervals of 10
    rb = bench.bench_readbacks(gpu, steps=10, log_every=10, checkpoint_every=3)
    assert rb["readbacks_between_logs"] > 0
    assert rb["readbacks_per_100_steps"] > rb["limit_per_100_steps"]


def test_profile_sorted_and_complete(result, gpu):
    if "timestamp-query" not in gpu.device.features:
        assert all(p is None for p in result["profile"].values())
        return
    for key, p in result["profile"].items():
        us = [k["us_per_step"] for k in p["kernels"]]
        assert us == sorted(us, reverse=True), key
        assert (
            p["gpu_us_per_step"] > 0 and abs(sum(us) - p["gpu_us_per_step"]) < 0.01 * p["gpu_us_per_step"] + 1
        )
        assert {"matmul_fwd", "matmul_wgrad", "matmul_dgrad", "adamw_copy"} <= set(p["families"])


def test_table_prints_every_section(result):
    text = bench.format_table(result)
    for needle in (
        "matmul GFLOP/s",
        "training step",
        "memory",
        "readbacks:",
        "profile digits/mixed",
        "targets",
    ):
        assert needle in text


def test_bare_replay_runs_the_real_step(gpu, digits):
    """The floor replays the same dispatches: the GPU-side step counter advances by one per replay."""
    plan, blob = build_plan(TrainConfig(hidden=[16], batch_size=8), digits, "fp32")
    rt = Runtime(plan, blob, gpu)
    bench.bare_replay(rt.device, bench.bare_dispatches(rt), 3)
    assert decode_state(rt.read("state"))["iteration"] == 3
    bench.StepLoop(rt, log_every=2)()
    assert decode_state(rt.read("state"))["iteration"] == 4


def test_matmul_check_detects_wrong_operands(gpu):
    case = tune.MatmulCase(gpu, "fp32", 9, 7, 13, "matmul_fwd")
    assert case.check() <= 1
    case.rt.write("B", pack_h(case.b[::-1], "fp32"))  # the kernel now multiplies other rows
    assert case.check() > 1


def test_tune_caches_per_adapter_and_class(gpu, tune_cache):
    shape = ("fp32", 24, 20, 16, 1, 0)
    report = tune.tune_shapes(gpu, [shape], budget_s=0.5, log=lambda *a: None)
    cls = tune.shape_class(*shape)
    assert list(report) == [cls] and report[cls]["tried"] >= 1
    cached = json.loads(tune_cache.read_text())[gpu.name][cls]
    assert TileTable.for_adapter(None).for_shape(*shape) == DEFAULT_TILES
    assert TileTable.for_adapter("another adapter").for_shape(*shape) == DEFAULT_TILES
    table = TileTable.for_adapter(gpu.name)
    assert table.for_shape(*shape) == cached
    # same class (sizes round up to the same power of 4), same choice
    assert table.for_shape("fp32", 30, 17, 10, 1, 0) == cached


def test_plan_shapes_lists_each_matmul(digits):
    plan, _ = build_plan(TrainConfig(), digits, "emulated")
    shapes = tune.plan_shapes(plan)
    assert ("emulated", 64, 256, 64, 0, 0) in shapes  # first layer forward: batch x out x in
    assert ("emulated", 64, 256, 64, 1, 0) in shapes  # its weight gradient: in x out x batch
    assert all(s[0] == "emulated" for s in shapes) and len(set(shapes)) == len(shapes)


def test_synthetic_dataset_shape():
    d = bench.synthetic_dataset(12, 20, classes=3)
    assert d.train_x.shape == (20, 12) and d.test_x.shape == (10, 12)
    assert d.train_y.max() < 3 and np.isfinite(d.train_x).all()
