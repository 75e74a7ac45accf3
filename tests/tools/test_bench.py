"""`webmp bench` at tiny sizes: every JSON field is there with sane values (the MLPs' and the GPT's),
the counts are exact (dispatches, submits and readbacks per step, the activation ratio from the
plans), the bare-replay floor really replays the step, readbacks are counted, and the matmul check
can fail. No timing targets are asserted (wall times depend on the machine and its neighbours)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import webmp
from webmp.bench.cli import run_bench
from webmp.bench.levers import (
    LEVERS,
    RANK_LEVERS,
    RANKS,
    lever_configs,
    lever_line,
    lever_row,
    rank_configs,
    versus_baseline,
)
from webmp.bench.machine import cpu_info
from webmp.bench.markdown import render
from webmp.bench.memory import REDUCED, STEP_PRECISIONS, memory_entry
from webmp.bench.readbacks import bench_readbacks
from webmp.bench.report import TARGETS, format_table, readback_verdict
from webmp.bench.step import (
    StepLoop,
    bare_dispatches,
    bare_replay,
    cache_warm,
    model_data,
    model_settings,
    model_shape,
    step_plan,
    synthetic_dataset,
)
from webmp.config import TrainConfig
from webmp.engine.plan import pack_h
from webmp.engine.runtime import Runtime
from webmp.engine.state import decode_state
from webmp.engine.tiles import (
    ATTENTION_KEY,
    ROWS_KEY,
    SMALL_TILES,
    WEIGHT_FORMS,
    WEIGHTS_KEY,
    TileTable,
    attention_class,
    default_tiles,
)
from webmp.models import build_plan
from webmp.ops import MATMUL_CORES, ROW_FORMS, core_constants
from webmp.presets import SIZES
from webmp.testing.reference.kernels import round_h
from webmp.tune import native as tune
from webmp.tune.form_cases import FormSpec, faster_form, same_outputs


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
    return run_bench("tiny", profile=True, gpu=gpu, log=lambda *a: None)


TINY = SIZES["tiny"]
MODELS = [m["name"] for m in TINY["step_models"]]


@pytest.fixture(scope="module")
def plans(gpu, tune_cache):
    """{(model, precision): plan} as the tiny bench built them (rebuilt: building compiles nothing)."""
    out = {}
    for m in TINY["step_models"]:
        data = model_data(m, TINY)
        log_every = model_settings(TINY, m)["log_every"]
        for precision in STEP_PRECISIONS:
            out[m["name"], precision] = step_plan(gpu, m, data, precision, log_every)[0]
    return out


def positive(x) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_result_is_json_with_every_section(result):
    back = json.loads(json.dumps(result))
    for key in (
        "format",
        "date",
        "size",
        "adapter",
        "host",
        "webmp",
        "tune",
        "matmul",
        "model_matmuls",
        "train_step",
        "first_step",
        "data",
        "memory",
        "readbacks",
        "sampling",
        "attention_memory",
        "levers",
        "profile",
        "summary",
        "seconds",
    ):
        assert key in back, key
    assert back["adapter"]["name"] and isinstance(back["adapter"]["shader_f16"], bool)
    # what docs/benchmarks.md names beside each table: the machine, the adapter's driver, webmp
    assert back["host"]["cpus"] >= 1 and "cpu_model" in back["host"] and "driver" in back["adapter"]
    assert back["webmp"]["version"] == webmp.__version__


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_matmul_rows(result, gpu):
    paths = ["native", "emulated", "bf16", "fp32"] if gpu.has_f16 else ["emulated", "bf16", "fp32"]
    assert list(result["matmul"][0]["error_ratio"]) == paths
    kinds = {(m["kind"], m["product"]) for m in result["matmul"]}
    assert kinds == {("square", "A.B"), ("train", "A.B"), ("train", "At.B"), ("train", "A.Bt")}
    for m in result["matmul"]:
        for p in paths:
            assert positive(m["gflops"][p]), (m, p)
            assert 0 < m["error_ratio"][p] <= 1, (m, p)  # 0 would mean the check compared nothing
            core, shape = core_constants(m["tiles"][p])  # a known core with its constants, nothing else
            optional = {"core", "RUNTIME_DIMS", "B_PAIRS"}  # B_PAIRS: a shipped table's choice
            assert set(m["tiles"][p]) - optional == set(shape) and core in MATMUL_CORES
            if m is result["matmul"][0]:  # the tiny size times the cores at the first shape only
                want_cores = {"tiled", "reg"} | ({"reg_sg"} if gpu.has_subgroups else set())
                assert set(m["cores"][p]) == want_cores
                assert all(positive(g) for g in m["cores"][p].values())
            else:
                assert m["cores"] == {}
        assert positive(m["gflops"]["numpy_f32"])


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_model_matmul_shapes(result, plans, gpu):
    """Every distinct matmul shape of the GPT's mixed plan, timed with the plan's tiles, and the
    median per path."""
    from webmp.tune.native import plan_shapes

    paths = ["native"] if gpu.has_f16 else ["emulated"]  # the tiny size times the first path only
    assert list(result["model_matmuls"]) == ["gpt"]
    for name in ["gpt"]:
        mm = result["model_matmuls"][name]
        # each product timed with the batch the plan dispatches it with (attention: its batch-heads)
        shapes = {s[1:] for s in plan_shapes(plans[(name, "mixed")])}
        keys = ("M", "N", "K", "trans_a", "trans_b", "batch")
        assert {tuple(r[k] for k in keys) for r in mm["shapes"]} == shapes
        assert any(r["batch"] > 1 for r in mm["shapes"])
        for p in paths:
            gf = [r["gflops"][p] for r in mm["shapes"]]
            assert all(positive(g) for g in gf)
            assert mm["median_gflops"][p] == pytest.approx(float(np.median(gf)))


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_train_step_rows(result, plans):
    rows = result["train_step"]
    assert MODELS == ["digits", "wide", "gpt", "cnn"]
    assert STEP_PRECISIONS == ("mixed", "bf16", "fp8", "fp32")
    want = {(m, p) for m in MODELS for p in STEP_PRECISIONS}
    assert {(r["model"], r["precision"]) for r in rows} == want
    for r in rows:
        for key in (
            "wall_ms_per_step",
            "examples_per_s",
            "host_cpu_ms_per_step",
            "host_cpu_mean_ms_per_step",
            "floor_host_cpu_ms_per_step",
            "host_over_floor",
        ):
            assert positive(r[key]), (r, key)
        plan = plans[r["model"], r["precision"]]
        assert r["dispatches_per_step"] == len(plan["programs"]["train_step"]) > 10
        assert r["submits_per_step"] == 1
        assert r["steps_timed"] >= 2 and r["host_steps_timed"] >= TINY["host_pairs"]
        assert 0 < r["host_pairs_in_median"] <= r["host_steps_timed"]
        assert r["shape"] == model_shape(plan)
        assert r["f16_path"] == {"mixed": plan["f16_path"], "fp8": "bf16"}.get(r["precision"], r["precision"])
        if r["model"] == "gpt":
            cfg = plan["config"]
            assert r["tokens_per_step"] == cfg["batch_size"] * cfg["context"] == 4 * 8
            assert r["tokens_per_s"] == pytest.approx(r["examples_per_s"] * cfg["context"])
        else:
            assert r["tokens_per_step"] is None and r["tokens_per_s"] is None
    s = result["summary"]
    for m in MODELS:
        for p in REDUCED:
            assert positive(s[f"{p}_over_fp32_step_{m}"])
    assert positive(s["f16_over_f32_matmul"])
    assert s["targets"]["submits_per_step"] == {
        "value": 1.0,
        "target": "== 1",
        "met": True,
        "worst": s["targets"]["submits_per_step"]["worst"],
    }


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_first_step_rows(result, plans):
    firsts = result["first_step"]
    assert [(f["model"], f["precision"]) for f in firsts] == [
        (r["model"], r["precision"]) for r in result["train_step"]
    ]
    for f in firsts:
        assert f["kernels"] == len(plans[f["model"], f["precision"]]["kernels"])
        for key in ("plan_s", "runtime_s", "first_step_s", "total_s", "data_s"):
            assert f[key] >= 0 and math.isfinite(f[key]), (f, key)
        assert f["total_s"] == pytest.approx(f["plan_s"] + f["runtime_s"] + f["first_step_s"])
        assert f["mesa_cache_warm"] in (True, False, None) and isinstance(f["mesa_cache_bytes_added"], int)
        assert f["bytes_written"] is None or f["bytes_written"] >= 0


def test_cache_warm_from_this_process_writes():
    llvmpipe = "llvmpipe (LLVM 15.0.6, 256 bits) (Mesa 25.0.7)"
    # a few bytes per kernel: access times refreshed, every shader found; kilobytes: one compiled
    assert cache_warm(llvmpipe, 140, 2044, 0, "/c") is True
    assert cache_warm(llvmpipe, 140, 2044 + 6000, 6000, "/c") is False
    assert cache_warm(llvmpipe, 140, 2044, 68363, "/c") is True  # another process wrote to it
    assert cache_warm(llvmpipe, 140, None, 0, "/c") is True  # no /proc: the cache's size
    assert cache_warm(llvmpipe, 140, None, 10, "/c") is False
    assert cache_warm(llvmpipe, 140, 0, 0, None) is None  # MESA_SHADER_CACHE_DISABLE
    assert cache_warm("NVIDIA H200 (Vulkan)", 140, 0, 0, "/c") is None


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_memory_from_plan_accounting(result, plans):
    assert list(result["memory"]) == MODELS
    for name, m in result["memory"].items():
        assert set(m["activation_ratios"]) == set(m["total_ratios"]) == {"mixed", "bf16", "fp8"}
        for p in REDUCED:  # f32 masters, 16-bit working weights (f16 or bf16; fp8's in bf16)
            assert m[p]["master_weights"] == m["fp32"]["master_weights"] > 0
            assert m[p]["working_weights"] * 2 == m["fp32"]["working_weights"]
        # f16 activations: half the bytes, except the f32 logits, loss rows and labels
        assert 0.5 <= m["activation_ratio"] <= TARGETS["activation_ratio"], name
        # the reported ratio is the plans' buffer list summed, and what halving every h buffer gives
        acts = {
            p: [b for b in plans[name, p]["buffers"] if b["category"] == "activations"]
            for p in ("mixed", "fp32")
        }
        mixed, fp32 = (sum(b["bytes"] for b in acts[p]) for p in ("mixed", "fp32"))
        assert m["activation_ratio"] == mixed / fp32
        wide = {b["name"]: b["bytes"] for b in acts["fp32"] if b["dtype"] != "h"}
        assert (
            m["activations_not_h"]
            == wide
            == {b["name"]: b["bytes"] for b in acts["mixed"] if b["dtype"] != "h"}
        )
        h32 = sum(b["bytes"] for b in acts["fp32"] if b["dtype"] == "h")
        assert mixed == h32 // 2 + sum(wide.values())
        assert m["expected_activation_ratio"] == pytest.approx(m["activation_ratio"], rel=1e-12)
        # bf16: the same buffers 16-bit (two bf16 a word, as f16 pairs), so the same bytes as mixed
        bf16 = [b for b in plans[name, "bf16"]["buffers"] if b["category"] == "activations"]
        assert [(b["name"], b["dtype"]) for b in bf16] == [(b["name"], b["dtype"]) for b in acts["mixed"]]
        assert m["activation_ratios"]["bf16"] == sum(b["bytes"] for b in bf16) / fp32
        assert m["activation_ratios"]["bf16"] == pytest.approx(m["expected_activation_ratio"], rel=1e-12)
        assert m["activation_ratios"]["mixed"] == m["activation_ratio"]
        assert m["total_ratios"]["bf16"] == sum(m["bf16"].values()) / sum(m["fp32"].values()) < 1
    t = result["summary"]["targets"]["activation_ratio"]
    worst = max(
        (r, f"{n} {p}")
        for n, m in result["memory"].items()
        for p, r in m["activation_ratios"].items()
        if p in ("mixed", "bf16")
    )
    assert (t["value"], t["worst"]) == worst and t["met"]
    # fp8 is judged apart (<= 0.30): its casts' scratch sits on bf16 storage, so it is not met
    t8 = result["summary"]["targets"]["fp8_activation_ratio"]
    assert t8["value"] == max(m["activation_ratios"]["fp8"] for m in result["memory"].values())


def test_memory_entry_takes_any_number_of_formats():
    """A format more (fp8, one day) is one more key: its ratios come out beside the others', the
    expected ratio and the 32-bit activations come from the fp32 plan."""

    def plan(acts_h: int, weights: int) -> dict:
        buffers = [
            {"name": "x", "category": "activations", "dtype": "h", "bytes": acts_h},
            {"name": "logits", "category": "activations", "dtype": "f32", "bytes": 100},
        ]
        return {"buffers": buffers, "memory": {"activations": acts_h + 100, "working_weights": weights}}

    e = memory_entry({"mixed": plan(200, 50), "fp8": plan(100, 25), "fp32": plan(400, 100)})
    assert e["activation_ratios"] == {"mixed": 300 / 500, "fp8": 200 / 500}
    assert e["total_ratios"] == {"mixed": 350 / 600, "fp8": 225 / 600}
    assert e["activation_ratio"] == 300 / 500 and e["expected_activation_ratio"] == 300 / 500
    assert e["activations_not_h"] == {"logits": 100} and e["fp8"] == {
        "activations": 200,
        "working_weights": 25,
    }


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_attention_memory_rows(result, gpu):
    """The gpt's attention rows, fused and three-kernel at contexts 64, 256, 1024 (dry runs): the fused
    plan's activations are smaller at every context (no S, P, dS), the three-kernel form's S is its
    largest buffer at 1024 (4 B H T^2 bytes), and the tiny size times no step."""
    from webmp.bench.memory import ATTENTION_CONTEXTS

    rows = {(r["context"], r["attention"]): r for r in result["attention_memory"]}
    assert sorted(rows) == sorted((T, f) for T in ATTENTION_CONTEXTS for f in ("fused", "unfused"))
    cfg = next(m for m in TINY["step_models"] if m["name"] == "gpt")["config"]
    for T in ATTENTION_CONTEXTS:
        fused, unfused = rows[T, "fused"]["memory"], rows[T, "unfused"]["memory"]
        assert fused["activations"] < unfused["activations"]
        # the parameters' and data's bytes are the same (other: the products' small args buffers)
        same = ("master_weights", "working_weights", "optimizer_state", "gradients", "data")
        assert [fused[k] for k in same] == [unfused[k] for k in same]
    assert rows[1024, "unfused"]["largest"] == {
        "name": "S", "bytes": 4 * cfg["batch_size"] * cfg["n_head"] * 1024**2,
    }  # fmt: skip
    assert all(r["ms_per_step"] is None for r in rows.values())
    assert "attention: fused vs three-kernel" in format_table(result)


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_levers_rows_are_the_plans_bytes(result):
    """The levers' section (the tiny size always runs it): a row per context and lever, its bytes by
    category those of plan_buffers for the lever's config (one effective batch for all), each lever
    saving activations against the baseline and all of them together saving the most; the
    accumulating ones keep a second gradient buffer (the f32 sums); the timed contexts timed."""
    from webmp.engine.plan import memory_by_category
    from webmp.models import plan_buffers

    lv, settings = result["levers"], TINY["levers"]
    gpt = next(m for m in TINY["step_models"] if m["name"] == "gpt")
    rows = {(r["context"], r["lever"]): r for r in lv["rows"]}
    names = [name for name, _, _ in LEVERS + RANK_LEVERS]
    assert list(rows) == [(T, name) for T in settings["contexts"] for name in names]
    config = {**gpt["config"], **settings["config"]}
    corpus = model_data(gpt, TINY)
    for (T, name), row in rows.items():
        batch = settings["batch_at"].get(T, settings["batch"])
        configs = lever_configs(config, batch, settings["grad_accum"]) | rank_configs(config, batch)
        cfg = TrainConfig(**{**configs[name][1], "context": T})
        assert cfg.effective_batch == batch == row["batch"]
        world = RANKS if name in dict((n, 0) for n, _, _ in RANK_LEVERS) else 1
        fullest = max(
            (
                memory_by_category(plan_buffers(cfg, corpus, lv["path"], rank=r, world=world))
                for r in range(world)
            ),
            key=lambda m: sum(m.values()),
        )
        assert row["memory"] == fullest and row["ranks"] == world
        assert row["refused"] is None  # the tiny shape fits everywhere
        assert (row["ms_per_step"] is not None) == (T in settings["timed"] and world == 1)
        assert row["ms_per_step"] is None or positive(row["ms_per_step"])
    for T in settings["contexts"]:
        base = rows[T, "baseline"]["memory"]
        acts = {name: rows[T, name]["memory"]["activations"] for name, _, _ in LEVERS}
        assert all(acts[n] < acts["baseline"] for n in acts if n != "baseline"), acts
        assert acts["all"] < min(v for n, v in acts.items() if n != "all")
        assert rows[T, "grad_accum"]["memory"]["gradients"] == 2 * base["gradients"]
        assert rows[T, "fused"]["memory"]["gradients"] == base["gradients"]
        # a rank of 2 holds half the activations; ZeRO-1 about half its optimizer state, nothing else less
        ranks, zero = rows[T, "ranks"]["memory"], rows[T, "zero"]["memory"]
        assert (
            ranks["activations"] < base["activations"] and ranks["optimizer_state"] == base["optimizer_state"]
        )
        assert 0.4 < zero["optimizer_state"] / ranks["optimizer_state"] < 0.75
        assert zero["activations"] == ranks["activations"] and zero["gradients"] == ranks["gradients"]
    assert "memory levers (the gpt's shape" in format_table(result)


def test_lever_configs_share_the_effective_batch():
    configs = lever_configs({"model": "gpt", "attention": "auto"}, 64, 4)
    assert list(configs) == [name for name, _, _ in LEVERS]
    assert configs["baseline"] == ("--attention unfused", {
        "model": "gpt", "attention": "unfused", "recompute": "none", "grad_accum": 1, "batch_size": 64,
    })  # fmt: skip
    flags, cfg = configs["all"]
    assert flags == "--grad-accum 4 --batch-size 16 --recompute blocks --attention fused"
    assert (cfg["grad_accum"], cfg["batch_size"], cfg["recompute"], cfg["attention"]) == (
        4,
        16,
        "blocks",
        "fused",
    )
    assert configs["recompute"][1]["grad_accum"] == 1 and configs["fused"][1]["recompute"] == "none"
    with pytest.raises(ValueError, match="multiple"):
        lever_configs({"model": "gpt"}, 10, 4)


def test_lever_row_refused(gpu):
    """A plan above the adapter's largest binding is refused, naming the buffer; one the kernels
    cannot dispatch is refused with the builder's reason; refused rows have no ratio of step time."""
    from webmp.data.text import tokenize

    corpus = tokenize("abcdefghij " * 200, "test", "test", "")
    fields = {"model": "gpt", "n_layer": 1, "n_head": 2, "d_model": 16, "context": 64, "batch_size": 4,
              "attention": "unfused"}  # fmt: skip
    ok = lever_row(gpu, 64, "baseline", fields, corpus, "emulated", 1 << 30)
    assert ok["refused"] is None and ok["largest"]["name"] == "S"
    S = 4 * 4 * 2 * 64 * 64
    small = lever_row(gpu, 64, "baseline", fields, corpus, "emulated", S - 1)
    assert small["refused"] == f"S takes {S} bytes, the adapter binds {S - 1}"
    assert small["memory"] == ok["memory"] and "refused: S takes" in lever_line(small, [small])
    wide = lever_row(gpu, 64, "baseline", {**fields, "batch_size": 40000}, corpus, "emulated", 1 << 40)
    assert wide["memory"] is None and wide["refused"].startswith("the plan cannot be built: ")
    assert versus_baseline(wide, [ok]) == (None, None)
    # 64 x 1024 = 65,536 rows: the row kernels' 2-D grid builds it (a 1-D grid refused it)
    long = {**fields, "context": 1024, "batch_size": 64, "attention": "fused"}
    assert lever_row(gpu, 1024, "fused", long, corpus, "emulated", 1 << 40)["refused"] is None
    assert versus_baseline(small, [ok]) == (1.0, None)


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_gpt_activations_in_32_bits_are_scores_logits_statistics(result):
    """mixed keeps f32 only for the scores S, the logits, LayerNorm statistics and the loss rows (plus
    u32 token ids and the embedding gradient's row order); everything else is f16. (Tiny shape: one
    layer, so one ln1/ln2 pair.)"""
    wide = result["memory"]["gpt"]["activations_not_h"]
    f32 = {"S", "logits", "ln1_stats0", "ln2_stats0", "lnf_stats", "loss_rows"}
    u32 = {"idx", "targets", "spans", "order"}
    assert set(wide) == f32 | u32
    assert list(wide)[:2] == ["S", "logits"]  # largest first


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
@pytest.mark.parametrize("model", ["digits", "gpt"])
def test_readbacks_in_the_training_loop(result, model):
    rb = result["readbacks"][model]
    assert rb["model"] == ("gpt" if model == "gpt" else "mlp")
    assert rb["steps"] == 20 and rb["log_every"] == 5
    assert rb["readbacks_per_100_steps"] == 20 == rb["limit_per_100_steps"]
    # exactly steps / log_every metric-ring maps in the loop, and nothing else
    assert rb["readbacks_in_loop"] == rb["expected_readbacks"] == 20 // 5
    assert rb["runtime_readbacks_in_loop"] == 4  # Runtime.readbacks agrees with the wrapped calls
    assert rb["readbacks_between_logs"] == 0
    assert rb["reads_after_training"]  # the final state/eval/checkpoint reads are seen too
    assert readback_verdict(rb)
    assert result["summary"]["targets"]["readbacks_per_log_interval"]["met"]


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_sampling_rows(result):
    """Inside the window (T - 1 = 7 tokens) and at the default 200 tokens, with the caches (the window,
    then one position a token while n <= T) and window-only: the same tokens, positive speeds."""
    rows = {row["setting"]: row for row in result["sampling"]}
    inside, default = rows["inside the window"], rows["webmp sample's default"]
    assert inside["tokens"] == inside["context"] - 1 == 7 and default["tokens"] == 200
    assert inside["cached"]["schedule"] == [["sample_step", 1], ["sample_row", 6]]
    assert default["cached"]["schedule"] == [["sample_step", 1], ["sample_row", 7], ["sample_step", 192]]
    for row in rows.values():
        assert row["window"]["schedule"] == [["sample_step", row["tokens"]]] and row["same_tokens"]
        for r in (row["cached"], row["window"]):
            assert r["tokens_per_s"] > 0 and len(r["replay_all_s"]) == 3 and r["setup_s"] > 0


