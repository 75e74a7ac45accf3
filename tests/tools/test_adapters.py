"""The shipped tile tables per adapter class (webmp.engine.adapters), their precedence under the tune
cache (webmp.engine.tiles.TileTable), and `webmp train`'s first-use tuning (webmp.tune.first_use)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from webmp.cli import main as cli
from webmp.config import TrainConfig
from webmp.data.tables import load_digits
from webmp.engine import adapters
from webmp.engine.adapters import AdapterInfo, adapter_class, shipped_tiles
from webmp.engine.plan import resolve_f16_path
from webmp.engine.tiles import (
    ROWS_KEY,
    SMALL_MACS,
    SMALL_TILES,
    WEIGHTS_KEY,
    TileTable,
    default_tiles,
    plan_classes,
    shape_class,
)
from webmp.engine.tune_cache import load_cache, update_cache
from webmp.models import build_plan
from webmp.ops.matmuls import core_constants
from webmp.tune.first_use import FirstUseTuning
from webmp.tune.matmul_cases import CANDIDATES, fits
from webmp.tune.native import MatmulCase

# What wgpu-py 0.32 reports for the adapters named (the lavapipe and SwiftShader ones as this
# machine's wgpu-py printed them; the GPUs' as their drivers name themselves).
LAVAPIPE = {
    "vendor": "llvmpipe", "architecture": "", "device": "llvmpipe (LLVM 15.0.6, 256 bits)",
    "description": "Mesa 25.0.7-2~bpo12+1 (LLVM 15.0.6)", "stackgroup_min_size": 4,
    "stackgroup_max_size": 128, "vendor_id": 65541, "device_id": 0, "adapter_type": "CPU",
    "backend_type": "Vulkan",
}  # fmt: skip
SWIFTSHADER = {
    "vendor": "SwiftShader driver", "architecture": "", "device": "SwiftShader Device (Subzero)",
    "description": "", "vendor_id": 6880, "device_id": 49374, "adapter_type": "CPU", "backend_type": "Vulkan",
}  # fmt: skip
NVIDIA = {"vendor": "NVIDIA", "device": "NVIDIA H200", "vendor_id": 0x10DE, "adapter_type": "DiscreteGPU"}
ADRENO = {
    "vendor": "Qualcomm",
    "device": "Adreno (TM) 740",
    "vendor_id": 0x5143,
    "adapter_type": "IntegratedGPU",
}
SMALL = (64, 64, 64)  # a small product (<= SMALL_MACS)
LARGE = (1024, 1024, 1024)


def entry_tiles(entry) -> list[dict]:
    return [entry.small, entry.large, *([entry.narrow] if entry.narrow else []), *entry.by_class.values()]


def info(raw: dict, subgroups: bool = True) -> AdapterInfo:
    return AdapterInfo.from_wgpu(raw, ["shader-f16"] + (["subgroup"] if subgroups else []))


def test_the_class_rule_on_sample_adapters():
    lvp = info(LAVAPIPE)
    assert (lvp.subgroup_min_size, lvp.subgroup_max_size, lvp.subgroups) == (4, 128, True)
    assert adapter_class(lvp) == "lavapipe" and adapter_class(info(SWIFTSHADER)) == "swiftshader"
    assert (
        shipped_tiles(lvp) is adapters.LAVAPIPE and shipped_tiles(info(SWIFTSHADER)) is adapters.SWIFTSHADER
    )
    # without the subgroups feature no entry names the subgroup core (it would not compile)
    for raw in (LAVAPIPE, SWIFTSHADER):
        entry = shipped_tiles(info(raw, subgroups=False))
        assert entry is not None and (entry.measured or "not measured" in entry.why)
        assert all(t.get("core") != "reg_sg" for t in entry_tiles(entry))
    # a GPU: by vendor id, its rule a heuristic that says so
    nv = shipped_tiles(info(NVIDIA))
    assert nv is not None and nv.adapter_class == "gpu/nvidia" and nv.measured is None
    assert "heuristic" in nv.describe() and "not measured" in nv.why and "width 32" in nv.why
    assert nv.large["WG_X"] * nv.large["WG_Y"] % 32 == 0
    # subgroups wider than 64 threads (Adreno's 128, documented; none reported): 128-thread workgroups
    adreno = shipped_tiles(info(ADRENO))
    assert adreno is not None and adreno.adapter_class == "gpu/qualcomm" and "documented width" in adreno.why
    assert adreno.large["WG_X"] * adreno.large["WG_Y"] == adreno.small["WG_X"] * adreno.small["WG_Y"] == 128
    # a reported width wins over the vendor's documented one
    amd = shipped_tiles(info({**NVIDIA, "vendor_id": 0x1002, "vendor": "AMD", "stackgroup_max_size": 32}))
    assert amd is not None and amd.adapter_class == "gpu/amd" and "width 32" in amd.why
    # a browser's GPU (no adapter type) by its vendor's name; an unknown CPU driver: no entry
    assert adapter_class(AdapterInfo(vendor="nvidia", architecture="ampere")) == "gpu"
    assert adapter_class(AdapterInfo(vendor="acme", device="SoftGPU", adapter_type="CPU")) is None
    assert shipped_tiles(None) is None


def test_every_shipped_choice_is_a_valid_tile_choice_and_fits_this_adapter(gpu):
    """Every shipped choice is one the matmul launcher takes (core_constants: a known core, its
    constants, its register arrays' sizes; the tuners time it first, as the class's untuned choice,
    against their candidates), every one the class rule gives this adapter fits it, and every one
    that fits computes a ragged product within its tolerance here."""
    entries = [adapters.LAVAPIPE, adapters.LAVAPIPE_NO_SUBGROUPS, adapters.SWIFTSHADER]
    entries += [adapters.SWIFTSHADER_NO_SUBGROUPS, shipped_tiles(info(NVIDIA)), shipped_tiles(info(ADRENO))]
    for entry in entries:
        assert entry is not None
        for tiles in entry_tiles(entry):
            core_constants(tiles)
    mine = shipped_tiles(gpu.info)
    if mine is not None:
        for tiles in entry_tiles(mine):
            assert fits(tiles, gpu.device.limits, gpu.has_subgroups)
    # and each one that fits this device computes a ragged product right (the GPUs' choices included)
    distinct = {json.dumps(t, sort_keys=True): t for e in entries if e is not None for t in entry_tiles(e)}
    for tiles in distinct.values():
        if fits(tiles, gpu.device.limits, gpu.has_subgroups):
            case = MatmulCase(gpu, "fp32", 67, 35, 41, variant="matmul_wgrad", trans_a=1, tiles=tiles)
            assert case.check() <= 1.0, tiles


def test_precedence_cache_then_shipped_class_then_shipped_size_then_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(tmp_path / "tune.json"))
    lvp = info(LAVAPIPE)
    entry = shipped_tiles(lvp)
    assert entry is not None
    cached_cls, shipped_cls = shape_class("native", *SMALL), shape_class("native", 64, 64, 64, 1, 0)
    pinned = dict(CANDIDATES[-1])
    update_cache("A", {cached_cls: pinned, ROWS_KEY: {"form": "workgroup"}})
    assert TileTable.for_adapter("A", lvp).shipped is entry
    table = TileTable(load_cache()["A"], "A", replace(entry, by_class={shipped_cls: dict(CANDIDATES[-2])}))
    assert table.for_shape("native", *SMALL) == pinned and table.source("native", *SMALL) == "tune cache"
    assert table.for_shape("native", 64, 64, 64, 1, 0) == CANDIDATES[-2]  # the class's own shipped entry
    assert table.for_shape("fp32", *SMALL) == entry.small and table.source("fp32", *SMALL) == "shipped"
    assert table.for_shape("fp32", *LARGE) == entry.large and LARGE[0] ** 3 > SMALL_MACS
    if entry.narrow is not None:  # attention's narrow products (N <= NARROW_N) have tiles of their own
        assert table.for_shape("fp32", 64, adapters.NARROW_N, 64) == entry.narrow != entry.small
    # the forms: the cache's, else the class's
    assert table.row_kernels == "workgroup" and table.form_sources[ROWS_KEY] == "tune cache"
    assert table.weights == entry.weights and table.form_sources[WEIGHTS_KEY] == "shipped"
    # no adapter info (the page's key, a name alone): the cache, else the defaults
    plain = TileTable.for_adapter("A")
    assert plain.shipped is None and plain.for_shape("fp32", *SMALL) == default_tiles(*SMALL)
    assert plain.source("fp32", *LARGE) == "default" and plain.weights == "as_stored"
    assert TileTable().describe() == "default" and TileTable().describe(["x", "y"]) == "default"


def test_describe_names_each_source_for_the_plans_classes():
    lvp_table = TileTable({"c1": dict(SMALL_TILES)}, "A", shipped_tiles(info(LAVAPIPE)))
    said = lvp_table.describe(["c1", "c2", "c3"])
    assert said.startswith("tuned (1 of the 3 shape classes from the tune cache; 2 from the shipped lavapipe")
    assert "(measured)" in said and "thread-per-row row kernels (shipped)" in said
    assert (
        TileTable({}, "A", shipped_tiles(info(NVIDIA)))
        .describe(["c1"])
        .startswith("shipped gpu/nvidia table (heuristic, not measured)")
    )
    assert (
        TileTable({"c1": dict(SMALL_TILES)}).describe(["c1"])
        == "tuned (1 of the 1 shape classes from the tune cache)"
    )


def _tiny_plan(gpu, table):
    cfg = TrainConfig(hidden=[16], batch_size=8, steps=2, log_every=1)
    return build_plan(cfg, load_digits(), resolve_f16_path("mixed", "auto", gpu.has_f16), table, dry=True)[0]


def test_first_use_tuning_times_only_the_missing_classes_and_keeps_to_its_budget(gpu, tmp_path, monkeypatch):
    """A class the cache holds is neither timed nor rewritten; with no budget nothing is timed or
    written (no class starts once the budget is spent); with one, each missing class gets its
    untuned choice and one more timed against each other, and the winner is cached for the adapter."""
    cache = tmp_path / "tune.json"
    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(cache))
    table = TileTable.for_adapter(gpu.name, gpu.info)
    classes = plan_classes(_tiny_plan(gpu, table))
    assert len(classes) >= 3
    pinned = dict(SMALL_TILES)  # a choice no tuner would keep if it timed the class again
    update_cache(gpu.name, {classes[0]: pinned})
    table = TileTable.for_adapter(gpu.name, gpu.info)
    same, line = FirstUseTuning(budget_s=0.0, even_measured=True)(gpu, _tiny_plan(gpu, table), table)
    assert load_cache() == {gpu.name: {classes[0]: pinned}}
    assert f"tuned 0 of the {len(classes) - 1} shape classes missing" in line and "later run" in line
    assert same.by_class == {classes[0]: pinned}
    new, line = FirstUseTuning(budget_s=600.0, max_candidates=2, even_measured=True)(
        gpu, _tiny_plan(gpu, table), table
    )
    cached = load_cache()[gpu.name]
    assert set(cached) == set(classes) and cached[classes[0]] == pinned
    assert (
        f"tuned {len(classes) - 1} of the {len(classes) - 1} shape classes" in line
        and "later run" not in line
    )
    untuned = TileTable({}, gpu.name, shipped_tiles(gpu.info))
    for cls in classes[1:]:
        assert fits(cached[cls], gpu.device.limits, gpu.has_subgroups)
        assert new.by_class[cls] == cached[cls]
    # nothing left to tune: nothing timed
    again, line = FirstUseTuning(budget_s=600.0, even_measured=True)(gpu, _tiny_plan(gpu, new), new)
    assert "every one of the run's" in line and again.by_class == new.by_class
    assert untuned.by_class == {}


def test_first_use_tuning_leaves_a_measured_class_table_alone(gpu, tmp_path, monkeypatch):
    """Where the adapter's class has a measured shipped table (lavapipe, SwiftShader: every machine
    the suite runs on), first-use tuning times nothing unless told to (even_measured, an explicit
    --tune-budget), and says why; elsewhere (a heuristic or no entry) it tunes."""
    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(tmp_path / "tune.json"))
    table = TileTable.for_adapter(gpu.name, gpu.info)
    heuristic = TileTable({}, gpu.name, None)
    assert table.shipped is not None and table.shipped.measured, "the suite's adapters are measured classes"
    same, line = FirstUseTuning(budget_s=600.0)(gpu, _tiny_plan(gpu, table), table)
    assert same is table and line.startswith("skipped: the shipped ") and "measured" in line
    assert not (tmp_path / "tune.json").exists()
    _, line = FirstUseTuning(budget_s=0.0)(gpu, _tiny_plan(gpu, heuristic), heuristic)
    assert line.startswith("tuned 0 of the "), "no measured table: it tunes (here with no budget)"


FLAGS = ["--hidden", "16", "--batch-size", "8", "--steps", "2", "--log-every", "1", "--quiet"]


def test_webmp_train_tunes_first_unless_told_not_to(tmp_path, monkeypatch, capsys):
    """--no-tune (and $WEBMP_NO_TUNE) leaves the cache alone and shows no tuning phase; without them
    the phase is in the log with its time; the log says where the tiles came from either way."""
    cache = tmp_path / "tune.json"
    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(cache))
    monkeypatch.setenv("WEBMP_NO_TUNE", "0")
    assert cli(["train", *FLAGS, "--no-tune", "--out", str(tmp_path / "off")]) == 0
    out = capsys.readouterr().out
    assert not cache.exists() and "first-use tuning" not in out and "webmp: matmul tiles: " in out
    summary = json.loads((tmp_path / "off" / "summary.json").read_text())
    assert "tune cache" not in summary["matmul_tiles"]
    monkeypatch.setenv("WEBMP_NO_TUNE", "1")
    assert cli(["train", *FLAGS, "--out", str(tmp_path / "env")]) == 0
    assert not cache.exists() and "first-use tuning" not in capsys.readouterr().out
    monkeypatch.setenv("WEBMP_NO_TUNE", "0")
    assert cli(["train", *FLAGS, "--out", str(tmp_path / "measured")]) == 0
    assert "webmp: first-use tuning: skipped: the shipped" in capsys.readouterr().out
    assert not cache.exists()
    assert cli(["train", *FLAGS, "--tune-budget", "0.001", "--out", str(tmp_path / "tiny")]) == 0
    out = capsys.readouterr().out
    assert "webmp: first-use tuning: tuned " in out and "s]" in out  # at most one class: its two candidates
    assert cli(["train", *FLAGS, "--tune-budget", "-1", "--out", str(tmp_path / "bad")]) == 2


@pytest.mark.slow  # two candidates of each of the MLP's classes timed (~20 s on a busy 2-core lavapipe)
def test_webmp_train_caches_what_it_tuned_for_the_runs_own_classes(gpu, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "tune.json"
    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(cache))
    monkeypatch.setenv("WEBMP_NO_TUNE", "0")
    assert cli(["train", *FLAGS, "--tune-budget", "600", "--out", str(tmp_path / "on")]) == 0
    out = capsys.readouterr().out
    assert "webmp: first-use tuning: tuned " in out and " s]" in out
    run_classes = plan_classes(_tiny_plan(gpu, TileTable.for_adapter(gpu.name, gpu.info)))
    tuned = json.loads(cache.read_text())
    assert list(tuned) == [gpu.name] and set(tuned[gpu.name]) == set(run_classes)
    summary = json.loads((tmp_path / "on" / "summary.json").read_text())
    n = len(run_classes)
    assert summary["matmul_tiles"].startswith(f"tuned ({n} of the {n} shape classes from the tune cache)")


def test_a_data_parallel_rank_does_not_tune():
    """Each rank would time its own classes and might choose otherwise (the same bits, but the
    ranks' plans would differ): a data-parallel run skips first-use tuning and says so."""
    from types import SimpleNamespace

    from webmp.train.loop import Trainer

    def tuner(*args):
        raise AssertionError("a rank tuned")

    rank = SimpleNamespace(world=SimpleNamespace(size=2), log=print)
    said = Trainer._first_use_tuning(rank, tuner)  # type: ignore[arg-type]
    assert said is not None and said.startswith("skipped: a data-parallel run")
    assert Trainer._first_use_tuning(rank, None) is None  # type: ignore[arg-type]
