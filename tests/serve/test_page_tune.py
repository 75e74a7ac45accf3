"""The page's tuning pass on the server's side (webmp/tune/page.py, POST /api/adapters, /api/tune,
/api/tune/results, /api/tune/forms, /api/tune/forms/results): the tuning plan covers a config's
shape classes with the tile choices the page's device allows, outputs are judged against float64
(a wrong one is never kept), the fastest correct choice is stored under the adapter's key, and a
run's plan asked for with that key uses it; the same for the forms (row kernels, weights), whose
forms must agree. The page's side is
tests/browser/test_browser_reliability.py::test_page_tunes_its_matmuls_and_runs_on_the_choice."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from fastapi.testclient import TestClient

from webmp.config import TrainConfig
from webmp.engine.tiles import DEFAULT_TILES, ROWS_KEY, WEIGHTS_KEY, TileTable, default_tiles
from webmp.models import build_plan
from webmp.ops import b_pairs
from webmp.serve.app import create_app
from webmp.serve.page_data import training_data
from webmp.tune.form_cases import same_outputs
from webmp.tune.matmul_cases import CANDIDATES, candidates, fits, kebab_limits
from webmp.tune.page import (
    CaseResult,
    FormResult,
    adapter_key,
    forms_plan,
    judge,
    judge_forms,
    plan_shape_classes,
    tuning_plan,
)

CFG = dict(hidden=[24], batch_size=16, steps=4, log_every=2, checkpoint_every=0)
# a browser's limits (camelCase, as runner.js's openGPU sends the adapter's): 256 threads, 16 KiB shared
LIMITS = {
    "maxComputeInvocationsPerWorkgroup": 256,
    "maxComputeWorkgroupSizeX": 256,
    "maxComputeWorkgroupSizeY": 256,
    "maxComputeWorkgroupStorageSize": 16384,
    "maxStorageBufferBindingSize": 2**27,
}
SIGNATURE = {
    "vendor": "google",
    "architecture": "swiftshader",
    "device": "",
    "description": "",
    "subgroup_min_size": 4,
    "subgroup_max_size": 4,
    "features": ["shader-f16", "subgroups"],
}


@pytest.fixture(autouse=True)
def own_tune_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(tmp_path / "tune.json"))


def correct_output(case) -> bytes:
    """What a correct kernel writes: the float64 reference rounded to f32 (the check's variant,
    matmul_wgrad, stores f32)."""
    return case.check.reference().astype(np.float32).tobytes()


@pytest.fixture(scope="module")
def tuning():  # ~1.5 s (the digits and two plans): the tests using it are slow
    cfg = TrainConfig(**CFG)
    return tuning_plan(cfg, training_data(cfg), "emulated", LIMITS, has_subgroups=False, max_candidates=18)


def test_kebab_limits_give_wgpu_py_names():
    limits = kebab_limits(LIMITS)
    assert limits["max-compute-workgroup-size-x"] == 256
    assert limits["max-compute-workgroup-storage-size"] == 16384


@pytest.mark.slow
def test_tuning_plan_covers_each_class_with_the_choices_the_device_allows(tuning):
    cfg = TrainConfig(**CFG)
    train_plan, _ = build_plan(cfg, training_data(cfg), "emulated")
    classes = [cls for cls, _ in plan_shape_classes(train_plan)]
    allowed = candidates(kebab_limits(LIMITS), has_subgroups=False)
    assert allowed[0] == DEFAULT_TILES
    assert not any(t.get("core") == "reg_sg" for t in allowed)  # no subgroups: no subgroup core
    assert len(allowed) < len(CANDIDATES)  # 16 KiB of workgroup memory refuses the big tiled choices
    assert all(fits(t, kebab_limits(LIMITS)) for t in allowed)
    assert sorted({c.cls for c in tuning.cases}) == sorted(classes)
    shapes = dict(plan_shape_classes(train_plan))
    for cls in classes:
        default = default_tiles(*shapes[cls][:3])  # the class's untuned tiles, tried first
        assert [c.tiles for c in tuning.cases if c.cls == cls] == [default] + [
            a for a in allowed if a != default
        ]
        assert [c.default for c in tuning.cases if c.cls == cls] == [True] + [False] * (
            len(allowed) - (default in allowed)
        )
    kernels = {k["name"]: k for k in tuning.plan["kernels"]}
    buffers = {b["name"]: b for b in tuning.plan["buffers"]}

    def sizes(dispatch):  # M, N, K: the kernel's constants, or its dims buffer's words (RUNTIME_DIMS)
        k = kernels[dispatch["kernel"]]["constants"]
        if not k.get("RUNTIME_DIMS"):
            return k["SIZE_M"], k["SIZE_N"], k["SIZE_K"]
        init = buffers[dispatch["bind"][2]]["init"]
        return tuple(np.frombuffer(tuning.blob, np.uint32, 3, init["offset"]).tolist())

    for c in tuning.cases:
        (check,) = tuning.plan["programs"][f"check_{c.index}"]
        (timed,) = tuning.plan["programs"][f"time_{c.index}"]
        M, N, K, ta, tb, batch = shapes[c.cls]
        k = kernels[timed["kernel"]]["constants"]
        assert (*sizes(timed), k["TRANS_A"], k["TRANS_B"]) == (M, N, K, ta, tb)
        assert timed["workgroups"][2] == batch and c.flops == 2.0 * M * N * K * batch
        shape = {n: v for n, v in c.tiles.items() if n not in ("core", "B_PAIRS")}
        assert {n: k[n] for n in shape} == shape
        assert k.get("B_PAIRS", 0) == b_pairs(c.tiles, tb, N, None)  # pairs where B's rows allow
        assert sizes(check) == (min(M, 67), min(N, 35), min(K, 41))
        names = [b["name"] for b in kernels[check["kernel"]]["bindings"]]
        assert check["bind"][names.index("C")] == f"{c.cls}:C"


@pytest.mark.slow
def test_judge_keeps_the_fastest_correct_choice_and_refuses_wrong_outputs(tuning):
    cls = tuning.cases[0].cls
    cases = [c for c in tuning.cases if c.cls == cls]
    # the last case is the fastest (most reps in the same time) but its output is one f16 ulp of
    # the largest result off at one element: far beyond the check's tolerance
    results = []
    for i, c in enumerate(cases):
        out = correct_output(c)
        if i == len(cases) - 1:
            a = np.frombuffer(out, np.float32).copy()
            j = int(np.argmax(np.abs(a)))
            a[j] += np.abs(a).max() * 2.0**-10
            out = a.tobytes()
        results.append(CaseResult(c.index, 1.0, 10 + i, out))
    verdict = judge(tuning, cls, results)
    assert verdict["wrong"] == [cases[-1].index]
    assert verdict["tiles"] == cases[-2].tiles  # the fastest of the correct ones
    assert verdict["gflops"] == pytest.approx(cases[-2].flops * (10 + len(cases) - 2) / 1e9)
    assert verdict["default_gflops"] == pytest.approx(cases[0].flops * 10 / 1e9)


@pytest.mark.slow
def test_judge_refuses_outputs_of_another_class_or_short_ones(tuning):
    from webmp.tune.page import TuneResultError

    first, other = tuning.cases[0], next(c for c in tuning.cases if c.cls != tuning.cases[0].cls)
    with pytest.raises(TuneResultError, match="is not one of class"):
        judge(tuning, first.cls, [CaseResult(other.index, 1.0, 1, correct_output(other))])
    with pytest.raises(TuneResultError, match="bytes, the check writes"):
        judge(tuning, first.cls, [CaseResult(first.index, 1.0, 1, b"\0" * 8)])
    with pytest.raises(TuneResultError, match="given twice"):
        judge(tuning, first.cls, [CaseResult(first.index, 1.0, 1, correct_output(first))] * 2)


@pytest.mark.slow  # builds a run's plan twice and a tuning plan over HTTP (~2 s)
def test_tuned_tiles_reach_the_runs_plan(tmp_path):
    """The whole exchange as the page makes it, with correct outputs computed here: the verdict is
    stored under the adapter's key, and a plan asked for with ?tiles=KEY takes it."""
    with TestClient(create_app(tmp_path / "runs"), base_url="http://127.0.0.1") as client:
        first = client.post("/api/adapters", json=SIGNATURE).json()
        key = first["adapter_key"]
        assert first == {
            "adapter_key": adapter_key(SIGNATURE),
            "tuned": {},
            "forms": {},
            "shipped": "shipped swiftshader table (measured)",  # Chromium's "swiftshader"
            # with shader-f16 it is lavapipe behind the harness's layer: it compiles at first dispatch
            "compile_helpers": 3,
            "compile_helpers_why": "a browser's 'SwiftShader' with shader-f16 is lavapipe, which compiles a "
            "kernel at its first dispatch",
        }
        request = {
            "adapter": SIGNATURE,
            "limits": LIMITS,
            "config": CFG,
            "f16": "emulated",
            "max_candidates": 3,
        }
        r = client.post("/api/tune", json=request)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["adapter_key"] == key and body["f16_path"] == "emulated"
        cfg = TrainConfig(**CFG)
        tuning = tuning_plan(cfg, training_data(cfg), "emulated", LIMITS, True, 3)
        assert [c["class"] for c in body["classes"]] == list(dict.fromkeys(c.cls for c in tuning.cases))
        cls = body["classes"][1]
        # the subgroup core (second choice, the page has subgroups) made fastest
        results = [
            {
                "case": c["case"],
                "seconds": 1.0 if c["tiles"].get("core") == "reg_sg" else 2.0,
                "reps": 10,
                "output": base64.b64encode(correct_output(tuning.cases[c["case"]])).decode(),
            }
            for c in cls["cases"]
        ]
        verdict = client.post(
            "/api/tune/results", json={"request": request, "shape_class": cls["class"], "results": results}
        ).json()
        assert verdict["tiles"]["core"] == "reg_sg" and verdict["wrong"] == []
        assert client.post("/api/adapters", json=SIGNATURE).json()["tuned"] == {
            cls["class"]: verdict["tiles"]
        }
        assert TileTable.for_adapter(key).by_class == {cls["class"]: verdict["tiles"]}

        run = client.post("/api/runs", json=CFG).json()
        tuned = client.get(f"/api/runs/{run['id']}/plan", params={"f16": "emulated", "tiles": key}).json()
        default = client.get(f"/api/runs/{run['id']}/plan", params={"f16": "emulated"}).json()
        assert tuned["matmul_tiles"].startswith(
            "tuned (1 shape classes cached), else the shipped swiftshader table (measured)"
        )
        assert default["matmul_tiles"] == "default"
        assert "subgroups" in tuned["plan"]["required_features"]
        assert "subgroups" not in default["plan"]["required_features"]
        cores = {
            k["name"]: k["sources"] for k in tuned["plan"]["kernels"] if k["entry"].startswith("matmul_")
        }
        assert sum("matmul_reg_a_sg.wgsl" in s for s in cores.values()) >= 1
        # the buffers (and so the checkpoint layout) do not depend on the tiles
        assert tuned["plan"]["buffers"] == default["plan"]["buffers"]

        # refusals: one line each, naming what is wrong
        bad = dict(results[0], output="not base64!")
        r = client.post(
            "/api/tune/results", json={"request": request, "shape_class": cls["class"], "results": [bad]}
        )
        assert r.status_code == 422 and "not base64" in r.json()["detail"]
        r = client.post(
            "/api/tune/results", json={"request": request, "shape_class": "x", "results": results}
        )
        assert r.status_code == 422 and "not one of this tuning plan's classes" in r.json()["detail"]
        r = client.post("/api/tune", json={**request, "config": {**CFG, "growth_factor": 0.5}})
        assert r.status_code == 422 and "growth_factor" in r.json()["detail"]
        r = client.post("/api/tune", json={**request, "limits": {"maxBufferSize": 1}})
        assert r.status_code == 422 and "max-compute-invocations-per-workgroup" in r.json()["detail"]
        r = client.get(f"/api/runs/{run['id']}/plan", params={"f16": "emulated", "tiles": "../../etc"})
        assert r.status_code == 422