def test_readback_counting_sees_reads_between_logs(gpu):
    # a checkpoint every 3 steps reads weights between the log intervals of 10
    rb = bench_readbacks(gpu, steps=10, log_every=10, checkpoint_every=3)
    assert rb["readbacks_between_logs"] > 0
    assert rb["readbacks_per_100_steps"] > rb["limit_per_100_steps"]


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
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
        # the CNN's input gradients are plain matmuls (its activations are layers of their own)
        grads = {"matmul_plain", "col2im"} if key.startswith("cnn/") else {"matmul_dgrad"}
        assert {"matmul_fwd", "matmul_wgrad", "adamw_copy", *grads} <= set(p["families"]), key


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_table_prints_every_section(result):
    text = format_table(result)
    for needle in (
        "matmul GFLOP/s",
        "training step",
        "memory",
        "readbacks in the training loop",
        "sampling (the gpt's shape",
        "time to the first step",
        "profile digits/mixed",
        "profile digits/bf16",
        "profile gpt/mixed",
        "targets",
    ):
        assert needle in text
    lines = text.splitlines()
    gpt_rows = [line for line in lines if line.startswith("gpt L1 H2 D16 T8 V11 b4 ")]
    assert len(gpt_rows) == len(STEP_PRECISIONS) and all(
        " tok " in line and line.endswith(("pass", "FAIL")) for line in gpt_rows
    )
    assert any(line.startswith("gpt      activations ") and " 16-bit pass" in line for line in lines)
    assert any(line.startswith("  gpt: 4 reads in 20 steps") and line.endswith(": pass") for line in lines)


