"""A network's parameters as the state_dict of its equivalent PyTorch Sequential (webmp.nn.torch_layout)
and `--init-weights` given such a state_dict: the names and shapes; the conversions against a
float64 numpy forward in each layout (fast, no torch); the refusals, one line naming the tensor and
its expected shape; and against real torch models through the engine's own forward (slow: torch and
the GPU), both directions.

Bounds: the numpy forwards are float64, so the two layouts agree to ~1e-15 relative (a wrong
permutation errs by O(1)); the engine's fp32 forward against torch's in float64 errs by its own f32
rounding: measured at most 2.4e-6 of the largest logit, on the residual over flattened features
(its norms divide by small spreads), where torch's own f32 forward errs by 1.7e-6: within 1e-5
(a transposed kernel or an unpermuted linear errs by about 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from webmp.config import TrainConfig
from webmp.data.tables import load_digits
from webmp.models import build_plan
from webmp.nn import Network
from webmp.nn.torch_layout import flatten_perm, from_torch, to_torch, torch_shapes
from webmp.presets import EXAMPLE_CNN
from webmp.train.checkpoint import load_initial_weights

CNN = EXAMPLE_CNN  # conv 3x3 16, relu, maxpool 2, residual (conv 3x3 16, relu), flatten, linear 10
# three channels (odd: the engine re-lays the input one row a pixel), flatten -> layernorm -> linear
CNN3 = {
    "input": [3, 6, 6],
    "layers": [
        {"type": "conv2d", "out": 4, "kernel": 3, "padding": 1}, {"type": "relu"},
        {"type": "residual", "layers": [{"type": "conv2d", "out": 4, "kernel": 3, "padding": 1},
                                        {"type": "tanh"}]},
        {"type": "avgpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "layernorm"},
        {"type": "linear", "out": 5},
    ],
}  # fmt: skip
# a residual block over flattened (permuted) features: its last linear, followed by an RMSNorm and a
# block of its own without a linear, must give its output in the block input's order
RES_FLAT = {
    "input": [2, 4, 4],
    "layers": [
        {"type": "conv2d", "out": 6, "kernel": 3, "padding": 1}, {"type": "maxpool2d", "kernel": 2},
        {"type": "flatten"},
        {"type": "residual", "layers": [
            {"type": "layernorm"}, {"type": "linear", "out": 16}, {"type": "gelu"},
            {"type": "linear", "out": 24, "bias": False}, {"type": "rmsnorm"},
            {"type": "residual", "layers": [{"type": "rmsnorm"}, {"type": "silu"}]}]},
        {"type": "silu"}, {"type": "linear", "out": 5},
    ],
}  # fmt: skip
# the same vector layers from an image input, for the numpy forwards (no convolution)
VEC_FLAT = {"input": [2, 3, 4], "layers": [{"type": "flatten"}, *RES_FLAT["layers"][3:]]}


def test_torch_names_drop_the_layers_segments_and_shapes_are_torchs():
    assert torch_shapes(Network.from_dict(CNN)) == {
        "0.weight": (16, 1, 3, 3), "0.bias": (16,), "3.0.weight": (16, 16, 3, 3), "3.0.bias": (16,),
        "5.weight": (10, 256), "5.bias": (10,),
    }  # fmt: skip


def test_flatten_perm_maps_webmps_hwc_features_to_torchs_chw():
    C, H, W = 2, 3, 4
    image = np.arange(C * H * W).reshape(C, H, W)  # each value its (c, h, w) index
    webmp = image.transpose(1, 2, 0).reshape(-1)  # channels-last, as the GPU holds it
    assert (flatten_perm(C, H, W) == webmp).all()


def _random_state(net: Network, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s) for n, s in torch_shapes(net).items()}


def _forward(layers, x, w, prefix, torch_layout: bool):
    """float64 forward of vector layers (flatten a no-op on x given flat) in either layout."""
    for i, layer in enumerate(layers):
        name = f"{prefix}{i}" if torch_layout else f"{prefix}layers.{i}"
        kind = layer["type"]
        if kind == "linear":
            W = w[f"{name}.weight"]
            x = x @ (W.T if torch_layout else W) + (w[f"{name}.bias"] if layer.get("bias", True) else 0)
        elif kind in ("layernorm", "rmsnorm"):
            centred = x - x.mean(1, keepdims=True) if kind == "layernorm" else x
            eps = 1e-5 if kind == "layernorm" else np.finfo(np.float32).eps
            x = centred / np.sqrt((centred**2).mean(1, keepdims=True) + eps) * w[f"{name}.weight"]
            x = x + w[f"{name}.bias"] if kind == "layernorm" else x
        elif kind == "residual":
            x = x + _forward(layer["layers"], x, w, f"{name}.", torch_layout)
        elif kind == "gelu":
            x = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
        elif kind == "silu":
            x = x / (1 + np.exp(-x))
        else:
            assert kind == "flatten", kind
    return x


def test_a_state_dict_converted_computes_what_torch_computes_in_webmps_layout():
    """Flatten -> residual block (layernorm, linear, gelu, linear, rmsnorm, residual block) -> silu ->
    linear: torch's weights on torch's (c, h, w) features give what the converted weights give on
    webmp's (h, w, c) ones, and the conversion round-trips bit for bit both ways."""
    net = Network.from_dict(VEC_FLAT)
    state = _random_state(net)
    ours = from_torch(net, state)
    images = np.random.default_rng(1).standard_normal((5, *net.in_shape))
    theirs = _forward(VEC_FLAT["layers"], images.reshape(5, -1), state, "", torch_layout=True)
    got = _forward(VEC_FLAT["layers"], images.transpose(0, 2, 3, 1).reshape(5, -1), ours, "", False)
    np.testing.assert_allclose(got, theirs, rtol=1e-12, atol=1e-12)
    assert all((to_torch(net, ours)[k] == v).all() for k, v in state.items())
    assert all((from_torch(net, to_torch(net, ours))[k] == v).all() for k, v in ours.items())


