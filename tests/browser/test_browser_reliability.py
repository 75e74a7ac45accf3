"""A page run that resumes, shares a browser, runs other matmul cores, draws the lens, meets a plan
beyond its adapter or a lost device, stops, or tunes its matmuls: each ends as the server and the
same run natively say it must."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest
from browser_helpers import (
    ARTIFACTS,
    SMALL,
    TIMEOUT,
    assert_like_native,
    native_run,
    on_disk,
    plan_beyond_limits,
    same,
    wait_page,
    wait_resume_offered,
)

from webmp.config import TrainConfig
from webmp.engine.plan import unpack_h
from webmp.serve.client import LocalServer
from webmp.train.rundir import RunDir


def test_disconnect_then_resume_continues_the_same_curve(server, browser, tmp_path, monkeypatch):
    """The page uploads checkpoints every 20 steps. The test holds the second upload (step 40), so
    the page waits there with records 0..39 sent, then closes the tab: the run is `disconnected`
    with all 40 records kept. A new tab resumes from step 20 and recomputes steps 20..39, which
    must equal the first tab's records exactly (same device, same state): the same curve, which is
    the one wgpu-py trains natively from the same config."""
    cfg = TrainConfig(**SMALL, steps=60, log_every=10, checkpoint_every=20)
    run = server.create_run(cfg)
    page = browser.browser.new_page()
    held = []

    def hold_second_checkpoint(route):
        if "step=40" in route.request.url:
            held.append(route)  # never answered: the page waits for it
        else:
            route.continue_()

    page.route(re.compile(r"/checkpoint\?"), hold_second_checkpoint)
    page.goto(run.page_url)
    wait_page(page, "window.webmp.records >= 40")
    for _ in range(100):  # Playwright runs route handlers while it waits
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the page did not try to upload the checkpoint at step 40"
    page.close()
    assert not list(run.history(after=39, timeout=60))  # returns once the server has seen the tab go
    info = run.info()
    assert info["status"] == "disconnected" and info["checkpoint_step"] == 20
    first_tab = on_disk(server, run)
    assert [r["step"] for r in first_tab] == list(range(40))

    run.open_page(browser)
    summary = run.wait(timeout=TIMEOUT)
    recs = on_disk(server, run)
    assert [r["step"] for r in recs] == list(range(60))
    assert same(recs[:40], first_tab)  # steps 20..39 recomputed after the resume are bit-identical
    lens = RunDir(server.app.state.store.get(run.id).dir.path).read_histograms()
    assert [h["step"] for h in lens] == [9, 19, 29, 39, 49, 59]  # those after step 19 sent again, once
    nat, _ = native_run(cfg, browser, tmp_path / "native", monkeypatch)
    assert_like_native(recs, nat, browser)  # and the page trained the model the plan describes
    assert summary["steps"] == 60 and summary["optimizer_steps"] + summary["skipped_steps"] == 60
    assert np.mean([r["loss"] for r in recs[-10:]]) < 0.5 * np.mean([r["loss"] for r in recs[:10]])
    run.close_page()


def test_two_tabs_with_a_token_never_mix(tmp_path, browser, monkeypatch):
    """Two runs at once in two tabs of one browser, against a server that requires a token (the
    page's URL carries it once; the server turns it into a cookie that the API and the WebSocket
    take, and the page's URL no longer shows it). The lr schedule is constant,
    so each record's lr identifies its run."""
    with LocalServer(tmp_path, token="tab-test-token") as srv:
        # 27 steps at log_every 5: the last interval is short, and its records must arrive too
        cfg = dict(**SMALL, steps=27, log_every=5, checkpoint_every=0, schedule="constant", warmup=0)
        configs = {lr: TrainConfig(**{**cfg, "lr": lr, "seed": seed}) for lr, seed in ((1e-3, 1), (2e-3, 2))}
        a, b = (srv.create_run(c, browser=browser) for c in configs.values())
        a.wait(timeout=TIMEOUT)
        b.wait(timeout=TIMEOUT)
        for run, lr in ((a, 1e-3), (b, 2e-3)):
            assert "token" not in run.page.url, run.page.url
            recs = on_disk(srv, run)
            assert [r["step"] for r in recs] == list(range(27))
            assert {r["lr"] for r in recs} == {float(np.float32(lr))}
            assert run.wait()["steps"] == 27
            nat, _ = native_run(configs[lr], browser, tmp_path / f"native-{lr}", monkeypatch)
            assert_like_native(recs, nat, browser)
            run.close_page()


def test_page_runs_matmuls_on_the_subgroup_core(server, browser, tmp_path, monkeypatch):
    """The server's plan edited on the way so that every matmul runs on the register-blocked
    subgroup core with the workgroup tile it had (the tiled default's 64 x 64 as 8 x 8 blocks of
    8 x 8 threads; the small products' register core, 4 x 4 blocks, with its op(A) loads shared),
    so the dispatches stay as they are: the plan then requires `subgroups` and the page compiles
    the kernels with `enable subgroups;` (browsers need it, naga refuses it). Each core gives the
    default core's bits, so the records are those of the default plan natively (on lavapipe bit
    for bit; SwiftShader's 4-wide subgroups take the core's per-thread loads)."""
    cfg = TrainConfig(**SMALL, steps=20, log_every=10, checkpoint_every=0)
    run = server.create_run(cfg)
    page = browser.browser.new_page()
    edited = []

    def to_subgroup_core(route):
        body = route.fetch().json()
        for k in body["plan"]["kernels"]:
            if "matmul.wgsl" in k["sources"]:
                i = k["sources"].index("matmul.wgsl")
                k["sources"][i : i + 1] = ["matmul_reg.wgsl", "matmul_reg_a_sg.wgsl"]
                del k["constants"]["BK"]
                k["constants"].update(WG_X=8, WG_Y=8, TM=8, TN=8)
                edited.append(k["name"])
            elif "matmul_reg_a.wgsl" in k["sources"]:
                k["sources"][k["sources"].index("matmul_reg_a.wgsl")] = "matmul_reg_a_sg.wgsl"
                edited.append(k["name"])
        body["plan"]["required_features"] = sorted({*body["plan"]["required_features"], "subgroups"})
        route.fulfill(json=body)

    page.route(re.compile(r"/plan\?"), to_subgroup_core)
    page.goto(run.page_url)
    wait_page(page, "window.webmp.status === 'finished'")
    assert edited and all(n.startswith("matmul_") for n in edited)
    nat, _ = native_run(cfg, browser, tmp_path / "native", monkeypatch)
    assert_like_native(on_disk(server, run), nat, browser)
    page.close()


def test_lens_shows_the_gradient_histograms_the_server_stores(server, browser, tmp_path, monkeypatch):
    """The gradient-range lens of a short small-MLP run: at each of the 3 metrics reads the page
    runs the plan's lens program, draws the histograms and streams them; the server stores them in
    histograms.jsonl, each layer's counts adding up to its rows x cols gradients. The same run
    natively (the browser's f16 path, default tiles) ends with the same gradients in its buffers,
    whose numpy histogram (webmp.testing.reference.grad_hist) is the native run's last line exactly. On
    lavapipe the page trains bit for bit like wgpu-py, so the page's counts equal it exactly. On
    SwiftShader, whose f32 results drift an ulp apart (assert_like_native), a value moves
    bucket only when that drift carries it across a power of two: at most 1 % of a layer's
    values at any read (measured on SwiftShader: none moved, the counts were identical)."""
    from webmp.testing.reference import grad_hist
    from webmp.train.loop import Trainer
    from webmp.train.rundir import lens_view

    cfg = TrainConfig(**SMALL, steps=30, log_every=10, checkpoint_every=0, act="relu")
    run = server.create_run(cfg, browser=browser)
    run.wait(timeout=TIMEOUT)
    wait_page(run.page, "window.webmp.status === 'finished'", timeout=60)
    shown = run.page.evaluate("window.webmp.lens")
    ARTIFACTS.mkdir(exist_ok=True)
    run.page.locator("#lens").screenshot(path=str(ARTIFACTS / f"browser-lens-{browser.kind}.png"))
    run.screenshot(ARTIFACTS / f"browser-lens-page-{browser.kind}.png")
    inked = run.page.evaluate(
        """(() => { const c = document.getElementById('lens-canvas');
                    const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                    let n = 0; for (let i = 3; i < px.length; i += 4) n += px[i] > 0; return n; })()"""
    )
    web = RunDir(server.app.state.store.get(run.id).dir.path).read_histograms()
    slide = (
        "(k) => { const s = document.getElementById('lens-read'); s.value = k; "
        "s.dispatchEvent(new Event('input')); }"
    )
    # the history slider: the first read again, its zeros (ReLU) and flagged overflows as bars of their own
    assert (shown["read"], shown["reads"], shown["step"]) == (2, 3, 29)
    # every format's shares under each layer: the server's, from the stored counts (format_lens)
    assert shown["formats"] == [lay["formats"] for lay in lens_view(web[-1], len(web))["layers"]]
    assert all(set(f) == {"fp16", "bf16", "e4m3", "e5m2", "not_finite"} for f in shown["formats"])
    run.page.evaluate(slide, 0)
    first = run.page.evaluate("window.webmp.lens")
    assert (first["step"], first["read"]) == (9, 0)
    assert first["totals"] == [sum(lay["counts"]) for lay in web[0]["layers"]]
    for lay, edge in zip(web[0]["layers"], first["edges"], strict=True):
        assert (edge["zero"] > 0) == (lay["counts"][0] > 0) and (edge["overflow"] > 0) == (
            lay["counts"][-1] > 0
        )
    assert any(lay["counts"][0] > 0 for lay in web[0]["layers"])  # ReLU's zeros: the bar is drawn
    # the finished run opened again in another tab: its last stored read (GET .../histograms), and the
    # slider fetches the others (?read=k)
    reopened = browser.open(run.page_url)
    wait_page(reopened, "window.webmp.lens && window.webmp.lens.shown === 1", timeout=60)
    again = reopened.evaluate("window.webmp.lens")
    assert (again["step"], again["scale"], again["totals"]) == (29, shown["scale"], shown["totals"])
    reopened.evaluate(slide, 1)
    reopened.wait_for_function("window.webmp.lens.step === 19", timeout=30_000)
    assert reopened.evaluate("window.webmp.lens.read") == 1
    reopened.close()
    run.close_page()

    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(tmp_path / "no-tune-cache.json"))
    native = Trainer(
        cfg.model_copy(update={"f16": browser.f16_path}), out=tmp_path / "native", progress=False, log=None
    )
    native.run()
    nat = native.run_dir.read_histograms()
    spec, path = native.plan["histograms"], native.path
    numpy_counts = [
        grad_hist(
            unpack_h(native.runtime.read(lay["buffer"]), *lay["shape"], path),
            path,
            spec["e_min"],
            spec["e_max"],
        )
        for lay in spec["layers"]
    ]

    assert shown["shown"] == 3 and shown["step"] == 29 and all(shown["nonEmpty"])
    assert inked > 10_000  # the canvas has bars, bands and text drawn
    assert [h["step"] for h in web] == [9, 19, 29] == [h["step"] for h in nat]
    assert [h["scale"] for h in web] == [h["scale"] for h in nat]
    for line in web:
        counts = [lay["counts"] for lay in line["layers"]]
        assert [sum(c) for c in counts] == [r * c for r, c in (lay["shape"] for lay in spec["layers"])]
        assert shown["totals"] == [sum(c) for c in counts]
    assert [lay["counts"] for lay in nat[-1]["layers"]] == [c.tolist() for c in numpy_counts]
    if browser.kind == "lavapipe":
        assert web == nat
        return
    for w, n in zip(web, nat, strict=True):
        for wl, nl in zip(w["layers"], n["layers"], strict=True):
            moved = np.abs(np.array(wl["counts"]) - np.array(nl["counts"])).sum() / 2
            assert moved <= 0.01 * sum(nl["counts"]), (w["step"], wl["name"], moved)