def test_bare_replay_runs_the_real_step(gpu, digits):
    """The floor replays the same dispatches: the GPU-side step counter advances by one per replay."""
    plan, blob = build_plan(TrainConfig(hidden=[16], batch_size=8), digits, "fp32")
    rt = Runtime(plan, blob, gpu)
    bare_replay(rt.device, bare_dispatches(rt), 3)
    assert decode_state(rt.read("state"))["iteration"] == 3
    StepLoop(rt, log_every=2)()
    assert decode_state(rt.read("state"))["iteration"] == 4


@pytest.mark.parametrize("path", ["fp32", "bf16"])
def test_matmul_check_detects_wrong_operands(gpu, path):
    case = tune.MatmulCase(gpu, path, 9, 7, 13, "matmul_fwd")
    assert case.check() <= 1
    case.rt.write("B", pack_h(case.b[::-1], path))  # the kernel now multiplies other rows
    assert case.check() > 1


def test_matmul_operands_are_exact_in_f16_and_bf16(gpu):
    """The checked matmul's operands are on both grids (one reference serves every path), and a bf16
    result is checked with bf16's ulp: a correct one passes within half of it (round to nearest)."""
    case = tune.MatmulCase(gpu, "bf16", 33, 17, 40, "matmul_fwd")
    for x in (case.a, case.b):
        assert np.array_equal(x, x.astype(np.float16)) and np.array_equal(round_h(x, "bf16"), x)
    # above 0.25: rounded to bf16 (an f16 store errs <= 2^-11, 1/16 of the tolerance); at most half
    # an ulp (round to nearest) plus the f32 sum's error, ~2^-22 |c|: 2^-7 of slack covers it
    assert 0.25 < case.check() <= 0.5 + 2**-7


