"""Networks of webmp.nn layers (model 'net'): the spec's checks, the layer table's shapes and
parameters, and training on the digits natively (as [64] vectors and as [1, 8, 8] images)."""

from __future__ import annotations

import json

import pytest

from webmp.cli import main as cli
from webmp.config import TrainConfig
from webmp.data.text import load_training_data
from webmp.models import build_plan
from webmp.nn import MAX_SPEC_BYTES, Network
from webmp.presets import EXAMPLE_CNN, EXAMPLE_DEEP_CNN

CNN = EXAMPLE_CNN  # conv 3x3 16, relu, maxpool 2, residual (conv 3x3 16, relu), flatten, linear 10
RES_MLP = {
    "input": [64],
    "layers": [
        {"type": "linear", "out": 64}, {"type": "rmsnorm"}, {"type": "silu"},
        {"type": "residual", "layers": [{"type": "linear", "out": 64}, {"type": "tanh"},
                                        {"type": "dropout", "p": 0.1}]},
        {"type": "layernorm"}, {"type": "linear", "out": 10, "bias": False},
    ],
}  # fmt: skip


def test_the_spec_of_the_issue_traces_to_its_shapes_and_parameters():
    net = Network.from_dict(CNN)
    got = [(t.path, t.layer.type, t.out_shape) for t in net.trace()]
    assert got == [
        ("layers.0", "conv2d", (16, 8, 8)), ("layers.1", "relu", (16, 8, 8)),
        ("layers.2", "maxpool2d", (16, 4, 4)), ("layers.3", "residual", (16, 4, 4)),
        ("layers.3.layers.0", "conv2d", (16, 4, 4)), ("layers.3.layers.1", "relu", (16, 4, 4)),
        ("layers.4", "flatten", (256,)), ("layers.5", "linear", (10,)),
    ]  # fmt: skip
    shapes = {n: p.shape for n, p in net.param_shapes().items()}
    assert shapes == {
        "layers.0.weight": (9, 16), "layers.0.bias": (16,), "layers.3.layers.0.weight": (144, 16),
        "layers.3.layers.0.bias": (16,), "layers.5.weight": (256, 10), "layers.5.bias": (10,),
    }  # fmt: skip


def _layers(*layers):
    return {"input": [1, 8, 8], "layers": list(layers)}