def test_page_refuses_a_plan_beyond_the_adapter_limits(server, browser):
    """The plan says it needs more than the adapter allows (the server's answer is edited on the
    way): the page refuses it with a clear message before downloading the blob."""
    run = server.create_run(TrainConfig(**SMALL, steps=10))
    page = browser.browser.new_page()
    blob_requests = []

    page.route(re.compile(r"/plan\?"), plan_beyond_limits)
    page.route(
        re.compile(r"/blob\?"), lambda route: (blob_requests.append(route.request.url), route.continue_())
    )
    page.goto(run.page_url)
    wait_page(page, "window.webmp.status === 'failed'", timeout=120)
    error = page.evaluate("window.webmp.error")
    assert "does not fit" in error and "maxStorageBufferBindingSize" in error and str(2**40) in error
    assert page.locator("#status").inner_text().count("does not fit") == 1
    info = run.info()
    assert info["status"] == "failed" and "maxStorageBufferBindingSize" in info["message"]
    assert not blob_requests
    page.close()


def matmul_forms_plan(path: str):
    """A plan with one kernel of every matmul form a plan can use on `path`: each variant on each
    core (and the register cores with 16-row blocks and B_PAIRS), with fixed sizes in the
    transposes and activations the models use, and with run-time sizes (tiny sizes: it is
    compiled, not run)."""
    from webmp import ops
    from webmp.engine.plan import PlanBuilder

    pb = PlanBuilder(path)
    n = 8
    for name in ("A", "B", "Zprev", "C_h"):
        pb.h(name, n, n)
    pb.f32("bias", (n,), "other")
    pb.f32("C_f32", (n, n), "other")
    pb.u32("flags", (4,), "other")
    forms = 0
    shapes = [{"core": core, "WG_X": 8, "WG_Y": 8, "TM": 4, "TN": 4, "BK": 8} for core in ops.MATMUL_CORES]
    # the register cores' 16-row blocks with B read two words a load (B's rows are 4 words here)
    shapes += [{"core": c, "WG_X": 8, "WG_Y": 2, "TM": 16, "TN": 8, "B_PAIRS": 1} for c in ("reg", "reg_sg")]
    for variant in ops.MATMUL_VARIANTS:
        for shape in shapes:
            for runtime_dims in (0, 1):
                tiles = dict(shape)
                if runtime_dims:
                    tiles["RUNTIME_DIMS"] = 1
                # every transpose at fixed sizes; run-time sizes change the index math only, not
                # the loads: one transpose there (a third less to compile, ~50 s on SwiftShader)
                for trans_a, trans_b, act in ((0, 0, 2), (1, 0, 0), (0, 1, 1))[: 3 - 2 * runtime_dims]:
                    kw = dict(
                        A="A", B="B", M=n, N=n, K=n, trans_a=trans_a, trans_b=trans_b, a_act=act, tiles=tiles
                    )
                    kw["C"] = "C_f32" if variant in ("matmul_wgrad", "matmul_logits") else "C_h"
                    if variant in ("matmul_fwd", "matmul_logits"):
                        kw["bias"] = "bias"
                    if variant == "matmul_dgrad":
                        kw.update(Zprev="Zprev", out_act=2)
                    ops.matmul(pb, "forms", variant, **kw)
                    forms += 1
    return pb.kernel_plan(state="flags", metrics="flags"), bytes(pb.blob), forms