@pytest.mark.parametrize("variant", ["matmul_wgrad", "matmul_dgrad"])
def test_batched_matmul_case_checks_every_batch(gpu, variant):
    """A batched case (as the bench times attention's products) computes each batch on its own
    copy of the operands; the check judges all of them: one batch's B changed fails it."""
    path = "native" if gpu.has_f16 else "emulated"
    case = tune.MatmulCase(gpu, path, 10, 6, 14, variant, 1, 1, batch=3)
    assert case.flops == 2 * 10 * 6 * 14 * 3
    assert case.check() <= 1 and case.result().shape == (3, 10, 6)
    b = np.tile(case.b, (3, 1))
    b[6:12] = b[6:12][::-1]  # batch 1's B: its rows reversed
    case.rt.write("B", pack_h(b, path))
    assert case.check() > 1


def test_faster_form_keeps_the_default_unless_the_forms_agree():
    """Both tuners' rule (form_cases.faster_form): the faster form only where the forms gave the
    same bits; tune_form logs which."""
    spec = FormSpec(WEIGHTS_KEY, "as_stored", {"as_stored": ["a"], "transposed": ["b"]})
    secs = {"as_stored": 0.02, "transposed": 0.01}
    assert faster_form(spec, True, secs) == {"form": "transposed", "seconds": secs}
    assert faster_form(spec, False, secs) == {"form": "as_stored", "seconds": None}
    assert same_outputs({"x": [b"1", b"2"], "y": [b"1", b"2"]})
    assert not same_outputs({"x": [b"1", b"2"], "y": [b"1", b"3"]})

    class Case:
        def __init__(self, same):
            self.spec, self.same = spec, same

        def identical(self):
            return self.same

        def seconds(self):
            return secs

    said: list[str] = []
    assert tune.tune_form(Case(True), said.append)["form"] == "transposed" and "-> transposed" in said[-1]
    assert tune.tune_form(Case(False), said.append)["form"] == "as_stored" and "differ" in said[-1]