@pytest.mark.slow  # compiles every case's kernels on lavapipe (~10 s)
def test_the_tuning_plan_runs_natively_and_every_choice_passes(gpu):
    """The tuning plan run through wgpu-py as the page runs it: each check program's output passes
    the judge, on the device's f16 path and on fp32."""
    cfg = TrainConfig(**CFG)
    limits = dict(gpu.device.limits)
    for path in ("native" if gpu.has_f16 else "emulated", "fp32"):
        run_cfg = TrainConfig(**CFG, precision="fp32") if path == "fp32" else cfg
        tuning = tuning_plan(run_cfg, training_data(run_cfg), path, limits, gpu.has_subgroups, 4)
        _run_and_judge_every_class(tuning, gpu, reps=3)


def _run_and_judge_every_class(tuning, gpu, reps):
    """Runs a tuning plan through wgpu-py as the page does; every class's choices pass the judge."""
    from webmp.engine.runtime import Runtime
    from webmp.tune.native import time_dispatches

    rt = Runtime(tuning.plan, tuning.blob, gpu)
    for cls in tuning.describe():
        results = []
        for c in cls["cases"]:
            time_dispatches(rt, rt.programs[c["check"]], 1, c["output"])
            seconds = time_dispatches(rt, rt.programs[c["time"]], reps, "time:C")
            results.append(CaseResult(c["case"], seconds, reps, rt.read(c["output"])))
        verdict = judge(tuning, cls["class"], results)
        assert verdict["wrong"] == [] and verdict["tiles"] is not None, (tuning.path, verdict)