def test_every_matmul_form_compiles_in_the_browser(server, browser):
    """The browser's compiler (Tint) checks what naga does not, e.g. that a barrier is only reached
    in uniform control flow: every matmul form (variant x core x fixed or run-time sizes x
    transposes) compiles there and makes a pipeline, on the browser's f16 path and on fp32."""
    page = browser.browser.new_page()
    page.goto(server.url + "/")
    for path in (browser.f16_path, "fp32"):
        plan, blob, forms = matmul_forms_plan(path)
        made = page.evaluate(
            """async ([plan, blob]) => {
              const {Runner, openGPU} = await import('/runner.js');
              const gpu = await openGPU();
              const raw = Uint8Array.from(atob(blob), (c) => c.charCodeAt(0)).buffer;
              try {
                const text = (n) => fetch('/shaders/' + n).then((x) => x.text());
                const r = await Runner.create(gpu, plan, raw, text);
                return {pipelines: Object.keys(r.pipelines).length};
              } catch (e) { return {error: e.message}; }
            }""",
            [plan, base64.b64encode(blob).decode()],
        )
        assert made == {"pipelines": len(plan["kernels"])}, (path, made)
        assert len(plan["kernels"]) == forms  # no two forms share a kernel: each was compiled
    page.close()


def test_device_loss_is_reported(server, browser):
    run = server.create_run(TrainConfig(**SMALL, steps=5000, log_every=10))
    page = browser.open(run.page_url)
    wait_page(page, "window.webmp.records >= 10")
    page.evaluate("window.webmp.runner.device.destroy()")
    wait_page(page, "window.webmp.status === 'failed'", timeout=120)
    assert "device was lost" in page.evaluate("window.webmp.error")
    info = run.info()
    assert info["status"] == "failed" and "device was lost" in info["message"]
    assert len(on_disk(server, run)) >= 10  # what was received is kept
    page.close()