def test_an_unknown_weights_form_in_the_cache_is_named():
    with pytest.raises(ValueError, match=r"'weights': form 'sideways' is not one of"):
        TileTable({WEIGHTS_KEY: {"form": "sideways"}})


def table_classes(gpu) -> dict:
    return TileTable.for_adapter(gpu.name).by_class


def test_tune_caches_per_adapter_and_class(gpu, tune_cache):
    shape = ("fp32", 24, 20, 16, 1, 0)
    report = tune.tune_shapes(gpu, [shape], budget_s=0.5, log=lambda *a: None)
    cls = tune.shape_class(*shape)
    assert list(report) == [cls, ROWS_KEY, WEIGHTS_KEY, ATTENTION_KEY] and report[cls]["tried"] >= 1
    cached = json.loads(tune_cache.read_text())[gpu.name][cls]
    # the row kernels' form: both forms gave the same bits here, the faster is cached
    assert report[ROWS_KEY]["seconds"] is not None and report[ROWS_KEY]["form"] in ROW_FORMS
    assert TileTable.for_adapter(gpu.name).row_kernels == report[ROWS_KEY]["form"]
    assert TileTable.for_adapter("another adapter").row_kernels == "workgroup"
    assert ROWS_KEY not in TileTable.for_adapter(gpu.name).by_class
    # the weights' form: both gave the same bits here (WeightsCase.identical), the faster is cached
    assert report[WEIGHTS_KEY]["seconds"] is not None and report[WEIGHTS_KEY]["form"] in WEIGHT_FORMS
    assert TileTable.for_adapter(gpu.name).weights == report[WEIGHTS_KEY]["form"]
    assert TileTable.for_adapter("another adapter").weights == "as_stored"
    assert WEIGHTS_KEY not in TileTable.for_adapter(gpu.name).by_class
    # the attention's form per attention class (contexts 64 and 256): the faster, timed both ways
    forms = {c: r["form"] for c, r in report[ATTENTION_KEY].items()}
    assert sorted(forms) == [attention_class("fp32", 256, 32), attention_class("fp32", 64, 32)]
    assert all(set(r["seconds"]) == {"fused", "unfused"} for r in report[ATTENTION_KEY].values())
    assert TileTable.for_adapter(gpu.name).attention == forms and ATTENTION_KEY not in table_classes(gpu)
    assert TileTable.for_adapter(None).for_shape(*shape) == default_tiles(24, 20, 16) == SMALL_TILES
    assert TileTable.for_adapter("another adapter").for_shape(*shape) == SMALL_TILES
    table = TileTable.for_adapter(gpu.name)
    assert table.for_shape(*shape) == cached
    # same class (sizes round up to the same power of 4), same choice
    assert table.for_shape("fp32", 30, 17, 10, 1, 0) == cached


