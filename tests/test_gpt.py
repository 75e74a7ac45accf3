"""The GPT's training step (webmp/models/gpt.py) against the float64 reference
(webmp.reference.gpt_loss_and_grads), on a tiny model: V = 11 characters, d_model 12, 2 heads of 6,
2 layers, context 7, 3 windows (R = 21 loss rows).

One train_step runs on a fresh plan with injected parameters; the g_* buffers then hold the
gradients of the initial parameters on the first windows (data.window_starts at window 0) times
the loss scale (1024 on the f16 paths, 1 for fp32); the optimizer reads them but does not change
them. Errors are normwise per tensor, max |got - want| / max |want| (tests/test_gradients.py).

Two comparisons:
- against the reference with store=path (rounded where the engine stores): the engine differs
  only by f32 arithmetic (sums of <= 84 terms, exp/tanh) and by the rare f16 store that such a
  difference tips over a rounding boundary (one f16 ulp of one term), which later stages carry
  along. TOL_STORED = 2^-9 on the f16 paths (a quarter of an f16 ulp, relative to the tensor's
  largest entry), 2^-16 for fp32. Measured on lavapipe: MEASURED_STORED.
- against exact float64 (store=None): TOL_F32 = 2^-14 for fp32 as the MLP's test; for the f16
  paths each gradient sits downstream of a few dozen f16 stores (two residual streams of 2 layers
  with 14 rounding points each), so 2^-7 (the MLP's bound) is scaled by 4: 2^-5. Measured:
  MEASURED_EXACT.
Native and emulated f16 store the same values, so their gradients agree bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from webmp import ops
from webmp import reference as ref
from webmp.config import TrainConfig
from webmp.corpus import tokenize
from webmp.state import decode_state

V, D, H, L, T, BATCH = 11, 12, 2, 2, 7, 3
TOL_STORED = {"native": 2.0**-9, "emulated": 2.0**-9, "fp32": 2.0**-16}
TOL_EXACT = {"native": 2.0**-5, "emulated": 2.0**-5, "fp32": 2.0**-14}
MEASURED_STORED: dict[str, float] = {}
MEASURED_EXACT: dict[str, float] = {}


def tiny_corpus():
    rng = np.random.default_rng(5)
    text = "".join(rng.choice(list("abcdefghij "), size=300))
    corpus = tokenize(text, "tiny", "test", "0")
    assert corpus.vocab_size == V
    return corpus


def tiny_params(tie_head: bool) -> dict:
    """gpt_init's parameters, enlarged so that attention is far from uniform and every LayerNorm
    parameter and bias is non-trivial."""
    rng = np.random.default_rng(1)
    p = ref.gpt_init(V, D, L, H, T, rng, tie_head)
    for k, v in p.items():
        if v.ndim == 2:
            p[k] = (v * 15).astype(np.float32)
        elif "_g" in k:
            p[k] = (1 + 0.3 * rng.standard_normal(v.shape)).astype(np.float32)
        else:
            p[k] = (0.2 * rng.standard_normal(v.shape)).astype(np.float32)
    return p


def run_step(path, gpu, tie_head=True):
    from webmp.inspect import cached_runtime
    from webmp.models.gpt import build_gpt_plan

    corpus = tiny_corpus()
    precision = "fp32" if path == "fp32" else "mixed"
    cfg = TrainConfig(
        model="gpt", batch_size=BATCH, precision=precision, init_scale=1024.0, log_every=1, steps=10,
        warmup=0, schedule="constant",
    )  # fmt: skip
    params = tiny_params(tie_head)
    plan, blob = build_gpt_plan(
        cfg, corpus, path, n_layer=L, n_head=H, d_model=D, context=T, tie_head=tie_head, params=params
    )
    rt = cached_runtime(plan, blob, gpu)
    scale = decode_state(rt.read("state"))["scale"]
    rt.run("train_step")

    def read(name, shape):
        return np.frombuffer(rt.read(name), np.float32)[: int(np.prod(shape))].reshape(shape)

    grads = {p["name"]: read(p["grad"], p["shape"]).astype(np.float64) for p in plan["params"]}
    loss = decode_state(rt.read("state"))["loss"]
    idx, targets = ref.gather_windows(corpus.train, 0, BATCH, T, cfg.seed)
    return params, idx.reshape(BATCH, T), targets.reshape(BATCH, T), scale, grads, loss


def worst_relative(got: dict, want: dict) -> dict:
    return {k: float(np.abs(got[k] - want[k]).max() / np.abs(want[k]).max()) for k in want}


def reference(params, idx, targets, store, scale, tie_head=True):
    return ref.gpt_loss_and_grads(
        params, idx, targets, n_layer=L, n_head=H, tie_head=tie_head, store=store, loss_scale=scale,
        attn_scale=ops.attention_scale(D // H),
    )  # fmt: skip


@pytest.mark.parametrize("tie_head", [True, False], ids=["tied", "untied"])
def test_gpt_gradients(path, gpu, tie_head):
    params, idx, targets, scale, grads, loss = run_step(path, gpu, tie_head)
    assert scale == (1.0 if path == "fp32" else 1024.0)
    loss_s, g_s, _ = reference(params, idx, targets, path, scale, tie_head)
    assert set(grads) == set(g_s)
    stored = worst_relative(grads, g_s)
    loss64, g64, _ = reference(params, idx, targets, None, 1.0, tie_head)
    exact = worst_relative({k: v / scale for k, v in grads.items()}, g64)
    print(f"{path} tied={tie_head}: vs stored {max(stored.values()):.3g}, vs exact {max(exact.values()):.3g}")
    print(f"  loss {loss} stored {loss_s} exact {loss64}")
    assert max(stored.values()) <= TOL_STORED[path], f"{path}: normwise errors {stored}"
    assert max(exact.values()) <= TOL_EXACT[path], f"{path}: normwise errors {exact}"
    assert abs(loss - loss_s) <= TOL_STORED[path] * loss_s
    assert abs(loss - loss64) <= TOL_EXACT[path] * loss64