def _one_line(fn, *args) -> str:
    with pytest.raises(ValueError) as err:
        fn(*args)
    text = str(err.value)
    assert len(text.splitlines()) == 1, text
    return text


def test_a_missing_extra_or_misshapen_tensor_is_refused_naming_it_and_its_shape():
    net = Network.from_dict(CNN)
    state = _random_state(net)
    without = {k: v for k, v in state.items() if k != "3.0.weight"}
    assert _one_line(from_torch, net, without) == (
        "torch state_dict: lacks 3.0.weight [16, 16, 3, 3] (layers.3.layers.0 (conv2d)) (torch's layout)"
    )
    assert (
        "torch state_dict: 9.weight is no parameter of this network; its 6 are: 0.weight [16, 1, 3, 3]"
        in (_one_line(from_torch, net, {**state, "9.weight": state["5.bias"]}))
    )
    webmp_shaped = {**state, "5.weight": state["5.weight"].T}
    assert _one_line(from_torch, net, webmp_shaped) == (
        "torch state_dict: 5.weight has shape [256, 10]; layers.5 (linear) expects [10, 256] (torch's layout)"
    )
    ours = from_torch(net, state)
    assert _one_line(to_torch, net, {**ours, "layers.0.weight": state["0.weight"]}) == (
        "webmp weights: layers.0.weight has shape [16, 1, 3, 3]; layers.0 (conv2d) expects [9, 16] "
        "(webmp's layout)"
    )


def test_a_tied_head_shares_the_embeddings_weight_under_both_names():
    """A tied head's weight is the embedding's in the state_dict, as torch's state_dict() of a twin
    with head.weight = embedding.weight lists it; read back from both names, from either alone
    (safetensors.torch.save_model keeps one of a shared pair), and refused when the two differ."""
    from webmp.nn.gpt import gpt_network

    net = gpt_network(11, 8, 1, 2, 4, True)
    rng = np.random.default_rng(0)
    ours = {k: rng.standard_normal(p.shape).astype(np.float32) for k, p in net.param_shapes().items()}
    state = to_torch(net, ours)
    head = f"{len(net.layers) - 1}.weight"
    assert head not in torch_shapes(net) and head in state
    assert np.array_equal(state[head], state["0.weight"]) and np.array_equal(
        state["0.weight"], ours["layers.0.weight"]
    )
    for given in (
        state,
        {k: v for k, v in state.items() if k != head},
        {k: v for k, v in state.items() if k != "0.weight"},
    ):
        back = from_torch(net, given)
        assert set(back) == set(ours) and all(np.array_equal(back[k], v) for k, v in ours.items())
    other = {**state, head: state[head] + 1}
    assert _one_line(from_torch, net, other) == (
        f"torch state_dict: {head} (the tied head's weight) differs from 0.weight (the embedding's); a tied "
        "head shares the embedding's weight"
    )
    untied = gpt_network(11, 8, 1, 2, 4, False)
    assert f"{len(untied.layers) - 1}.weight" in torch_shapes(untied)


def _dry_plan(spec):
    cfg = TrainConfig(model_spec=spec, batch_size=8)
    return cfg, build_plan(cfg, load_digits(), "fp32", dry=True)[0]


def test_init_weights_takes_a_torch_state_dict_told_by_its_names(tmp_path):
    """The equivalent Sequential's state_dict (torch names, f64 here) gives the converted weights
    as float32; a file in webmp's names still reads as before."""
    cfg, plan = _dry_plan(CNN)
    state = _random_state(cfg.model_spec)
    save_file(state, tmp_path / "torch.safetensors")
    got = load_initial_weights(tmp_path / "torch.safetensors", plan, cfg.model_spec)
    want = from_torch(cfg.model_spec, state)
    assert list(got) == [p["name"] for p in plan["params"]]
    assert all(got[k].dtype == np.float32 and (got[k] == want[k].astype(np.float32)).all() for k in want)
    save_file({k: v.astype(np.float32) for k, v in want.items()}, tmp_path / "webmp.safetensors")
    again = load_initial_weights(tmp_path / "webmp.safetensors", plan, cfg.model_spec)
    assert all((again[k] == got[k]).all() for k in got)


