"""Sampling an fp8 run (webmp/models/net_sample.py with webmp/models/fp8.py): the sampling plan casts
where the training plan's evaluation casts, at the scales the run's checkpoint holds. Its logits
against the float64 reference quantising at the same points (gpt_loss_and_grads(fp8=)); the
one-position program's against the window's, token by token (test_sample_cache's lockstep); a
trained fp8 run's checkpoint scales through `webmp sample`'s loading."""

from __future__ import annotations

import numpy as np
from kernel_cases import enlarged_gpt_params
from test_sample_cache import GPT_T, VOCAB, V, expect_rows, lockstep

from webmp import ops
from webmp.config import TrainConfig
from webmp.engine.runtime import Runtime, default_gpu
from webmp.models import build_sample_plan
from webmp.sample.job import load_run
from webmp.testing import reference as ref
from webmp.train.loop import Trainer

D, H, L = 16, 2, 2
CFG = TrainConfig(model="gpt", n_layer=L, d_model=D, n_head=H, context=GPT_T, precision="fp8", batch_size=1)
NAMES = [f"{w}{l}" for l in range(L) for w in ("Wqkv", "Wo", "W1", "W2")]  # the slots' layers, in order
SCALES = {w: (2 - i % 2, 1, 14) for i, w in enumerate(NAMES)}  # input, weight, grad (unused here)
FP8_SCALE = np.array([e for w in NAMES for e in SCALES[w]], np.int32)


def test_sampled_logits_are_the_quantised_models():
    """The window program's logits of the last prompt position against float64 with the casts at
    FP8_SCALE: within the bf16 paths' rounding (f32 sums that tip a store or a cast), far from the
    model without the casts."""
    params = enlarged_gpt_params(V, D, L, H, GPT_T, 3)
    prompt = [1, 4, 2, 7, 0]
    plan, blob = build_sample_plan(
        CFG, VOCAB, "bf16", params=params, prompt=prompt, tokens=1, temperature=0.0, seed=0,
        fp8_scale=FP8_SCALE,
    )  # fmt: skip
    rt = Runtime(plan, blob, default_gpu())
    assert np.frombuffer(rt.read("fp8_scale"), np.int32).tolist() == FP8_SCALE.tolist()
    rt.run("sample_step")
    got = np.frombuffer(rt.read("logits"), np.float32).reshape(-1, V)[len(prompt) - 1]
    w = np.asarray(prompt, np.int64)[None]
    kw = dict(
        n_layer=L, n_head=H, tie_head=True, grads=False, store="bf16", attn_scale=ops.attention_scale(D // H)
    )
    want = ref.gpt_loss_and_grads(params, w, np.zeros_like(w), fp8=SCALES, **kw)[2]["logits"][-1]
    plain = ref.gpt_loss_and_grads(params, w, np.zeros_like(w), **kw)[2]["logits"][-1]
    err, contrast = np.abs(got - want).max(), np.abs(got - plain).max()
    print(f"fp8 sampled logits: vs quantised {err:.3g}, vs unquantised {contrast:.3g}")
    assert err <= 2.0**-6 * np.abs(want).max() < contrast


def test_fp8_rows_are_its_windows(gpu):
    params = enlarged_gpt_params(V, D, L, H, GPT_T, 24)
    for i, prompt in enumerate([[4], [0, 3, 5]]):
        kw = dict(fp8_scale=FP8_SCALE)
        seen = lockstep(CFG, params, prompt, 10, 0.8, 5 + i, "bf16", gpu, GPT_T, **kw)
        assert seen["row_tokens"] == expect_rows(len(prompt), 10, GPT_T)


def test_a_trained_fp8_runs_scales_reach_its_sampler(tmp_path):
    cfg = CFG.model_copy(update={"steps": 6, "batch_size": 2, "log_every": 3, "val_tokens": 64})
    Trainer(cfg, out=tmp_path / "run", progress=False, log=None).run()
    _, _, _, scale = load_run(tmp_path / "run")
    assert scale is not None and scale.shape == (3 * len(NAMES),) and scale.any()
