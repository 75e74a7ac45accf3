"""A tiny character GPT trained in the page, its curves against the same run natively, and the text
the page generates from it (the sample form) against `webmp sample`."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from browser_helpers import (
    ARTIFACTS,
    TIMEOUT,
    first_difference_is_a_tie,
    on_disk,
    page_sample,
    same,
    wait_page,
)

from webmp.config import TrainConfig
from webmp.sample.job import DEFAULT_SEED, DEFAULT_TEMPERATURE, DEFAULT_TOKENS

# A tiny character GPT on the default corpus (one block, d_model 32, 2 heads of 16, context 16, 4
# windows a step) for 20 steps, a checkpoint uploaded at step 10; the fields left out are the gpt
# defaults (MODEL_DEFAULTS: lr 2e-3, warmup 60, ...). val_tokens 1024: the evaluation is 16 chunks
# of 64 characters (the default 32768 would be 512). Its ~140 pipelines take ~35 s to compile here.
GPT = TrainConfig(
    model="gpt", n_layer=1, d_model=32, n_head=2, context=16, batch_size=4, steps=20, log_every=5,
    checkpoint_every=10, val_tokens=1024,
)  # fmt: skip


@pytest.fixture(scope="module")
def gpt_run(server, browser):
    """GPT trained by the page; what the server stored, what the page shows (the text it generated
    when the run finished included), and the transfers."""
    run = server.create_run(GPT, browser=browser)
    summary = run.wait(timeout=TIMEOUT)
    wait_page(run.page, "window.webmp.status === 'finished'", timeout=60)
    wait_page(run.page, "window.webmp.sampled >= 1")  # the sample the page generates at the end
    shown = run.page.evaluate(
        """({headline: document.getElementById('headline').innerText,
             baseline: document.getElementById('baseline').innerText,
             sampleHidden: document.getElementById('sample-box').hidden,
             sampleShown: document.getElementById('sample').innerText,
             promptShown: [...document.querySelectorAll('#sample mark')].map((m) => m.innerText),
             sampleFont: getComputedStyle(document.getElementById('sample')).fontFamily,
             sample: window.webmp.sample,
             fetches: performance.getEntriesByType('resource').filter((e) => /[/](plan|blob)[?]/.test(e.name))
               .map((e) => ({what: e.name.split('?')[0].split('/').pop(), bytes: e.encodedBodySize,
                             ms: e.duration}))})"""
    )
    ARTIFACTS.mkdir(exist_ok=True)
    shot = run.screenshot(ARTIFACTS / f"browser-gpt-{browser.kind}.png")
    path = server.app.state.store.get(run.id).dir.path
    yield dict(run=run, records=on_disk(server, run), summary=summary, shown=shown, shot=shot, dir=path)
    run.close_page()


def test_gpt_trains_in_the_browser(gpt_run, browser):
    """The page trains the GPT of the plan the server built on the default corpus (its ~3.7 M
    training characters are 15 MB of u32 in the blob) and reports the validation loss."""
    recs, summary, shown = gpt_run["records"], gpt_run["summary"], gpt_run["shown"]
    assert [r["step"] for r in recs] == list(range(GPT.steps))
    assert all(math.isfinite(r["loss"]) for r in recs)
    assert recs[0]["loss"] == pytest.approx(math.log(97), rel=0.05)  # 97 characters, near uniform at first
    assert summary["f16_path"] == browser.f16_path and summary["runtime"] == "browser"
    assert summary["test_count"] == GPT.val_tokens - 1  # characters predicted from the first 1024
    assert 0 < summary["val_loss"] < math.log(97) + 0.5
    assert summary["val_bits_per_char"] == pytest.approx(summary["val_loss"] / math.log(2))
    assert 4 < summary["unigram_bits_per_char"] < 7
    assert shown["headline"] == f"validation loss {summary['val_bits_per_char']:.3f} bits/char"
    assert shown["baseline"].startswith(f"{summary['val_loss']:.4f} nats per character; unigram baseline ")
    # the text generated at the end, with `webmp sample`'s defaults (the form shows them)
    sample = shown["sample"]
    assert sample["status"] == "done", sample
    assert (sample["prompt"], sample["tokens"], sample["temperature"], sample["seed"]) == (
        "", DEFAULT_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_SEED,
    )  # fmt: skip
    assert len(sample["text"]) == DEFAULT_TOKENS and sample["f16Path"] == browser.f16_path
    assert not shown["sampleHidden"] and shown["promptShown"] == [] and "monospace" in shown["sampleFont"]
    blob = next(f for f in shown["fetches"] if f["what"] == "blob")
    assert blob["bytes"] > 15e6  # the training split's tokens (measured: 0.1 s from 127.0.0.1)
    for name in ("summary.json", "curves.png", "checkpoint.safetensors"):
        assert (gpt_run["dir"] / name).is_file()
    assert gpt_run["shot"].stat().st_size > 10_000


def test_gpt_browser_and_native_curves_agree(gpt_run, browser, tmp_path, monkeypatch):
    """The same GPT config and seed natively through wgpu-py, on the browser's f16 path and the
    default matmul tiles, compared record by record (the reasoning of test_browser_e2e.py's MLP test).

    Measured (2 cores): lavapipe in Chromium and lavapipe in wgpu-py are bit-identical: all 20
    records, the summed validation loss and the next-character count. SwiftShader differs from
    lavapipe (emulated f16 on both) because it divides as a * (1/b): the warmup's lr, LR * (it + 1)
    / WARMUP in scaler.wgsl, comes out one f32 ulp above the correctly rounded quotient on most
    steps (17 of the 20 here, 1.5e-7 relative; WGSL allows 2.5 ulp for division). The losses of
    steps 0 and 1 are still identical, then the weights drift apart at f32 level: losses by
    <= 1.6e-6 relative on the first 10 steps and <= 2.5e-6 on any step, grad_norm by <= 3.7e-5 (a
    norm of gradients that differ in their
    last bits); the validation loss and the 286 of 1023 characters right are identical. Bounds:
      * lavapipe: exact;
      * other adapters: lr 1e-6 relative (a few f32 ulps, 6e-8 each); loss 1e-5 relative on the
        first 10 steps and 1e-4 on every step (~6x and 40x the measurement, far below the 4.9e-4
        of one f16 unit roundoff by which a different kernel, data order or f16 path moves step
        0's loss); grad_norm 1e-3; validation loss 1e-4; within 3 of the 1023 characters;
      * the loss scale and the skipped steps identical (no step comes near overflowing: 20
        clean steps at the initial scale on both).
    """
    from webmp.engine.tiles import TileTable
    from webmp.train.loop import Trainer

    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(tmp_path / "no-tune-cache.json"))  # default tiles
    cfg = GPT.model_copy(update={"f16": browser.f16_path})
    where = gpt_run["dir"].parent / f"native-gpt-{browser.kind}"
    native = Trainer(cfg, out=where, progress=False, log=None, tiles=TileTable())  # the page's tiles
    nsum = native.run()
    nat, web, wsum = native.run_dir.read_metrics(), gpt_run["records"], gpt_run["summary"]
    assert nsum["matmul_tiles"] == "default" and nsum["f16_path"] == wsum["f16_path"]
    assert [r["step"] for r in nat] == [r["step"] for r in web]
    if browser.kind == "lavapipe":
        assert same(web, nat)
        assert (wsum["val_loss"], wsum["test_correct"]) == (nsum["val_loss"], nsum["test_correct"])
        return
    column = {k: (np.array([r[k] for r in web]), np.array([r[k] for r in nat])) for k in nat[0]}
    np.testing.assert_allclose(*column["lr"], rtol=1e-6)
    wl, nl = column["loss"]
    np.testing.assert_allclose(wl[:10], nl[:10], rtol=1e-5)
    np.testing.assert_allclose(wl, nl, rtol=1e-4)
    np.testing.assert_allclose(*column["grad_norm"], rtol=1e-3)
    for k in ("scale", "skipped", "found_inf", "min_scale_event"):
        assert (column[k][0] == column[k][1]).all(), k
    assert wsum["val_loss"] == pytest.approx(nsum["val_loss"], rel=1e-4)
    assert abs(wsum["test_correct"] - nsum["test_correct"]) <= 3
    assert wsum["unigram_bits_per_char"] == nsum["unigram_bits_per_char"]


# What test_gpt_samples_equal_webmp_sample asks the page for after the run (the sample the page
# generated at the end, with the defaults, is compared too): greedy, and drawn at 0.8 with a seed.
SAMPLES = [
    dict(prompt="def ", tokens=120, temperature=0.0, seed=0),
    dict(prompt="import os\n\nclass ", tokens=120, temperature=0.8, seed=12345),
]


def test_gpt_samples_equal_webmp_sample(gpt_run, browser, tmp_path, monkeypatch):
    """The page's samples of the trained run (the one generated at the end with the defaults, a
    greedy one and one drawn at 0.8 with a seed, asked for with the form) equal
    `webmp.sample.replay.sample` on the run directory natively (wgpu-py on lavapipe), on the browser's f16
    path and the default matmul tiles (the server's plans have them).

    Both replay the same plan (the server builds it with webmp.sample.job, as `webmp sample`
    does), so a token differs only where the logits do. lavapipe in Chromium vs lavapipe in wgpu-py
    run the same driver: the texts must be identical (measured: identical). Another adapter
    (SwiftShader) computes the same kernels with f32 results an ulp apart (exp, division; an f16
    activation may round the other way), so its logits may differ by ~1e-6 relative, and a token can
    legitimately differ where two logits (greedy), or a cumulative probability and the draw's u
    (temperature), are that close: there the texts must agree up to the first difference and the
    native logits must show such a near tie (2^-6, a bound far above an ulp-level difference and
    far below the margins of ordinary draws). Measured on SwiftShader: identical texts."""
    from webmp.engine.tiles import TileTable
    from webmp.sample.replay import sample

    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(tmp_path / "no-tune-cache.json"))  # default tiles
    page = gpt_run["run"].page
    asked = [dict(prompt="", tokens=DEFAULT_TOKENS, temperature=DEFAULT_TEMPERATURE, seed=DEFAULT_SEED)]
    got = [gpt_run["shown"]["sample"]]
    for settings in SAMPLES:
        asked.append(settings)
        got.append(page_sample(page, **settings))
    ties = []
    for settings, web in zip(asked, got, strict=True):
        assert web["status"] == "done", web
        assert (web["prompt"], web["tokens"], web["temperature"], web["seed"]) == tuple(settings.values())
        native = sample(gpt_run["dir"], **settings, f16=browser.f16_path, tiles=TileTable())
        assert len(web["text"]) == len(native) == len(settings["prompt"]) + settings["tokens"]
        assert web["text"].startswith(settings["prompt"])
        if browser.kind == "lavapipe" or web["text"] == native:
            assert web["text"] == native, settings
        else:
            ties.append(first_difference_is_a_tie(
                gpt_run["dir"], settings["prompt"], native, web["text"], settings["temperature"],
                settings["seed"], browser.f16_path,
            ))  # fmt: skip
    print(f"{browser.kind}: {len(asked) - len(ties)} of {len(asked)} samples identical; {ties}")
    # lavapipe compiles at first dispatch: the sampler's kernels were compiled on more devices first
    compiled_on = re.search(r"\(compiled on (\d+) devices\)", page.locator("#sample-note").inner_text())
    assert (compiled_on is not None and int(compiled_on.group(1)) >= 2) == (browser.kind == "lavapipe")
    # the panel shows the last one: the prompt highlighted, then the generated characters
    shown = page.evaluate(
        """({marks: [...document.querySelectorAll('#sample mark')].map((m) => m.textContent),
             text: document.getElementById('sample').textContent})"""
    )
    assert shown == {"marks": [SAMPLES[-1]["prompt"]], "text": got[-1]["text"]}


def test_sample_form_shows_the_servers_one_line_errors(gpt_run):
    """Settings the server refuses (422) are shown under the form in its words; the page keeps
    working (the next sample succeeds)."""
    page = gpt_run["run"].page
    bad = page_sample(page, prompt='x = "\u2603"', tokens=5, temperature=0.8, seed=0)
    assert bad["status"] == "failed" and "outside the run's vocabulary" in bad["error"], bad
    assert "outside the run's vocabulary" in page.locator("#sample-note").inner_text()
    too_many = page_sample(page, prompt="x", tokens=5000, temperature=0.8, seed=0)
    assert too_many["status"] == "failed" and "tokens must be at most 2000" in too_many["error"]
    ok = page_sample(page, prompt="x", tokens=3, temperature=0.8, seed=0)
    assert ok["status"] == "done" and len(ok["text"]) == 4


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_bf16_and_fp8_gpt_in_the_browser_equal_native(server, browser, tmp_path, monkeypatch, precision):
    """`precision bf16` (and fp8, on bf16 storage, its casts and scales on the GPU) in the page: the
    bf16 prelude on the page's adapter, with or without shader-f16 (none needed), no loss scale (1
    throughout), against the same run natively with the page's default tiles. lavapipe: bit for
    bit (the same kernels on the same driver). SwiftShader:
    within the reasoning of test_gpt_browser_and_native_curves_agree (its divisions differ by an
    f32 ulp; the bounds there, 1e-5 on the first 10 losses, 1e-4 on all, hold for bf16 as the
    operands' rounding is the same integer arithmetic on both)."""
    from webmp.engine.tiles import TileTable
    from webmp.train.loop import Trainer

    cfg = GPT.model_copy(update={"precision": precision, "checkpoint_every": 0})
    run = server.create_run(cfg, browser=browser)
    wsum = run.wait(timeout=TIMEOUT)
    web = on_disk(server, run)
    run.close_page()
    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(tmp_path / "no-tune-cache.json"))
    native = Trainer(cfg, out=tmp_path / "native", progress=False, log=None, tiles=TileTable())
    nsum = native.run()
    nat = native.run_dir.read_metrics()
    assert wsum["f16_path"] == nsum["f16_path"] == "bf16" and wsum["precision"] == precision
    assert wsum.get("fp8") == nsum.get("fp8") and (precision == "fp8") == ("fp8" in wsum)
    assert {r["scale"] for r in web} == {1.0} and not any(r["skipped"] for r in web)
    if browser.kind == "lavapipe":
        assert same(web, nat) and wsum["val_loss"] == nsum["val_loss"]
        return
    wl, nl = np.array([r["loss"] for r in web]), np.array([r["loss"] for r in nat])
    np.testing.assert_allclose(wl[:10], nl[:10], rtol=1e-5)
    np.testing.assert_allclose(wl, nl, rtol=1e-4)


@pytest.mark.slow  # its own GPT plan's pipelines in the page
def test_fused_attention_gpt_in_the_browser_equals_native(server, browser, tmp_path, monkeypatch):
    """`attention fused` in the page: the plan's flash kernels (flash_fwd, flash_bwd_dot, _dkv, _dq)
    compile and run in Chromium, the runner interpreting them as any other kernel, against the same
    run natively with the page's default tiles. lavapipe: bit for bit (the same kernels on the same
    driver); SwiftShader: within the reasoning of test_gpt_browser_and_native_curves_agree (its
    divisions differ by an f32 ulp: 1e-5 on the losses here)."""
    from webmp.engine.tiles import TileTable
    from webmp.train.loop import Trainer

    cfg = GPT.model_copy(update={"attention": "fused", "steps": 4, "log_every": 2, "checkpoint_every": 0})
    run = server.create_run(cfg, browser=browser)
    wsum = run.wait(timeout=TIMEOUT)
    web = on_disk(server, run)
    page_log = run.page.evaluate("document.getElementById('log').innerText")
    run.close_page()
    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(tmp_path / "no-tune-cache.json"))
    native = Trainer(cfg, out=tmp_path / "native", progress=False, log=None, tiles=TileTable())
    assert "flash_fwd" in {k["entry"] for k in native.plan["kernels"]}
    nsum = native.run()
    nat = native.run_dir.read_metrics()
    assert len(web) == len(nat) == 4 and not any(r["skipped"] for r in web)
    # the form and why in both summaries and in the page's log, as the plan says them
    assert wsum["attention"] == nsum["attention"] == native.plan["attention"]
    assert wsum["attention"]["form"] == "fused" and wsum["attention"]["line"] in page_log
    if browser.kind == "lavapipe":
        assert same(web, nat) and wsum["val_loss"] == nsum["val_loss"]
        return
    np.testing.assert_allclose([r["loss"] for r in web], [r["loss"] for r in nat], rtol=1e-5)