def test_plan_shapes_lists_each_matmul(digits):
    plan, _ = build_plan(TrainConfig(), digits, "emulated")
    shapes = tune.plan_shapes(plan)
    assert ("emulated", 64, 256, 64, 0, 0, 1) in shapes  # first layer forward: batch x out x in
    assert ("emulated", 64, 256, 64, 1, 0, 1) in shapes  # its weight gradient: in x out x batch
    assert all(s[0] == "emulated" for s in shapes) and len(set(shapes)) == len(shapes)


def test_synthetic_dataset_shape():
    d = synthetic_dataset(12, 20, classes=3)
    assert d.train_x.shape == (20, 12) and d.test_x.shape == (10, 12)
    assert d.train_y.max() < 3 and np.isfinite(d.train_x).all()


# --- docs/benchmarks.md from the JSON (webmp.bench.markdown) ---------------------------------------

HOST = {"machine": "x86_64", "cpu_model": "AMD EPYC 9B14", "cpu_id": "family 25 model 17"}
HOST |= {"cpu_mhz": 2600, "cpus": 2, "python": "3.11.7", "numpy": "2.4.6", "wgpu": "0.32.0", "torch": None}
ADAPTER = {"name": "llvmpipe (LLVM 15.0.6, 256 bits) (Mesa 25.0.7; Vulkan)", "driver": "Mesa 25.0.7"}
ADAPTER |= {
    "device": "llvmpipe (LLVM 15.0.6, 256 bits)",
    "backend": "Vulkan",
    "type": "CPU",
    "shader_f16": True,
}
WEBMP = {"version": "0.1.0", "commit": "0123456789abcdef", "modified": False}
MACHINE = "AMD EPYC 9B14 (2 CPUs, family 25 model 17, 2600 MHz, x86_64)"
SECTIONS = [
    "## Matmul kernels", "### The GPT's matmul shapes", "## Training step", "## Time to the first step",
    "## Memory by category", "## Memory levers", "## Readbacks in the training loop", "## Sampling",
    "## First run against the tuned step", "## GPU time per kernel",
    "## Cold start",
    "## Data-parallel step", "## Side by side with tinygrad", "## Targets", "## How the figures are taken",
    "## Making this page", "## History",
]  # fmt: skip
PROSE = ("## How the figures are taken", "## Making this page", "## History")