@pytest.mark.slow  # compiles the batched classes' kernels on lavapipe
def test_batched_classes_are_timed_batched_and_pass(gpu):
    """Attention's products are one dispatch over the GPT's batch-heads: the page times them so
    (each batch-head on its own operands in the scratch buffers, GFLOP/s counted over all of
    them), not as one batch-head, which the dispatch alone bounds; run natively, every choice
    passes the judge and the batched time programs run."""
    cfg = TrainConfig(model="gpt", batch_size=2, d_model=32, n_head=2, context=16, val_tokens=0)
    path = "native" if gpu.has_f16 else "emulated"
    tuning = tuning_plan(cfg, training_data(cfg), path, dict(gpu.device.limits), gpu.has_subgroups, 2)
    train_plan, _ = build_plan(cfg, training_data(cfg), path)
    shapes = dict(plan_shape_classes(train_plan))
    batched = {cls for cls, s in shapes.items() if s[5] > 1}
    assert batched, "the GPT's attention products are batched"
    kernels = {k["name"]: k for k in tuning.plan["kernels"]}
    buffers = {b["name"]: b for b in tuning.plan["buffers"]}
    for c in tuning.cases:
        M, N, K, ta, tb, batch = shapes[c.cls]
        (timed,) = tuning.plan["programs"][f"time_{c.index}"]
        assert timed["workgroups"][2] == batch and c.flops == 2.0 * M * N * K * batch
        if c.cls in batched:  # batch b's operands start b whole matrices into the scratch buffers
            k = kernels[timed["kernel"]]["constants"]
            if k.get("RUNTIME_DIMS"):  # MatmulArgs: dims, then A's, B's, C's (off, sb, sh, ld)
                args = buffers[timed["bind"][2]]["init"]
                words = np.frombuffer(tuning.blob, np.uint32, 16, args["offset"])
                a_sb, c_sb = int(words[5]), int(words[13])
            else:
                a_sb, c_sb = k["A_SB"], k["C_SB"]
            assert a_sb == (K * (M + M % 2) if ta else M * (K + K % 2)) and c_sb == M * N
    _run_and_judge_every_class(tuning, gpu, reps=2)