@pytest.mark.parametrize(
    "change,message",
    [
        (
            lambda s: {k: v for k, v in s.items() if k != "5.bias"},
            r"lacks 5\.bias \[10\] \(layers\.5 \(linear\)\)",
        ),
        (
            lambda s: {**s, "5.weight": s["5.weight"].T},
            r"5\.weight has shape \[256, 10\]; layers\.5 \(linear\) expects \[10, 256\] \(torch's layout\)",
        ),
        (lambda s: {**s, "7.weight": s["5.bias"]}, r"7\.weight is no parameter of this network"),
        (lambda s: {**s, "3.0.bias": np.zeros(16, np.int64)}, r"3\.0\.bias is int64, not floating point"),
        (lambda s: {**s, "0.bias": np.full(16, np.nan)}, r"0\.bias holds 16 non-finite values"),
    ],
    ids=["missing", "webmp-shaped", "unknown", "integer", "non-finite"],
)
def test_init_weights_refuses_a_torch_state_dict_that_does_not_fit_naming_the_tensor(
    tmp_path, change, message
):
    cfg, plan = _dry_plan(CNN)
    save_file(change(_random_state(cfg.model_spec)), tmp_path / "w.safetensors")
    with pytest.raises(
        ValueError, match=r"init_weights: .*w\.safetensors \(a torch state_dict\): " + message
    ) as e:
        load_initial_weights(tmp_path / "w.safetensors", plan, cfg.model_spec)
    assert len(str(e.value).splitlines()) == 1


# --- against real torch models, through the engine's forward (slow: torch and the GPU) -----------


def _engine_logits(tmp_path, net: Network, init: str | None, name: str):
    """The engine's fp32 evaluation forward on a small table's test split (8 rows: one batch), from
    the weights of `init` (or drawn from the seed): (test inputs, logits, the run's masters)."""
    from webmp.train.loop import Trainer

    rng = np.random.default_rng(1)
    data = tmp_path / f"{name}.npz"
    np.savez(data, x=rng.standard_normal((40, int(np.prod(net.in_shape)))), y=np.arange(40) % net.classes)
    cfg = TrainConfig(
        model_spec=net, data=str(data), init_weights=init, precision="fp32", batch_size=8, steps=1,
        checkpoint_every=0,
    )  # fmt: skip
    t = Trainer(cfg, out=tmp_path / name, progress=False, log=None)
    assert len(t.data.test_x) == 8
    t.evaluate()
    logits = np.frombuffer(t.runtime.read("logits"), np.float32).reshape(8, net.classes)
    masters = {
        p["name"]: np.frombuffer(t.runtime.read(p["master"]), np.float32).reshape(p["shape"])
        for p in t.plan["params"]
    }
    return t.data.test_x, logits, masters


def _chw(net: Network, x: np.ndarray):
    """A table's rows (an image's values in (c, h, w) order, as torch.flatten gives them: the engine
    moves them channels-last itself) as the NCHW batch torch takes (float64)."""
    import torch

    return torch.tensor(x.reshape(-1, *net.in_shape).astype(np.float64))


def _check(logits, reference, what: str) -> None:
    worst = float(np.abs(logits - reference).max() / np.abs(reference).max())
    print(f"{what}: worst logit difference {worst:.3g} of the largest")
    assert worst <= 1e-5, (what, worst)


@pytest.mark.slow  # imports torch; two engine builds a network
@pytest.mark.parametrize("spec", ["cnn3", "res_flat"])
def test_torch_and_webmp_compute_the_same_logits_from_each_others_weights(tmp_path, spec):
    """torch -> webmp: a torch model's state_dict as --init-weights gives the engine torch's logits.
    webmp -> torch: the weights the engine drew, converted (to_torch) into the torch model, give
    the engine's logits."""
    torch = pytest.importorskip("torch")
    from parity import sequential, state_arrays

    net = Network.from_dict(CNN3 if spec == "cnn3" else RES_FLAT)
    torch.manual_seed(0)
    model = sequential(net).double()
    state = state_arrays(model)
    save_file({k: v.astype(np.float32) for k, v in state.items()}, tmp_path / "torch.safetensors")
    x, logits, _ = _engine_logits(tmp_path, net, str(tmp_path / "torch.safetensors"), "from-torch")
    model.load_state_dict(
        {k: torch.tensor(v.astype(np.float32).astype(np.float64)) for k, v in state.items()}
    )
    with torch.no_grad():
        _check(logits, model(_chw(net, x)).numpy(), f"{spec}: torch's weights in webmp")
    x, logits, drawn = _engine_logits(tmp_path, net, None, "drawn")
    model.load_state_dict({k: torch.tensor(v.astype(np.float64)) for k, v in to_torch(net, drawn).items()})
    with torch.no_grad():
        _check(logits, model(_chw(net, x)).numpy(), f"{spec}: webmp's weights in torch")