def other_runs() -> tuple[list[dict], dict, list[dict]]:
    """A cold start, a data-parallel run and a tinygrad side-by-side, as their JSON looks."""
    run = {"date": "2026-12-02T04:40:00+00:00", "host": HOST, "webmp": WEBMP}
    rows = [
        {"where": w, "cache": c, "kernels": 26, "plan_s": 0.01, "runtime_s": 0.6, "first_step_s": s,
         "plan_to_first_step_s": s + 0.6, "adapter": ADAPTER["name"], "browser": "/opt/chrome"}
        for w, c, s in [("native", "cold", 2.3), ("native", "warm", 0.2), ("page", "cold", 3.7),
                        ("page", "warm", 0.1)]
    ]  # fmt: skip
    cold = {"format": "webmp-bench-cold/1", **run, "config": {}, "rows": rows, "page_cold_target": {}}
    parts = {"grads_ms": 32.2, "readback_ms": 1.0, "allreduce_ms": 1.5, "upload_ms": 0.3, "update_ms": 1.2}
    dp = {"ranks": 2, "fused_bytes": 340276, **parts, "step_ms": 36.1, "comm_share": 0.075}
    ranks = {"size": "default", "ranks": 2, **run, "models": {"digits": {**dp, "adapter": ADAPTER["name"]}}}
    first = {"total_s": 1.5, "mesa_cache_warm": True, "bytes_written": 900, "mesa_cache_bytes_added": 0}
    step = {"batch": 16, "wall_ms_per_step": 109.0}
    tinygrad = {"tool": "tinygrad", "tinygrad_version": "0.14.0", "dims": {"batch_size": 16, "n_layer": 2}}
    tinygrad |= {"adapter": {"device": "llvmpipe", "description": "Mesa"}, "steps": 10, "step_s_median": 1.44}
    tinygrad |= {"step_s_block_mean": 1.63, "time_to_first_step_s": 44.4}
    webmp_row = {"tool": "webmp", **run, "adapter": ADAPTER["name"], "step": step, "first_step": first}
    return [cold], ranks, [webmp_row, tinygrad]


def assert_tables_and_machine(text: str, machine: str, sections: list[str]) -> None:
    """Each section there, in order, with a table, and under each of the tables the machine line."""
    at = [text.index(s) for s in sections]
    assert at == sorted(at), "sections out of order"
    for s, start, end in zip(sections, at, at[1:] + [len(text)], strict=True):
        part = text[start:end]
        if s.startswith("## ") and s not in PROSE:
            assert "\n| " in part and machine in part, s