@pytest.mark.slow
def test_a_plan_on_the_subgroup_core_requires_subgroups():
    """A tuned table choosing the subgroup core makes a training plan that says it needs
    `subgroups` (the page compiles such plans with `enable subgroups;`; it once said nothing)."""
    cfg = TrainConfig(**CFG)
    data = training_data(cfg)
    plain, _ = build_plan(cfg, data, "emulated")
    cls = plan_shape_classes(plain)[0][0]
    table = TileTable({cls: {"core": "reg_sg", "WG_X": 8, "WG_Y": 4, "TM": 8, "TN": 8}})
    tuned, _ = build_plan(cfg, data, "emulated", table)
    assert plain["required_features"] == [] and tuned["required_features"] == ["subgroups"]


# --- the forms: row kernels, and how the GPT's backward pass reads its weights ---------------------

GPT = dict(model="gpt", n_layer=1, d_model=16, n_head=2, context=8, batch_size=4, steps=4, log_every=2)


def test_forms_plan_has_the_choices_the_configs_plan_makes():
    """The plain MLP makes no form choice; LayerNorm makes the row kernels' (the MLP's and the
    GPT's); the GPT also the weights'. Each form is a program of the plan writing its own outputs,
    the weights' products on the tiles the adapter's key has so far."""
    whats = {
        m: [s.what for s in forms_plan(TrainConfig(model=m), "emulated", "page-0").specs]
        for m in ("mlp", "mlp-ln", "gpt")
    }
    assert whats == {"mlp": [], "mlp-ln": [ROWS_KEY], "gpt": [ROWS_KEY, WEIGHTS_KEY]}
    forms = forms_plan(TrainConfig(model="gpt"), "emulated", "page-0")
    buffers = {b["name"] for b in forms.plan["buffers"]}
    for choice in forms.describe():
        spec = forms.spec(choice["what"])
        assert [f["form"] for f in choice["forms"]] == spec.forms and choice["default"] == spec.default
        for f in choice["forms"]:
            assert forms.plan["programs"][f["program"]] and set(f["outputs"]) <= buffers
        outs = [set(f["outputs"]) for f in choice["forms"]]
        assert not set.intersection(*outs), "each form writes outputs of its own"
    assert forms.spec("sideways") is None