def test_stop_button_keeps_every_step_run(server, browser):
    """Stop: the page stops at its next metrics read (so every step it ran is recorded), uploads a
    checkpoint there, and the run is `stopped`; Resume continues it from that checkpoint."""
    run = server.create_run(TrainConfig(**SMALL, steps=100_000, log_every=20, checkpoint_every=0))
    page = browser.open(run.page_url)
    wait_page(page, "window.webmp.records >= 20")
    page.click("#stop")
    wait_page(page, "window.webmp.status === 'stopped'", timeout=120)
    info = run.info()
    recs = on_disk(server, run)
    assert info["status"] == "stopped" and info["checkpoint_step"] == len(recs) > 20 and len(recs) % 20 == 0
    assert [r["step"] for r in recs] == list(range(len(recs)))
    assert page.locator("#start").inner_text() == "Start"  # Start would train a new run
    wait_resume_offered(page, run.id)
    # Resume, in the same tab, then stop again
    page.click("#resume")
    wait_page(page, f"window.webmp.status === 'running' && window.webmp.records >= {len(recs) + 20}")
    page.click("#stop")
    wait_page(page, "window.webmp.status === 'stopped'", timeout=120)
    again = on_disk(server, run)
    assert len(again) > len(recs) and [r["step"] for r in again] == list(range(len(again)))
    assert same(again[: len(recs)], recs) and run.info()["checkpoint_step"] == len(again)
    page.close()