@pytest.mark.slow  # the tiny bench run (module fixture `result`, ~10 s)
def test_markdown_from_the_tiny_bench(result, tmp_path):
    """`python -m webmp.bench.markdown` on the tiny bench's JSON (and the other runs' JSON): every
    area's table, each under the line naming the machine, the adapter's driver and the date."""
    colds, ranks, sbs = other_runs()
    files = {"bench.json": result, "cold.json": colds[0], "ranks.json": ranks}
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    (tmp_path / "sbs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in sbs))
    args = [str(tmp_path / "bench.json"), "--cold-start", str(tmp_path / "cold.json"), "--ranks"]
    args += [str(tmp_path / "ranks.json"), "--side-by-side", str(tmp_path / "sbs.jsonl")]
    args += ["--untuned", str(tmp_path / "bench.json")]  # the tiny bench's own training shapes
    out = subprocess.run(
        [sys.executable, "-m", "webmp.bench.markdown", *args], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    host, adapter = result["host"], result["adapter"]
    ours = f"{host['cpu_model']} ({host['cpus']} CPUs"
    assert_tables_and_machine(text, ours, SECTIONS[:10])
    assert_tables_and_machine(text, ours, ["## Targets"])
    assert f"driver {adapter['driver']}" in text and result["date"] in text
    assert_tables_and_machine(text, MACHINE, SECTIONS[10:13])
    for m in result["matmul"]:
        assert f"| {m['M']} x {m['N']} x {m['K']} |" in text
    assert f"**{result['model_matmuls']['gpt']['median_gflops']['native']:.2f}**" in text
    assert "### The training shapes without tuning" in text and "| **median** |  |" in text
    for s in result["train_step"]:
        assert f"| {s['model']} | {s['shape']} | {s['batch']} | {s['precision']} |" in text
    for name, m in result["memory"].items():
        row = f"| {name} | activations | " + " | ".join(str(m[p]["activations"]) for p in (*REDUCED, "fp32"))
        row += " | " + " | ".join(f"**{m['activation_ratios'][p]:.3f}**" for p in REDUCED) + " |"
        assert row in text, name
    for p in REDUCED:
        assert f"`{p}` / `fp32` wall per step: digits " in text
    lv = result["levers"]
    for row in lv["rows"]:
        total = sum(row["memory"].values()) / 2**20
        assert (
            f"| {row['context']} | {row['batch']} | `{row['lever']}` | " in text
            and f"| {total:.2f} |" in text
        )
    assert f"- `grad_accum`: `{lv['levers']['grad_accum']}`" in text
    assert "effective batch 8 (4 at context 64)" in text and "| one rank of 2 |" in text
    assert "| 0.109 | 1.440 (1.630) | **0.076** |" in text
    assert "Not recorded" not in text
    fr = result["first_run"]  # the GPT's step with an empty cache's tiles beside the cache's
    assert (
        fr["first_run_ms"] > 0 and fr["tuned_ms"] > 0 and fr["ratio"] == fr["first_run_ms"] / fr["tuned_ms"]
    )
    assert f"First run / tuned: **{fr['ratio']:.2f}x**" in text and "tune cache" not in fr["first_run_tiles"]


def test_markdown_says_what_is_missing():
    """A JSON without its sections (and of an older format: no CPU model, no driver) still makes a
    page: each missing area is said where its table would be."""
    r = {"format": "webmp-bench/2", "date": "2026-11-30T15:51:00+00:00", "size": "default",
         "adapter": {"name": ADAPTER["name"], "type": "CPU", "shader_f16": True},
         "host": {"machine": "x86_64", "cpus": 2}}  # fmt: skip
    text = render(r)
    for section in SECTIONS:
        assert section in text
    for what in ("the matmul section", "the training step", "the first steps", "memory", "readbacks",
                 "sampling", "the memory levers", "a profile", "a cold-start run", "a data-parallel run",
                 "a side-by-side run", "the first-run comparison",
                 "a run with an empty tune cache"):  # fmt: skip
        assert f"*Not recorded: {what}" in text, what
    assert "CPU model not recorded (2 CPUs, x86_64)" in text and ADAPTER["name"] in text
    assert "webmp version not recorded" in text
    colds, ranks, sbs = other_runs()
    text = render(r, colds, ranks, sbs)
    assert_tables_and_machine(text, MACHINE, SECTIONS[10:13])
    assert "| native | cold | 26 | - | 0.01 | 0.60 | - | 2.30 | 2.90 |" in text
    assert "webmp 0.1.0 at 0123456789" in text


def test_untuned_targets_come_from_a_run_with_an_empty_tune_cache():
    """Issue 28's untuned bars are the median over the training shapes of a run whose tune cache
    was empty (`--untuned`), judged only for lavapipe at the default size; a tuned run's own
    training shapes never pass for untuned ones."""
    from webmp.bench.markdown import matmul_targets

    def run(tune, gflops):
        tiles = {"native": {"core": "reg_sg", "TM": 16, "TN": 8}}
        rows = [{"kind": "train", "product": "A.B", "M": 64, "N": 256, "K": 256 + i,
                 "gflops": {"native": g, "fp32": g / 2}, "tiles": tiles}
                for i, g in enumerate(gflops)]  # fmt: skip
        rows.append({"kind": "square", "product": "A.B", "M": 8, "N": 8, "K": 8, "gflops": {"native": 1.0}})
        return {"size": "default", "adapter": {"name": ADAPTER["name"]}, "tune": tune, "matmul": rows}

    tuned = run({"report": {}}, [10.0, 20.0, 30.0])
    untuned = run({}, [40.0, 50.0, 44.0, 70.0])  # medians 47 (native), 23.5 (fp32)

    def untuned_rows(targets):
        return [row for row in targets if "without tuning" in row[0]]

    native, fp32 = untuned_rows(matmul_targets(tuned, untuned))
    assert native[1:] == ["47.00", "**met**"] and fp32[1:] == ["23.50", "**NOT met**"]
    assert all("not judged" in row[2] for row in untuned_rows(matmul_targets(tuned)))
    assert all("not judged" in row[2] for row in untuned_rows(matmul_targets(tuned, tuned)))
    elsewhere = {**untuned, "adapter": {"name": "NVIDIA GeForce RTX 4090"}}
    assert all("not judged" in row[2] for row in untuned_rows(matmul_targets(tuned, elsewhere)))
    text = render(tuned, untuned=untuned)
    assert "### The training shapes without tuning" in text
    assert "| **median** |  | **47.00** | **23.50** |" in text


def test_cpu_info_reads_the_first_processor(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(
        "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9B14\n"
        "cpu MHz\t\t: 2599.998\n\nprocessor\t: 1\nmodel name\t: something else\n"
    )
    info = cpu_info(str(path))
    assert info["cpu_model"] == "AMD EPYC 9B14" and info["cpu_id"] == "family 25 model 17"
    assert info["cpu_mhz"] == 2600 and info["cpus"] >= 1
    assert cpu_info(str(tmp_path / "none"))["cpu_id"] is None


def test_cold_rows_say_which_devices_compiled_the_step():
    from webmp.bench.sections import compiled_on

    assert (
        compiled_on({"precompile": {"helpers": 1, "by_helpers": 3, "kernels": 9}})
        == "2 devices (3 of 9 by helpers)"
    )
    assert (
        compiled_on({"precompile": {"helpers": 2, "byHelpers": 5, "kernels": 29}})
        == "3 devices (5 of 29 by helpers)"
    )
    assert compiled_on({"precompile": {"helpers": 0}}) == compiled_on({}) == "-"


def test_the_tuner_times_a_class_at_the_plans_product_with_the_most_work(monkeypatch, gpu, plans):
    """`webmp bench --tune` hands the plans' shapes first, the most work first, so that each class
    holding a model's product is timed at that product (tune.classes_of takes a class's first
    shape), not at a bench shape of the same class."""
    from webmp.bench import cli
    from webmp.bench.matmul import matmul_shapes
    from webmp.engine.tiles import shape_class
    from webmp.tune import native as tune

    given = {}
    monkeypatch.setattr(tune, "tune_shapes", lambda gpu, shapes, budget_s, log: given.setdefault("s", shapes))
    preset = cli.SIZES["tiny"]
    cli._tune(gpu, preset, ["fp32"], {k: (p, b"", 0.0) for k, p in plans.items()}, 1.0, log=lambda *a: None)
    own = {s for plan in plans.values() for s in tune.plan_shapes(plan)}
    chosen = dict(tune.classes_of(given["s"]))
    for s in own:
        rep = chosen[shape_class(*s[:6])]
        assert rep in own and tune.shape_work(rep) >= tune.shape_work(s)
    # the bench's own shapes are still tuned (after the plans')
    bench = [("fp32", M, N, K) for _, _, (M, N, K) in matmul_shapes(preset)]
    assert all(b in {s[:4] for s in given["s"][len(own) :]} for b in bench)
