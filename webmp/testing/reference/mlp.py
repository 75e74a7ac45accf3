"""The engine's MLP in float64 (mlp_loss_and_grads): its loss and gradients, exact or with values
rounded where the engine stores them."""

from __future__ import annotations

import numpy as np

from ...engine.fp8 import quantise
from .kernels import act_fwd, act_grad, layernorm_bwd, layernorm_fwd, layernorm_wgrad, round_h, softmax_xent


def mlp_loss_and_grads(
    params: dict,
    x,
    y,
    *,
    act="gelu",
    ln: bool = False,
    scale: float = 1.0,
    store: str | None = None,
    eps: float = 1e-5,
    fp8: dict[int, tuple[int, int, int]] | None = None,
):
    """Mean softmax cross-entropy of the engine's MLP and its gradients, in float64.

    params: {name: array} as the plan names them (W{l} [in, out], b{l}, ln_g{l}, ln_b{l}).
    Gradients are multiplied by `scale`, as the engine's g_* buffers hold them. With store=path,
    values are rounded where the engine stores them in the activation format (inputs, weight
    copies, pre-activations, activations on load, LayerNorm outputs, backward deltas): the
    mixed-precision model of the computation with every other operation exact.
    fp8: {layer l: (e_input, e_weight, e_grad_output)} quantises those layers' matmul operands as
    `--precision fp8` does (webmp.engine.fp8.quantise at scale 2^e: the input, its fused
    activation applied, and the f32 master weight to E4M3, the output gradient to E5M2; the bias
    gradient from the unquantised one).
    """
    rnd = (lambda a: a) if store is None else (lambda a: round_h(a, store))
    fp8 = fp8 or {}

    def q8(a, l: int, k: int):
        return quantise(np.asarray(a, np.float32), fp8[l][k], "e5m2" if k == 2 else "e4m3").astype(np.float64)

    L = sum(1 for k in params if k.startswith("W"))
    W = [
        q8(params[f"W{l}"], l, 1) if l in fp8 else rnd(np.asarray(params[f"W{l}"], np.float64))
        for l in range(L)
    ]
    b = [np.asarray(params[f"b{l}"], np.float64) for l in range(L)]
    y = np.asarray(y, np.int64)

    inputs: list[np.ndarray] = []
    pre: list[np.ndarray] = []
    cache: list[tuple[np.ndarray, np.ndarray]] = []
    h = rnd(np.asarray(x, np.float64))
    for l in range(L):
        if l in fp8:  # the cast applies the activation in f32, then quantises
            h = q8(act_fwd(pre[-1], act) if l > 0 else h, l, 0)
        elif l > 0:
            h = rnd(act_fwd(pre[-1], act))
        inputs.append(h)
        z = h @ W[l] + b[l]
        if l == L - 1:
            logits = z
            break
        z = rnd(z)
        if ln:
            yl, stats = layernorm_fwd(z, params[f"ln_g{l}"], params[f"ln_b{l}"], eps)
            cache.append((z, stats))
            pre.append(rnd(yl))
        else:
            pre.append(z)

    loss_rows, d, _ = softmax_xent(logits, y, scale)
    d = rnd(d)
    grads = {}
    for l in reversed(range(L)):
        dq = q8(d, l, 2) if l in fp8 else d
        grads[f"W{l}"] = inputs[l].T @ dq
        grads[f"b{l}"] = d.sum(0)
        if l == 0:
            break
        d = rnd((dq @ W[l].T) * act_grad(pre[l - 1], act))
        if ln:
            z, stats = cache[l - 1]
            grads[f"ln_g{l - 1}"], grads[f"ln_b{l - 1}"] = layernorm_wgrad(d, z, stats)
            d = rnd(layernorm_bwd(d, z, stats, params[f"ln_g{l - 1}"]))
    return float(loss_rows.mean()), grads