def test_page_tunes_its_matmuls_and_runs_on_the_choice(server, browser, tmp_path, monkeypatch):
    """The page's tuning pass (web/tune.js, webmp/tune/page.py) for the LayerNorm MLP, two tile
    choices per shape class: every class gets a verdict, no choice gives wrong results on this
    adapter, the server keeps them under the page's adapter key; then the row kernels' form
    (both forms computed the same bytes here, the faster is kept). A run started afterwards asks
    for its plan with that key and runs on the tuned tiles and form. Every core and form gives
    the default's bits, so its records are the default plan's natively (bit for bit on lavapipe)."""
    from webmp.engine.tiles import TileTable
    from webmp.ops import ROW_FORMS

    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(tmp_path / "tune.json"))
    page = browser.open(server.url + "/")
    page.wait_for_function("!document.getElementById('tune').disabled", timeout=60_000)
    assert page.evaluate("window.webmp.tune.tuned") == 0
    page.select_option("#cfg-model", "mlp-ln")
    page.fill("#tune-candidates", "2")
    page.click("#tune")
    wait_page(page, "window.webmp.tune.status !== 'running' && window.webmp.tune.status !== 'idle'")
    tune = page.evaluate("window.webmp.tune")
    assert tune["status"] == "done", tune["error"]
    assert tune["verdicts"] and all(v["tried"] == 2 and v["wrong"] == [] for v in tune["verdicts"])
    assert all(v["tiles"] is not None and v["gflops"] > 0 for v in tune["verdicts"])
    assert tune["tuned"] == len(tune["verdicts"])
    [rows] = tune["forms"]
    assert rows["what"] == "rows" and rows["identical"] and rows["form"] in ROW_FORMS, rows
    assert rows["form"] == min(rows["seconds"], key=rows["seconds"].get)
    assert TileTable.for_adapter(tune["key"]).row_kernels == rows["form"]
    said = page.locator("#tune-status").inner_text()
    assert (
        f"rows: {rows['form']}" in said
        and f"tuned {tune['tuned']} of {len(tune['verdicts'])} shape classes" in said
    )
    # the speed against the default tiles, as measured: the median and the best of the ratios
    ratios = sorted(v["gflops"] / v["default_gflops"] for v in tune["verdicts"] if v["default_gflops"])
    assert tune["speedups"] == pytest.approx(ratios, rel=1e-12) and ratios
    assert f"median {ratios[len(ratios) // 2]:.2f}× the default tiles' speed, best {ratios[-1]:.2f}×" in said
    assert (
        f"tuned on this adapter ({tune['tuned']} shape classes; rows: {rows['form']})"
        in page.locator("#gpu-info").inner_text()
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"browser-tune-{browser.kind}.png"), full_page=True)
    page.close()

    cfg = TrainConfig(model="mlp-ln", steps=20, log_every=10, checkpoint_every=0)
    plan_urls = []
    run = server.create_run(cfg)
    page = browser.browser.new_page()
    page.on("request", lambda r: plan_urls.append(r.url) if "/plan?" in r.url else None)
    page.goto(run.page_url)
    wait_page(page, "window.webmp.status === 'finished'")
    assert plan_urls and all(f"tiles={tune['key']}" in u for u in plan_urls)
    summary = run.wait()
    assert summary["matmul_tiles"] == TileTable.for_adapter(tune["key"]).describe()
    assert summary["matmul_tiles"].startswith(f"tuned ({tune['tuned']} shape classes cached)")
    web = on_disk(server, run)
    nat, _ = native_run(cfg, browser, tmp_path / "native", monkeypatch)
    assert_like_native(web, nat, browser)


