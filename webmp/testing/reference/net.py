"""A float64 numpy model of a webmp.nn network (model 'net'): the loss of a batch and the gradient of
every parameter, in webmp's names and layouts (Linear weights [in, out], Conv2d weights rows in
(kh, kw, c) order, images as pixel rows [B*H*W, C], Flatten in (h, w, c) order), built from the
kernel references so that one definition serves the kernels' tests and the whole network's.

Dropout is the identity here (p = 0, or evaluation): its mask is tested bit for bit on its own
(reference.layers.dropout_keep)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...nn import layers as L
from ...nn.network import Network, Residual
from . import conv as C
from .kernels import act_fwd, act_grad, layernorm_fwd, softmax_xent
from .layers import RMSNORM_EPS, rmsnorm_bwd, rmsnorm_fwd, rmsnorm_wgrad

Backward = Callable[[np.ndarray], np.ndarray]


def net_loss_and_grads(
    net: Network, params: dict, x, y, argmax: dict[str, np.ndarray] | None = None
) -> tuple[float, dict[str, np.ndarray]]:
    """(mean softmax cross-entropy of the batch, d loss / d every parameter), x [B, features] as the
    GPU reads it (an image network's rows channels-last), y [B] integer labels. argmax: the winning
    pixel rows of max-pool layers by path, instead of the float64 values' (an engine that stores
    the pooled values in f16 sees ties where float64 does not: a discrete choice, given here)."""
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    B = len(x)
    h = np.asarray(x, np.float64)
    if len(net.in_shape) == 3:
        h = h.reshape(-1, net.in_shape[0])
    logits, back = _sequence(net.layers, "", h, net.in_shape, B, params, grads, argmax or {})
    loss_rows, dlogits, _ = softmax_xent(logits, np.asarray(y), counted=B)
    back(np.asarray(dlogits, np.float64))
    return float(np.sum(loss_rows) / B), grads


def net_loss(net: Network, params: dict, x, y) -> float:
    return net_loss_and_grads(net, params, x, y)[0]


def _sequence(layers, prefix: str, h, shape, B: int, params, grads, argmax) -> tuple[np.ndarray, Backward]:
    backs = []
    for i, layer in enumerate(layers):
        path = f"{prefix}layers.{i}"
        out_shape = layer.out_shape(path, shape)
        h, back = _layer(layer, path, h, shape, out_shape, B, params, grads, argmax)
        backs.append(back)
        shape = out_shape

    def backward(dy):
        for back in reversed(backs):
            dy = back(dy)
        return dy

    return h, backward


def _image(shape, B: int) -> dict:
    return {"B": B, "C": shape[0], "H": shape[1], "W": shape[2]}


def _layer(layer, path, x, shape, out_shape, B, params, grads, argmax) -> tuple[np.ndarray, Backward]:
    p = {k.removeprefix(path + "."): v for k, v in params.items() if k.rsplit(".", 1)[0] == path}

    def add(name: str, g) -> None:
        grads[f"{path}.{name}"] += g

    if isinstance(layer, Residual):
        f, back_f = _sequence(layer.layers, f"{path}.", x, shape, B, params, grads, argmax)
        return x + f, lambda dy: dy + back_f(dy)
    if isinstance(layer, L.Linear):
        W = p["weight"]
        y = x @ W + (p["bias"] if layer.bias else 0.0)

        def linear_back(dy):
            add("weight", x.T @ dy)
            if layer.bias:
                add("bias", dy.sum(0))
            return dy @ W.T

        return y, linear_back
    if isinstance(layer, L.Conv2d):
        k, s, pad = layer.kernel, layer.stride, layer.padding
        g = {**_image(shape, B), "KH": k, "KW": k, "SH": s, "SW": s, "PH": pad, "PW": pad}
        P = C.im2col(x, **g)
        W = p["weight"]
        y = P @ W + (p["bias"] if layer.bias else 0.0)

        def conv_back(dy):
            add("weight", P.T @ dy)
            if layer.bias:
                add("bias", dy.sum(0))
            return C.col2im(dy @ W.T, **g)

        return y, conv_back
    if isinstance(layer, L.MaxPool2d):
        w = {**_image(shape, B), "K": layer.kernel, "S": layer.step, "P": layer.padding}
        y, winners = C.maxpool_fwd(x, **w)
        if path in argmax:
            winners = np.asarray(argmax[path]).reshape(winners.shape)
            y = x[winners, np.arange(x.shape[1])]
        return y, lambda dy: C.maxpool_bwd(dy, winners, **_image(shape, B))
    if isinstance(layer, L.AvgPool2d):
        w = {**_image(shape, B), "K": layer.kernel, "S": layer.step, "P": layer.padding}
        return C.avgpool_fwd(x, **w), lambda dy: C.avgpool_bwd(dy, **w)
    if isinstance(layer, L.Flatten):
        n = out_shape[0]
        return x.reshape(B, n), lambda dy: dy.reshape(x.shape)
    if isinstance(layer, (L.ReLU, L.GELU, L.SiLU, L.Tanh)):
        return act_fwd(x, layer.type), lambda dy: dy * act_grad(x, layer.type)
    if isinstance(layer, L.Dropout):
        return x, lambda dy: dy
    if isinstance(layer, L.LayerNorm):
        gamma, beta = p["weight"], p["bias"]
        y, stats = layernorm_fwd(x, gamma, beta, layer.eps)
        xhat = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + layer.eps)

        def ln_back(dy):
            add("weight", (dy * xhat).sum(0))
            add("bias", dy.sum(0))
            g = dy * gamma
            rstd = 1.0 / np.sqrt(x.var(1, keepdims=True) + layer.eps)
            return rstd * (g - g.mean(1, keepdims=True) - xhat * (g * xhat).mean(1, keepdims=True))

        return y, ln_back
    if isinstance(layer, L.RMSNorm):
        gamma = p["weight"]
        eps = RMSNORM_EPS if layer.eps is None else layer.eps
        y, rstd = rmsnorm_fwd(x, gamma, eps)

        def rms_back(dy):
            add("weight", rmsnorm_wgrad(dy, x, rstd))
            return rmsnorm_bwd(dy, x, rstd, gamma)

        return y, rms_back
    raise TypeError(f"{path}: no reference for layer type {layer.type!r}")