@pytest.mark.slow  # compiles both choices' kernels on lavapipe
def test_the_forms_plan_runs_natively_and_the_forms_agree(gpu):
    """The forms plan run through wgpu-py as the page runs it: each form's outputs are the same
    bytes as the other form's, so the judge may choose the faster; a form that computed something
    else (its outputs read from another buffer) leaves the default."""
    from webmp.engine.runtime import Runtime
    from webmp.tune.native import time_dispatches

    path = "native" if gpu.has_f16 else "emulated"
    forms = forms_plan(TrainConfig(model="gpt"), path, "page-0")
    rt = Runtime(forms.plan, forms.blob, gpu)
    for choice in forms.describe():
        outputs = {}
        for f in choice["forms"]:
            time_dispatches(rt, rt.programs[f["program"]], 1, f["outputs"][-1])
            outputs[f["form"]] = [rt.read(o) for o in f["outputs"]]
        assert same_outputs(outputs), choice["what"]
        spec = forms.spec(choice["what"])
        results = [FormResult(f, 1.0 + i, 1, str(outputs[f])) for i, f in enumerate(spec.forms)]
        assert judge_forms(spec, results)["form"] == spec.forms[0]
        wrong = [FormResult(f, 2.0 - i, 1, str(outputs[f]) + str(i)) for i, f in enumerate(spec.forms)]
        assert judge_forms(spec, wrong) == {"what": spec.what, "identical": False, "form": spec.default,
                                            "seconds": None}  # fmt: skip


@pytest.mark.slow  # the default corpus and a GPT plan, over HTTP (~3 s)
def test_form_choices_reach_the_runs_plan(tmp_path):
    """The exchange as the page makes it, after the classes: the forms plan, each choice's results
    (a digest of each form's outputs), the verdict stored under the adapter's key, and a GPT plan
    asked for with ?tiles=KEY built with it. Forms whose digests differ keep the default."""
    with TestClient(create_app(tmp_path / "runs"), base_url="http://127.0.0.1") as client:
        key = client.post("/api/adapters", json=SIGNATURE).json()["adapter_key"]
        request = {"adapter": SIGNATURE, "limits": LIMITS, "config": GPT, "f16": "emulated"}
        r = client.post("/api/tune/forms", json=request)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["adapter_key"] == key and [c["what"] for c in body["forms"]] == [ROWS_KEY, WEIGHTS_KEY]
        assert set(body["plan"]["programs"]) >= {f["program"] for c in body["forms"] for f in c["forms"]}

        def post(what, results):
            return client.post(
                "/api/tune/forms/results", json={"request": request, "what": what, "results": results}
            )

        rows = [{"form": "workgroup", "seconds": 0.3, "reps": 10, "digest": "0123456789abcdef"},
                {"form": "thread", "seconds": 0.1, "reps": 10, "digest": "0123456789abcdef"}]  # fmt: skip
        verdict = post(ROWS_KEY, rows).json()
        assert verdict == {"adapter_key": key, "what": ROWS_KEY, "form": "thread", "identical": True,
                           "seconds": {"workgroup": 0.03, "thread": 0.01}}  # fmt: skip
        weights = [
            {"form": "as_stored", "seconds": 0.3, "reps": 3, "digest": "0123456789abcdef"},
            {"form": "transposed", "seconds": 0.1, "reps": 3, "digest": "fedcba9876543210"},
        ]
        verdict = post(WEIGHTS_KEY, weights).json()
        assert verdict["form"] == "as_stored" and not verdict["identical"] and verdict["seconds"] is None
        table = TileTable.for_adapter(key)
        assert (table.row_kernels, table.weights, table.by_class) == ("thread", "as_stored", {})
        tuned = client.post("/api/adapters", json=SIGNATURE).json()
        assert tuned["tuned"] == {} and tuned["forms"] == {ROWS_KEY: "thread", WEIGHTS_KEY: "as_stored"}

        run = client.post("/api/runs", json=GPT).json()
        tuned = client.get(f"/api/runs/{run['id']}/plan", params={"f16": "emulated", "tiles": key}).json()
        entries = {k["entry"] for k in tuned["plan"]["kernels"]}
        assert {"layernorm_fwd_thread", "attn_softmax_fwd_thread"} <= entries
        assert (
            tuned["matmul_tiles"]
            == "shipped swiftshader table (measured), thread-per-row row kernels (tune cache)"
        )

        # refusals: one line each, naming what is wrong
        r = post("sideways", rows)
        assert r.status_code == 422 and "not one of this config's form choices" in r.json()["detail"]
        r = post(ROWS_KEY, rows[:1])
        assert (
            r.status_code == 422 and "the forms are ['workgroup', 'thread'] (each once)" in r.json()["detail"]
        )
        r = post(ROWS_KEY, [rows[0], rows[0]])
        assert r.status_code == 422 and "each once" in r.json()["detail"]
        r = post(ROWS_KEY, [dict(rows[0], digest="not hex"), rows[1]])
        assert r.status_code == 422
        r = client.post("/api/tune/forms", json={**request, "config": {**GPT, "growth_factor": 0.5}})
        assert r.status_code == 422 and "growth_factor" in r.json()["detail"]
        mlp = client.post("/api/tune/forms", json={**request, "config": CFG}).json()
        assert mlp["forms"] == [] and mlp["plan"] is None