@pytest.mark.slow
def test_gradient_accumulation_in_the_page_trains_as_natively(server, browser, tmp_path, monkeypatch):
    """--grad-accum 2 in the page: the plan's train_step holds both micro-batches and the update,
    which the page replays as any other program (one submit a step); the curve is the native
    run's (assert_like_native), through a loss scale that backs off and grows."""
    cfg = TrainConfig(
        **{**SMALL, "batch_size": 16}, grad_accum=2, steps=16, log_every=4, checkpoint_every=0,
        init_scale=2.0**24, growth_interval=3,
    )  # fmt: skip
    run = server.create_run(cfg, browser=browser)
    summary = run.wait(timeout=TIMEOUT)
    recs = on_disk(server, run)
    assert [r["step"] for r in recs] == list(range(16))
    assert summary["micro_batches"] == 2 and summary["effective_batch"] == 32
    log = run.page.evaluate("document.getElementById('log').innerText")
    assert "gradient accumulation: 2 micro-batches of 16 an optimizer step (effective batch 32)" in log
    assert any(r["skipped"] for r in recs) and len({r["scale"] for r in recs}) > 2
    nat, _ = native_run(cfg, browser, tmp_path / "native", monkeypatch)
    assert_like_native(recs, nat, browser)
    run.close_page()


@pytest.mark.slow
def test_the_memory_levers_in_the_page_train_as_natively(server, browser, tmp_path, monkeypatch):
    """A tiny 2-block GPT with --grad-accum 2 and --recompute blocks in the page against the same run
    natively: lavapipe in Chromium and in wgpu-py the same bits; SwiftShader within the tolerances
    test_browser_gpt.py derives for the GPT (its divisions an ulp apart), scale and skips exact."""
    cfg = TrainConfig(
        model="gpt", n_layer=2, d_model=32, n_head=2, context=16, batch_size=2, grad_accum=2,
        recompute="blocks", steps=12, log_every=4, checkpoint_every=0, val_tokens=256,
    )  # fmt: skip
    run = server.create_run(cfg, browser=browser)
    summary = run.wait(timeout=TIMEOUT)
    web = on_disk(server, run)
    assert summary["micro_batches"] == 2 and summary["effective_batch"] == 4
    nat, nsum = native_run(cfg, browser, tmp_path / "native", monkeypatch)
    assert [r["step"] for r in web] == [r["step"] for r in nat] == list(range(12))
    if browser.kind == "lavapipe":
        assert same(web, nat) and summary["val_loss"] == nsum["val_loss"]
    else:
        wl, nl = np.array([r["loss"] for r in web]), np.array([r["loss"] for r in nat])
        np.testing.assert_allclose(wl[:10], nl[:10], rtol=1e-5)
        np.testing.assert_allclose(wl, nl, rtol=1e-4)
        for k in ("scale", "skipped", "found_inf"):
            assert [r[k] for r in web] == [r[k] for r in nat], k
    run.close_page()