LIN = {"type": "linear", "out": 10}
FLAT = {"type": "flatten"}
BAD = {
    "unknown type": (_layers({"type": "conv3d"}, FLAT, LIN), "layers.0: unknown layer type 'conv3d'"),
    "no type": (_layers({"out": 3}, FLAT, LIN), "layers.0: a layer needs a type"),
    "shapes do not chain": (_layers(LIN), "layers.0 (linear): takes a vector [features], got [1, 8, 8]"),
    "zero size": (
        _layers({"type": "conv2d", "out": 0, "kernel": 3}, FLAT, LIN),
        "layers.0.out: Input should be",
    ),
    "negative size": (
        _layers({"type": "maxpool2d", "kernel": -2}, FLAT, LIN),
        "layers.0.kernel: Input should",
    ),
    "kernel past its input": (
        _layers({"type": "conv2d", "out": 4, "kernel": 9}, FLAT, LIN),
        "layers.0 (conv2d): kernel 9 is larger than its input [1, 8, 8] padded by 0",
    ),
    "residual changes the shape": (
        _layers({"type": "residual", "layers": [{"type": "maxpool2d", "kernel": 2}]}, FLAT, LIN),
        "layers.0 (residual): its layers make [1, 4, 4] of [1, 8, 8]",
    ),
    "nested shape error": (
        _layers({"type": "residual", "layers": [FLAT]}, FLAT, LIN),
        "layers.0 (residual): its layers make [64] of [1, 8, 8]",
    ),
    "last layer not linear": (
        _layers(FLAT, LIN, {"type": "relu"}),
        "the last layer (relu) must be a linear layer",
    ),
    "unknown field": (_layers(FLAT, {**LIN, "units": 3}), "layers.1.units: Extra inputs are not permitted"),
    "too deep": (
        _layers(
            json.loads('{"type": "residual", "layers": [' * 10 + '{"type": "relu"}' + "]}" * 10), FLAT, LIN
        ),
        "residual blocks nested 10 deep; at most 8",
    ),
    "far too deep": (  # past pydantic's recursion guard: still counted, in the same words
        _layers(
            json.loads('{"type": "residual", "layers": [' * 400 + '{"type": "relu"}' + "]}" * 400), FLAT, LIN
        ),
        "residual blocks nested 400 deep; at most 8",
    ),
    "input of two dims": ({"input": [8, 8], "layers": [LIN]}, "input [8, 8]: give [features] or an image"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_specs_are_refused_in_one_line_naming_the_layer(case):
    spec, message = BAD[case]
    with pytest.raises(ValueError) as err:
        Network.from_dict(spec)
    assert message in str(err.value) and len(str(err.value).splitlines()) == 1, str(err.value)


def test_a_spec_file_too_large_or_not_json_is_refused_before_parsing(tmp_path, capsys):
    big = tmp_path / "big.json"
    big.write_text(" " * (10 << 20))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for path, message in ((big, f"a network file is at most {MAX_SPEC_BYTES:,}"), (bad, "not JSON")):
        assert cli(["train", "--model-spec", str(path), "--steps", "1"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_a_network_for_other_data_is_refused_naming_both(digits):
    cfg = TrainConfig(model_spec={"input": [1, 4, 4], "layers": [FLAT, LIN]})
    with pytest.raises(
        ValueError, match=r"takes images \[1, 4, 4\] but the data digits holds images \[1, 8, 8\]"
    ):
        build_plan(cfg, digits, "fp32", dry=True)
    cfg = TrainConfig(model_spec={"input": [16], "layers": [LIN]})
    with pytest.raises(
        ValueError, match=r"takes input \[16\] \(16 values an example\) but the data digits has 64"
    ):
        build_plan(cfg, digits, "fp32", dry=True)
    cfg = TrainConfig(model_spec={"input": [64], "layers": [{"type": "linear", "out": 7}]})
    with pytest.raises(ValueError, match="last layer has 7 outputs but the data digits has 10 classes"):
        build_plan(cfg, digits, "fp32", dry=True)


def test_the_config_round_trips_through_json():
    """A run's config.json and checkpoint hold the network inline: a resume rebuilds the same one."""
    cfg = TrainConfig(model_spec=CNN)
    assert cfg.model == "net"
    again = TrainConfig(**json.loads(json.dumps(cfg.model_dump())))
    assert again == cfg and again.model_spec.trace() == cfg.model_spec.trace()
    with pytest.raises(ValueError, match="model net trains the network of model_spec"):
        TrainConfig(model="net")
    with pytest.raises(ValueError, match="model net trains the network of model_spec"):
        TrainConfig(model="mlp", model_spec=CNN)


DEEP_CNN = EXAMPLE_DEEP_CNN  # two residual blocks of two convolutions, a strided convolution
# (network, flags, accuracy floor, largest mixed-fp32 gap). The issue's CNN at train's defaults and a
# deeper one (two residual blocks of two convolutions, a strided convolution): >= 96 % in both
# precisions, within 0.5 point (measured: CNN 99.16 % both; deeper 96.94 / 96.66 %); the residual MLP
# (RMSNorm, SiLU, Tanh, dropout, LayerNorm, a bias-less head) >= 95 % within 1 point.
TRAINED = {
    "cnn": (CNN, [], 0.96, 0.005),
    "deep-cnn": (DEEP_CNN, ["--steps", "600", "--batch-size", "32"], 0.96, 0.005),
    "res-mlp": (RES_MLP, ["--steps", "400", "--batch-size", "32"], 0.95, 0.01),
}


@pytest.mark.slow  # two runs of each network: 30-90 s on a 2-core CPU adapter
@pytest.mark.parametrize("name", list(TRAINED))
def test_a_network_trains_on_the_digits_in_mixed_and_fp32(tmp_path, name):
    spec, flags, floor, gap = TRAINED[name]
    path = tmp_path / "net.json"
    path.write_text(json.dumps(spec))
    acc = {}
    for precision in ("mixed", "fp32"):
        out = tmp_path / precision
        args = ["--model-spec", str(path), *flags, "--quiet", "--precision", precision, "--out", str(out)]
        assert cli(["train", *args]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["skipped_steps"] == 0
        acc[precision] = summary["test_accuracy"]
    assert min(acc.values()) >= floor and abs(acc["mixed"] - acc["fp32"]) <= gap, acc


def test_the_plan_declares_each_layers_parameters_by_its_path(digits):
    cfg = TrainConfig(model_spec=CNN, batch_size=8)
    data = load_training_data(cfg)
    plan, _ = build_plan(cfg, data, "fp32", dry=True)
    assert [p["name"] for p in plan["params"]] == list(Network.from_dict(CNN).param_shapes())
    names = {b["name"] for b in plan["buffers"]}
    assert {"layers.2.argmax", "logits", "dlogits"} <= names
    # the convolutions read their inputs as patches (nothing kept); the residual one's input
    # gradient goes through a patch-gradient scratch [B*4*4, 3*3*16] (the first's input is the data)
    assert not any("patches" in n for n in names - {"conv_d_patches_128x144"})
    assert "conv_d_patches_128x144" in names


def test_the_convolutions_products_take_their_shape_classes_tiles(digits):
    """A convolution's matmuls (forward and weight gradient on its input read as patches, and the
    patch gradient dY Wᵀ) are in the plan's `matmuls` by their shapes, which both tuners time, and
    the tiles a table holds for their shape classes are what their kernels take."""
    from webmp.engine.tiles import TileTable, shape_class

    B = 8
    cfg = TrainConfig(model_spec=CNN, batch_size=B)
    data = load_training_data(cfg)
    implicit = [  # (M, N, K, trans_a, trans_b): layers.0, then the residual's convolution
        (B * 64, 16, 9, 0, 0), (9, 16, B * 64, 1, 0), (B * 16, 16, 144, 0, 0), (144, 16, B * 16, 1, 0),
    ]  # fmt: skip
    patch_grad = (B * 16, 144, 16, 0, 1)
    plan, _ = build_plan(cfg, data, "native", dry=True)
    shapes = {(m["M"], m["N"], m["K"], m["trans_a"], m["trans_b"]) for m in plan["matmuls"]}
    assert {*implicit, patch_grad} <= shapes
    tiles = {"core": "reg", "WG_X": 4, "WG_Y": 2, "TM": 8, "TN": 4}
    table = TileTable({shape_class("native", *s): tiles for s in implicit})
    plan, _ = build_plan(cfg, data, "native", table, dry=True)
    kernels = [k for k in plan["kernels"] if "matmul_a_patches.wgsl" in k["sources"]]
    assert sorted(k["entry"] for k in kernels) == ["matmul_fwd", "matmul_fwd", "matmul_wgrad", "matmul_wgrad"]
    for k in kernels:
        assert "matmul_reg.wgsl" in k["sources"], k["name"]
        assert {n: k["constants"][n] for n in ("WG_X", "WG_Y", "TM", "TN")} == {
            n: tiles[n] for n in ("WG_X", "WG_Y", "TM", "TN")
        }


# --- the layer table (webmp model, webmp train --dry-run) ----------------------------------------


def test_the_layer_table_counts_every_activation_once_and_sizes_them_per_precision():
    """Each row's bytes from the plan's buffers: a ReLU over [B*64, 16] pixels keeps its output and
    that output's gradient, 2 x B*64*16 values (2 bytes in mixed, 4 in fp32), and so does a
    convolution (it reads its input as patches: none kept); the residual convolution's patch
    gradient [B*16, 144] is scratch of its own row; the rows add up to the plan's own activation
    total in both precisions."""
    from webmp.models.summary import layer_table

    B = 8
    table = layer_table(Network.from_dict(CNN), B)
    rows = {r.path: r for r in table.rows}
    traced = [t.path for t in Network.from_dict(CNN).trace()]
    assert [r.path for r in table.rows] == ["(input)", *traced, "(shared)"]
    for path, values in (("layers.1", 2 * B * 64 * 16), ("layers.0", 2 * B * 64 * 16),
                         ("layers.3.layers.0", 2 * B * 16 * 16), ("(shared)", B * 16 * 144)):  # fmt: skip
        assert rows[path].activations == {"mixed": values * 2, "fp32": values * 4}, path
    assert rows["layers.3.layers.0"].params == 144 * 16 + 16 and rows["layers.3.layers.0"].depth == 1
    assert rows["layers.4"].out_shape == (256,) and rows["layers.4"].activations["mixed"] == 0
    assert table.totals["params"] == 5050
    for precision in ("mixed", "fp32"):
        total = table.totals["memory"][precision]["activations"]
        assert (
            table.totals["activations"][precision]
            == total
            == sum(r.activations[precision] for r in table.rows)
        )
    text = table.format()
    assert "layers.3.layers.0  conv2d     [8, 16, 4, 4]" in text and "activations mixed/fp32: 0.52" in text


def test_webmp_model_prints_the_table_and_refuses_what_does_not_fit(tmp_path, capsys):
    import numpy as np

    spec = tmp_path / "cnn.json"
    spec.write_text(json.dumps(CNN))
    assert cli(["model", str(spec), "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == [
        "layer",
        "type",
        "output",
        "shape",
        "params",
        "act.",
        "mixed",
        "act.",
        "fp32",
    ]
    assert "total" in out and "5,050" in out
    assert cli(["model", str(spec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["params"] == 5050
    np.savez(tmp_path / "rgb.npz", x=np.zeros((20, 3, 8, 8)), y=np.arange(20) % 10)
    assert cli(["model", str(spec), "--data", str(tmp_path / "rgb.npz")]) == 1
    err = capsys.readouterr().err
    assert "takes images [1, 8, 8] but the data rgb.npz holds images [3, 8, 8]" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_layers({"type": "conv3d"}, FLAT, LIN)))
    assert cli(["model", str(bad)]) == 2
    assert "layers.0: unknown layer type 'conv3d'" in capsys.readouterr().err


def test_train_dry_run_prints_the_table_and_trains_nothing(tmp_path, capsys):
    spec = tmp_path / "cnn.json"
    spec.write_text(json.dumps(CNN))
    out = tmp_path / "run"
    assert cli(["train", "--model-spec", str(spec), "--dry-run", "--out", str(out)]) == 0
    assert "layers.5  " in capsys.readouterr().out and not out.exists()


def test_images_from_an_npz_train_channels_last(tmp_path):
    """x [N, C, H, W] (here C = 3) is stored on the GPU one pixel's channels together: the data
    buffer holds each example's (h, w, c) values, and a network for other images is refused."""
    import numpy as np

    from webmp.data.tables import load_table

    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 3, 4, 5))
    np.savez(tmp_path / "rgb.npz", x=x, y=np.arange(30) % 4)
    data = load_table(tmp_path / "rgb.npz")
    assert data.image == (3, 4, 5) and data.features == 60
    spec = {"input": [3, 4, 5], "layers": [{"type": "conv2d", "out": 4, "kernel": 3}, FLAT,
                                             {"type": "linear", "out": 4}]}  # fmt: skip
    plan, blob = build_plan(TrainConfig(model_spec=spec, batch_size=4), data, "fp32")
    buf = next(b for b in plan["buffers"] if b["name"] == "train_x")
    stored = np.frombuffer(blob[buf["init"]["offset"] :][: buf["bytes"]], np.float32).reshape(-1, 60)
    want = data.train_x.reshape(-1, 3, 4, 5).transpose(0, 2, 3, 1).reshape(-1, 60)
    np.testing.assert_array_equal(stored, want)
    with pytest.raises(
        ValueError, match=r"takes images \[1, 6, 10\] but the data rgb.npz holds images \[3, 4, 5\]"
    ):
        build_plan(
            TrainConfig(model_spec={"input": [1, 6, 10], "layers": [FLAT, LIN]}), data, "fp32", dry=True
        )


def test_the_layer_table_of_a_token_network_adds_up_with_its_shared_scratch():
    """A token network's rows (its attention scores shared by layers of one head count in a row of
    their own) add up to the plan's activations; the embedding keeps its output and its gradient."""
    from webmp.models.summary import layer_table

    spec = {
        "input": {"tokens": 11, "context": 5},
        "layers": [{"type": "embedding", "dim": 8},
                   {"type": "residual", "layers": [{"type": "layernorm"},
                                                   {"type": "causal_self_attention", "heads": 2}]},
                   {"type": "linear", "out": 11}],
    }  # fmt: skip
    B = 3
    table = layer_table(Network.from_dict(spec), B)
    rows = {r.path: r for r in table.rows}
    assert rows["layers.0"].out_shape == (5, 8) and rows["layers.0"].params == 11 * 8 + 5 * 8
    assert rows["layers.0"].activations["fp32"] == 2 * B * 5 * 8 * 4
    assert rows["(shared)"].activations["fp32"] > 0
    for precision in ("mixed", "fp32"):
        assert table.totals["activations"][precision] == table.totals["memory"][precision]["activations"]
    assert json.loads(json.dumps(table.to_dict()))["input_shape"] == [5]


# mixed mlp (GELU) in the fast tier: the one case that fails with the fusion taken out (ReLU's
# gradient is exact, and fp32 stores round nothing)
@pytest.mark.parametrize(
    "model,precision",
    [("mlp", "mixed"), *(pytest.param(m, p, marks=pytest.mark.slow) for m, p in
                         (("mlp", "fp32"), ("mlp-ln", "mixed"), ("mlp-ln", "fp32")))],
)  # fmt: skip
def test_the_builtin_mlp_as_a_network_trains_to_its_curve_bit_for_bit(tmp_path, model, precision):
    """mlp and mlp-ln as networks (webmp.nn.mlp_network): their activations fused into the next
    linear layer's matmuls, the network's step is the MLP's dispatch for dispatch, so from the same
    initial weights every logged loss and scale is the same float."""
    import numpy as np
    from safetensors.numpy import save_file

    from webmp.nn import mlp_network
    from webmp.train.loop import Trainer

    hidden, act = [24, 16], "gelu" if model == "mlp" else "relu"
    rng = np.random.default_rng(0)
    dims, ln = [64, *hidden, 10], model == "mlp-ln"
    ours, theirs = {}, {}
    for l in range(3):
        k = l * (3 if ln else 2)
        W, b = rng.uniform(-0.3, 0.3, (dims[l], dims[l + 1])), rng.uniform(-0.1, 0.1, dims[l + 1])
        ours |= {f"W{l}": W, f"b{l}": b}
        theirs |= {f"layers.{k}.weight": W, f"layers.{k}.bias": b}
        if ln and l < 2:
            g, beta = rng.uniform(0.5, 1.5, dims[l + 1]), rng.uniform(-0.2, 0.2, dims[l + 1])
            ours |= {f"ln_g{l}": g, f"ln_b{l}": beta}
            theirs |= {f"layers.{k + 1}.weight": g, f"layers.{k + 1}.bias": beta}
    common = dict(steps=30, batch_size=16, log_every=5, checkpoint_every=0, precision=precision, act=act)
    curves = []
    for name, weights, cfg in (
        ("mlp", ours, TrainConfig(model=model, hidden=hidden, **common)),
        ("net", theirs, TrainConfig(model_spec=mlp_network(64, hidden, 10, act, ln), **common)),
    ):
        save_file(
            {k: np.asarray(v, np.float32) for k, v in weights.items()}, tmp_path / f"{name}.safetensors"
        )
        cfg = cfg.model_copy(update={"init_weights": str(tmp_path / f"{name}.safetensors")})
        t = Trainer(cfg, out=tmp_path / name, progress=False, log=None)
        t.run()
        curves.append([(r["step"], r["loss"], r["scale"]) for r in t.run_dir.read_metrics()])
    assert curves[0] == curves[1]