def test_a_pages_plan_gets_its_adapter_class_s_shipped_tiles(tmp_path):
    """What a page reports about its adapter (POST /api/adapters) is kept under its key, so a plan
    asked for with ?tiles=KEY, nothing tuned yet, gets the shipped table of the adapter's class
    (webmp.engine.adapters): Chromium's "swiftshader" the register core's 16 x 4 blocks and row
    kernels a thread a row; a GPU vendor's the heuristic GPU rule; and it says so."""
    from webmp.engine.adapters import AdapterInfo, shipped_tiles
    from webmp.engine.tiles import ADAPTER_KEY
    from webmp.engine.tune_cache import load_cache

    with TestClient(create_app(tmp_path / "runs"), base_url="http://127.0.0.1") as client:
        key = client.post("/api/adapters", json=SIGNATURE).json()["adapter_key"]
        stored = load_cache()[key][ADAPTER_KEY]
        assert AdapterInfo.from_entry(stored) == AdapterInfo.from_browser(SIGNATURE)
        assert stored["subgroups"] == 1 and stored["architecture"] == "swiftshader"
        entry = shipped_tiles(AdapterInfo.from_browser(SIGNATURE))
        assert entry is not None and entry.adapter_class == "swiftshader"
        run = client.post("/api/runs", json=CFG).json()
        got = client.get(f"/api/runs/{run['id']}/plan", params={"f16": "emulated", "tiles": key}).json()
        assert got["matmul_tiles"].startswith("shipped swiftshader table (measured)")
        plan = got["plan"]
        twins = set(plan["quick"].values())  # the quick tier's own kernels aside (webmp.engine.tiers)
        own = {d["kernel"] for p, ds in plan["programs"].items() if p not in twins for d in ds}
        consts = [
            k["constants"] for k in plan["kernels"] if k["entry"].startswith("matmul_") and k["name"] in own
        ]
        assert consts and all((c["TM"], c["TN"]) == (entry.small["TM"], entry.small["TN"]) for c in consts)
        quick = [k["constants"] for k in plan["kernels"] if k["name"] not in own]
        assert quick and all((c["TM"], c["TN"]) == (4, 4) for c in quick)
        assert client.post("/api/adapters", json=SIGNATURE).json()["tuned"] == {}  # not a tuned class
        gpu = {**SIGNATURE, "vendor": "nvidia", "architecture": "ampere", "features": []}
        body = client.post("/api/adapters", json=gpu).json()
        assert body["shipped"] == "shipped gpu/nvidia/ampere table (heuristic, not measured)"
