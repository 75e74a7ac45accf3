"""Gradients of networks of webmp.nn layers: the float64 model (webmp.testing.reference.net) against
central finite differences of its own loss, then one engine step's gradients against that model.

- Finite differences in float64, h = 1e-6 relative to the entry: truncation ~h^2 and cancellation
  ~1e-16 / h leave ~1e-10 of the tensor's largest gradient; 1e-6 is the bound (ReLU and max-pool
  kinks sit farther than h from random inputs with probability ~1 - 1e-5 per entry).
- The engine against float64, normwise per tensor as tests/models/test_gradients.py (whose
  reasoning the bounds follow): fp32 within 2^-14; mixed within 2 U16 per f16 store on the longest
  path from the input to a gradient (its forward values and its backward deltas), counted per
  network below. On the f16 paths a max pool's winner is the engine's own (read from its argmax
  buffer): values that differ in float64 can tie once stored in f16 (in the issue's CNN a fifth of
  the windows tie after ReLU), and routing a gradient to the other pixel is a choice, not an error
  (the choice itself is checked against the stored values in tests/kernels/test_conv.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from webmp.config import TrainConfig
from webmp.data.tables import batch_rows
from webmp.engine.state import decode_state
from webmp.models import build_plan
from webmp.models.net import channels_last
from webmp.nn import Network
from webmp.presets import EXAMPLE_CNN
from webmp.testing import reference as ref
from webmp.testing.probe import cached_runtime
from webmp.testing.reference.net import net_loss, net_loss_and_grads

CNN = EXAMPLE_CNN  # conv 3x3 16, relu, maxpool 2, residual (conv 3x3 16, relu), flatten, linear 10
# odd channels (pixel re-lays), stride 2 with padding, an average pool at stride 1, a 1x1 conv,
# a bias-less conv, max pooling with padding, LayerNorm with its own eps after flatten
DEEP_CNN = {
    "input": [1, 8, 8],
    "layers": [
        {"type": "conv2d", "out": 5, "kernel": 3, "stride": 2, "padding": 1}, {"type": "gelu"},
        {"type": "avgpool2d", "kernel": 2, "stride": 1},
        {"type": "residual", "layers": [{"type": "conv2d", "out": 5, "kernel": 1}, {"type": "tanh"}]},
        {"type": "residual", "layers": [{"type": "conv2d", "out": 5, "kernel": 3, "padding": 1,
                                         "bias": False}]},
        {"type": "maxpool2d", "kernel": 3, "stride": 2, "padding": 1},
        {"type": "flatten"}, {"type": "layernorm", "eps": 1e-3}, {"type": "linear", "out": 10},
    ],
}  # fmt: skip
# RMSNorm and SiLU, a residual block, and a residual of a residual whose layers pass x through
# (y = x + (x + x) = 3x: its in-place add must not alias its input)
RES_MLP = {
    "input": [64],
    "layers": [
        {"type": "linear", "out": 24}, {"type": "rmsnorm"}, {"type": "silu"},
        {"type": "residual", "layers": [{"type": "linear", "out": 24}, {"type": "tanh"},
                                        {"type": "dropout", "p": 0.0}]},
        {"type": "residual", "layers": [{"type": "residual", "layers": [{"type": "dropout", "p": 0.0}]}]},
        {"type": "rmsnorm", "eps": 1e-4}, {"type": "linear", "out": 10, "bias": False},
    ],
}  # fmt: skip
# activations fused into the linear layer after them (applied on load, their gradient on store),
# the first one on the data itself, one inside a residual block, and one that is not (relu before a
# residual block)
FUSED_MLP = {
    "input": [64],
    "layers": [
        {"type": "tanh"}, {"type": "linear", "out": 24}, {"type": "gelu"}, {"type": "linear", "out": 24},
        {"type": "layernorm"}, {"type": "relu"},
        {"type": "residual", "layers": [{"type": "linear", "out": 20}, {"type": "silu"},
                                        {"type": "linear", "out": 24}]},
        {"type": "tanh"}, {"type": "linear", "out": 10},
    ],
}  # fmt: skip
# f16 stores on the longest path (forward values, then the backward deltas back to the first layer)
STORES = {"cnn": 14, "deep-cnn": 22, "res-mlp": 16, "fused-mlp": 16}
NETS = {"cnn": CNN, "deep-cnn": DEEP_CNN, "res-mlp": RES_MLP, "fused-mlp": FUSED_MLP}
TOL_F32 = 2.0**-14


def params_of(net: Network, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {n: rng.normal(0.0, 0.5, p.shape) for n, p in net.param_shapes().items()}


@pytest.mark.parametrize("name", list(NETS))
def test_the_float64_model_matches_finite_differences(name, digits):
    net = Network.from_dict(NETS[name])
    params = params_of(net)
    x, y = channels_last(digits.train_x[:6].astype(np.float64), net.in_shape), digits.train_y[:6]
    _, grads = net_loss_and_grads(net, params, x, y)
    rng = np.random.default_rng(2)
    for pname, g in grads.items():
        assert np.abs(g).max() > 0, f"{pname}: no gradient at all"
        for flat in rng.choice(g.size, size=min(6, g.size), replace=False):
            idx = np.unravel_index(flat, g.shape)
            h = 1e-6 * max(1.0, abs(params[pname][idx]))
            up, down = dict(params), dict(params)
            up[pname], down[pname] = params[pname].copy(), params[pname].copy()
            up[pname][idx] += h
            down[pname][idx] -= h
            fd = (net_loss(net, up, x, y) - net_loss(net, down, x, y)) / (2 * h)
            assert abs(fd - g[idx]) <= 1e-6 * np.abs(g).max(), f"{pname}{list(idx)}: {g[idx]} vs {fd}"


def test_a_residual_of_a_pass_through_triples_its_input():
    net = Network.from_dict(
        {"input": [4], "layers": [{"type": "residual", "layers": [{"type": "residual", "layers": [
            {"type": "dropout", "p": 0.0}]}]}, {"type": "linear", "out": 2, "bias": False}]}
    )  # fmt: skip
    W = np.eye(4)[:, :2]
    x = np.arange(8.0).reshape(2, 4)
    _, g = net_loss_and_grads(net, {"layers.1.weight": W}, x, np.array([0, 1]))
    _, g3 = net_loss_and_grads(
        Network.from_dict({"input": [4], "layers": [{"type": "linear", "out": 2, "bias": False}]}),
        {"layers.0.weight": W}, 3 * x, np.array([0, 1]),
    )  # fmt: skip
    np.testing.assert_allclose(g["layers.1.weight"], g3["layers.0.weight"])


# the CNN and the fused MLP in the fast tier; the deeper CNN and the residual MLP slow
@pytest.mark.parametrize(
    "name", ["cnn", "fused-mlp", *(pytest.param(n, marks=pytest.mark.slow) for n in ("deep-cnn", "res-mlp"))]
)
def test_one_step_gradients_match_the_float64_model(name, path, gpu, digits):
    net = Network.from_dict(NETS[name])
    cfg = TrainConfig(
        model_spec=net, batch_size=8, steps=10, warmup=0, schedule="constant",
        precision="fp32" if path == "fp32" else "mixed",
    )  # fmt: skip
    plan, blob = build_plan(cfg, digits, path)
    rt = cached_runtime(plan, blob, gpu)

    def read(name, shape):
        return np.frombuffer(rt.read(name), np.float32)[: int(np.prod(shape))].reshape(shape)

    params = {p["name"]: read(p["master"], p["shape"]).astype(np.float64) for p in plan["params"]}
    scale = decode_state(rt.read("state"))["scale"]
    rt.run("train_step")
    grads = {p["name"]: read(p["grad"], p["shape"]).astype(np.float64) / scale for p in plan["params"]}
    loss = decode_state(rt.read("state"))["loss"]
    rows = batch_rows(0, cfg.batch_size, len(digits.train_x), cfg.seed)
    x = channels_last(digits.train_x[rows].astype(np.float64), net.in_shape)
    # the pools' choices the engine made (f16 values tie where float64's do not), on f16 paths
    pools = [t.path for t in net.trace() if t.layer.type == "maxpool2d"] if path != "fp32" else []
    argmax = {p: np.frombuffer(rt.read(f"{p}.argmax"), np.uint32).astype(np.int64) for p in pools}
    loss64, g64 = net_loss_and_grads(net, params, x, digits.train_y[rows], argmax)
    assert set(grads) == set(g64)
    tol = TOL_F32 if path == "fp32" else 2 * STORES[name] * ref.U16
    errors = {k: float(np.abs(grads[k] - g64[k]).max() / np.abs(g64[k]).max()) for k in g64}
    print(f"{path} {name}: worst normwise error {max(errors.values()):.3g} (bound {tol:.3g})")
    assert max(errors.values()) <= tol, f"{path} {name}: normwise errors {errors} > {tol:.3g}"
    assert abs(loss - loss64) <= tol * loss64, f"{path} {name}: loss {loss} != {loss64}"
