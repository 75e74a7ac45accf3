"""The built-in MLPs as networks of layers (webmp.nn.mlp.mlp_network; their plan webmp/models/mlp.py's
MLPNet): the MLP's parameters are the network's (names, shapes, working copies, weight decay), its
plan draws PyTorch's default init times init_gain in the layers' order from the seed (at gain 1 the
network's own draw, bit for bit), and the same network given as a file (model 'net', under its own
buffer names) trains to the MLP's curve bit for bit from the same seed.

That the MLPs' plans are the ones they had when their dispatches were listed by hand (plan JSON and
blob) is scripts/fingerprint.py's comparison, run before and after the change.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from webmp.config import TrainConfig
from webmp.data.text import load_training_data
from webmp.models import build_plan
from webmp.models.common import ModelBuilder
from webmp.models.mlp import MLPNet
from webmp.nn import Network
from webmp.nn.mlp import mlp_names, mlp_network

HIDDEN = [24, 16]


def masters(plan, blob) -> dict[str, np.ndarray]:
    """The parameters' initial f32 masters in the plan's blob, by name."""
    buffers = {b["name"]: b for b in plan["buffers"]}
    out = {}
    for p in plan["params"]:
        at = buffers[p["master"]]["init"]
        out[p["name"]] = np.frombuffer(blob, np.float32, at["bytes"] // 4, at["offset"]).reshape(p["shape"])
    return out


@pytest.mark.parametrize("model", ["mlp", "mlp-ln"])
def test_the_mlp_network_has_the_mlps_parameters(model):
    """The MLP's parameters, in its order, are the network's under mlp_names: the same shapes, a
    working copy for the matrices (the weights) only, weight decay for them only."""
    cfg = TrainConfig(model=model, hidden=HIDDEN, act="relu")
    data = load_training_data(cfg)
    net = mlp_network(data.features, HIDDEN, data.classes, "relu", model == "mlp-ln")
    shapes, names = net.param_shapes(), mlp_names(len(HIDDEN), model == "mlp-ln")
    assert list(names) == list(shapes)
    mb = ModelBuilder(cfg, "native")
    MLPNet(mb, data)
    assert [p["name"] for p in mb.params] == list(names.values())
    for p, (path, shape) in zip(mb.params, shapes.items(), strict=True):
        assert tuple(p["shape"]) == shape.shape, path
        assert (p["copy"] is not None) == shape.matrix == p["decay"] == p["name"].startswith("W"), path
    want = ["W0", "b0", "W1", "b1", "W2", "b2"]
    if model == "mlp-ln":
        want = ["W0", "b0", "ln_g0", "ln_b0", "W1", "b1", "ln_g1", "ln_b1", "W2", "b2"]
    assert list(names.values()) == want
    # a preset, but a network a file could hold: it validates as one and comes back the same
    again = Network.from_json(json.dumps(net.model_dump()))
    assert again == net and again.trace() == net.trace()


@pytest.mark.parametrize("model", ["mlp", "mlp-ln"])
def test_the_plan_draws_pytorch_init_times_the_gain(model):
    """The initial masters: each linear layer's weight [in, out] then bias, uniform in
    +-init_gain / sqrt(fan_in) from numpy's generator seeded by cfg.seed, drawn in layer order;
    LayerNorm gains 1, shifts 0. At gain 1 they are the draws of the network itself (model net)."""
    cfg = TrainConfig(model=model, hidden=HIDDEN, seed=11, init_gain=0.5)
    data = load_training_data(cfg)
    got = masters(*build_plan(cfg, data, "native"))
    rng, dims = np.random.default_rng(11), [data.features, *HIDDEN, data.classes]
    want = {}
    for l in range(3):
        bound = 0.5 / math.sqrt(dims[l])
        want[f"W{l}"] = rng.uniform(-bound, bound, (dims[l], dims[l + 1])).astype(np.float32)
        want[f"b{l}"] = rng.uniform(-bound, bound, dims[l + 1]).astype(np.float32)
        if model == "mlp-ln" and l < 2:
            want[f"ln_g{l}"], want[f"ln_b{l}"] = np.ones(dims[l + 1]), np.zeros(dims[l + 1])
    assert list(got) == list(want)
    for name, value in want.items():
        assert np.array_equal(got[name], value), name

    at_one = masters(*build_plan(cfg.model_copy(update={"init_gain": 1.0}), data, "native"))
    net = mlp_network(data.features, HIDDEN, data.classes, "gelu", model == "mlp-ln")
    drawn = masters(*build_plan(TrainConfig(model_spec=net, seed=11), data, "native"))
    names = mlp_names(len(HIDDEN), model == "mlp-ln")
    assert list(drawn) == list(names)
    for path, value in drawn.items():
        assert np.array_equal(at_one[names[path]], value), path
    assert not np.array_equal(got["W1"], at_one["W1"])


@pytest.mark.parametrize(
    "model,precision,act",
    [("mlp-ln", "mixed", "gelu"), pytest.param("mlp", "fp32", "relu", marks=pytest.mark.slow)],
)
def test_the_mlp_as_a_network_file_trains_to_the_mlps_curve_bit_for_bit(tmp_path, model, precision, act):
    """mlp_network's spec, trained as model 'net' (its own buffer names: layers.k.y, d_...) from
    the same seed, gives the MLP's logged losses, scales and gradient norms and its test accuracy:
    the same draws, dispatches and roundings."""
    from webmp.train.loop import Trainer

    common = dict(steps=24, batch_size=16, log_every=4, checkpoint_every=0, precision=precision, seed=5)
    spec = mlp_network(64, HIDDEN, 10, act, model == "mlp-ln").model_dump()
    curves = []
    for name, cfg in (
        ("mlp", TrainConfig(model=model, hidden=HIDDEN, act=act, **common)),
        ("net", TrainConfig(model_spec=spec, **common)),
    ):
        t = Trainer(cfg, out=tmp_path / name, progress=False, log=None)
        t.run()
        summary = json.loads((t.run_dir.path / "summary.json").read_text())
        curves.append(
            [(r["step"], r["loss"], r["scale"], r.get("grad_norm")) for r in t.run_dir.read_metrics()]
            + [summary["test_correct"], summary["test_accuracy"], summary["skipped_steps"]]
        )
    assert curves[0] == curves[1]
    assert len(curves[0]) == 24 + 3 and curves[0][-1] == 0  # every step read, none skipped
