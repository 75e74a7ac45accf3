"""A page's own network (model net): POST /api/runs takes a model_spec, refused in one line naming the
layer in the words `webmp train --model-spec` prints (Network.from_dict), bounded in size and depth,
checked against the data and the page's memory budget; POST /api/network answers its layer table."""

from __future__ import annotations

import copy
import json

import pytest

from tests.serve.helpers import create
from webmp.cli import main as cli_main
from webmp.config import TrainConfig
from webmp.models import build_plan
from webmp.models.summary import layer_table
from webmp.nn import Network
from webmp.nn.network import MAX_DEPTH
from webmp.serve.budget import MAX_BUFFER_BYTES, estimate_buffers
from webmp.serve.form import DEFAULT_NETWORK
from webmp.serve.page_data import training_data
from webmp.serve.security import MAX_JSON_BODY

CNN = DEFAULT_NETWORK  # the CNN for the digits: [1, 8, 8] in, 10 classes out
NET = dict(batch_size=16, steps=30, log_every=10, checkpoint_every=10)


def with_layer(i: int, **changes) -> dict:
    """The CNN with layer i's settings changed (a key set to None removed)."""
    spec = copy.deepcopy(CNN)
    spec["layers"][i].update(changes)
    spec["layers"][i] = {k: v for k, v in spec["layers"][i].items() if v is not None}
    return spec


def nested(depth: int) -> dict:
    """A vector network whose relu sits inside `depth` nested residual blocks."""
    layers: list = [{"type": "relu"}]
    for _ in range(depth):
        layers = [{"type": "residual", "layers": layers}]
    return {"input": [64], "layers": [*layers, {"type": "linear", "out": 10}]}


def from_dict_error(spec) -> str:
    with pytest.raises(ValueError) as err:
        Network.from_dict(spec, "model_spec")
    return str(err.value)


def refused(client, body: dict | str, status: int = 422) -> str:
    """POST /api/runs refuses `body` (or the JSON text) and POST /api/network alike, and no run is
    made; the line."""
    text = body if isinstance(body, str) else json.dumps(body)
    kw = dict(content=text.encode(), headers={"content-type": "application/json"})
    r = client.post("/api/runs", **kw)
    assert r.status_code == status, r.text
    table = client.post("/api/network", **kw)
    assert table.status_code == status and table.json() == r.json()
    assert client.get("/api/runs").json() == []
    return r.json()["detail"]


def test_the_cnn_makes_a_run_of_the_network_as_given(client):
    """A page sends the network as an object (or the editor's text); model net is implied, and the
    run's config holds the network: the plan is build_plan's for it, layer by layer."""
    run = create(client, **NET, model_spec=CNN)
    cfg = TrainConfig(**run["config"])
    assert cfg.model == "net" and cfg.model_spec == Network.from_dict(CNN)
    as_text = create(client, **NET, model_spec=json.dumps(CNN, indent=2))
    assert as_text["config"]["model_spec"] == run["config"]["model_spec"]
    plan = client.get(f"/api/runs/{run['id']}/plan", params={"f16": "emulated"}).json()["plan"]
    native, _ = build_plan(cfg, training_data(cfg), "emulated")
    assert plan == json.loads(json.dumps(native))
    kernels = {k["sources"][-1] for k in plan["kernels"]}
    assert {"col2im.wgsl", "maxpool_fwd.wgsl", "maxpool_bwd.wgsl", "act.wgsl"} <= kernels
    # the convolutions' matmuls read their inputs as patches (no im2col pass)
    implicit = {k["entry"] for k in plan["kernels"] if "matmul_a_patches.wgsl" in k["sources"]}
    assert implicit == {"matmul_fwd", "matmul_wgrad"} and "im2col.wgsl" not in kernels
    params = {b["name"] for b in plan["buffers"] if b["category"] == "master_weights"}
    assert {"layers.0.weight", "layers.3.layers.0.weight", "layers.5.bias"} <= params


# Each spec below is wrong in one way; the 422 is Network.from_dict's line (what `webmp train
# --model-spec` prints after the file's name), behind "invalid model_spec: ".
WRONG = {
    "unknown layer type": (with_layer(0, type="conv3d"), "layers.0: unknown layer type 'conv3d'"),
    "no type": (with_layer(1, type=None), "layers.1: a layer needs a type"),
    "shapes that do not chain": (
        {**CNN, "layers": [layer for layer in CNN["layers"] if layer["type"] != "flatten"]},
        "layers.4 (linear): takes a vector [features], got [16, 4, 4] (put a flatten layer before it)",
    ),
    "a residual block that changes the shape": (
        {
            **CNN,
            "layers": [
                *CNN["layers"][:3],
                {"type": "residual", "layers": [{"type": "maxpool2d", "kernel": 2}]},
                *CNN["layers"][4:],
            ],
        },
        "layers.3 (residual): its layers make [16, 2, 2] of [16, 4, 4]",
    ),  # fmt: skip
    "a negative size": (with_layer(0, out=-16), "layers.0.out: Input should be greater than or equal to 1"),
    "a zero kernel": (with_layer(0, kernel=0), "layers.0.kernel: Input should be greater than or equal to 1"),
    "a kernel larger than the input": (
        with_layer(0, kernel=11, padding=1),
        "layers.0 (conv2d): kernel 11 is larger than its input [1, 8, 8] padded by 1",
    ),
    "a pool larger than its input": (
        with_layer(2, kernel=9),
        "layers.2 (maxpool2d): kernel 9 is larger than its input [16, 8, 8] padded by 0",
    ),
    "an unknown setting": (with_layer(0, dilation=2), "layers.0.dilation: Extra inputs are not permitted"),
    "not a linear last": ({**CNN, "layers": CNN["layers"][:-1]}, "the last layer (flatten) must be a linear"),
    "nested one too deep": (nested(MAX_DEPTH + 1), f"residual blocks nested {MAX_DEPTH + 1} deep; at most 8"),
    "no layers": ({"input": [1, 8, 8], "layers": []}, "layers: List should have at least 1 item"),
    "an input of two sides": ({**CNN, "input": [8, 8]}, "input [8, 8]: give [features] or an image"),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_a_wrong_network_is_refused_naming_the_layer_as_the_cli_does(client, capsys, tmp_path, case):
    spec, words = WRONG[case]
    detail = refused(client, {**NET, "model_spec": spec})
    expected = from_dict_error(spec)
    assert detail == f"invalid {expected}" and "\n" not in detail
    assert words in detail, detail
    file = tmp_path / "net.json"
    file.write_text(json.dumps(spec))
    assert cli_main(["train", "--model-spec", str(file)]) == 2
    cli = capsys.readouterr().err.strip().splitlines()[-1]
    line = expected.removeprefix("model_spec: ")
    assert cli == f"webmp train: error: argument --model-spec: {file}: {line}"
    # as the editor's text, the same line
    assert refused(client, {**NET, "model_spec": json.dumps(spec)}) == detail


def test_a_network_nested_past_what_pydantic_follows_is_refused_in_the_same_words(client):
    """Nesting far past MAX_DEPTH is counted before validation (pydantic's recursion guard would say
    'Recursion error - cyclic reference detected' behind a path of a few thousand characters)."""
    for depth in (MAX_DEPTH + 1, 300, 400):
        layers = '[{"type": "residual", "layers": ' * depth + '[{"type": "relu"}]' + "}]" * depth
        spec = f'{{"input": [64], "layers": [{layers[1:-1]}, {{"type": "linear", "out": 10}}]}}'
        assert depth > 300 or json.loads(spec) == nested(depth)
        detail = refused(client, f'{{"batch_size": 16, "model_spec": {spec}}}')
        assert detail == f"invalid model_spec: residual blocks nested {depth} deep; at most {MAX_DEPTH}"
    deeper = '{"model_spec": {"input": [64], "layers": ' + '[{"layers": ' * 3000 + "[]" + "}]" * 3000 + "}}"
    assert refused(client, deeper) == "the body nests deeper than the server's JSON parser goes"
    assert create(client, **NET, model_spec=nested(MAX_DEPTH))["config"]["model"] == "net"


def test_text_that_is_not_json_is_refused_as_a_file_that_is_not(client, capsys, tmp_path):
    text = json.dumps(CNN)[:-3]
    detail = refused(client, {**NET, "model_spec": text})
    file = tmp_path / "net.json"
    file.write_text(text)
    assert cli_main(["train", "--model-spec", str(file)]) == 2
    cli = capsys.readouterr().err.strip().splitlines()[-1]
    assert detail.startswith("invalid model_spec: not JSON (")
    line = detail.removeprefix("invalid model_spec: ")
    assert cli == f"webmp train: error: argument --model-spec: {file}: {line}"
    assert refused(client, {**NET, "model_spec": "[" * 100_000}) == (
        "invalid model_spec: nested deeper than a JSON parser goes"
    )
    detail = refused(client, {**NET, "model_spec": [CNN]})
    assert detail == "invalid model_spec: a network is a JSON object with input and layers"


def test_a_spec_of_ten_megabytes_is_refused_before_it_is_read(client):
    """The body cap (MAX_JSON_BODY, 1 MiB) bounds a network too: 413, with or without Content-Length."""
    spec = {**CNN, "layers": [*CNN["layers"][:-1], {"type": "relu"}] * 200_000 + [CNN["layers"][-1]]}
    body = json.dumps({**NET, "model_spec": spec}).encode()
    assert len(body) > 10 * 2**20
    for path in ("/api/runs", "/api/network"):
        r = client.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["detail"] == f"POST bodies are at most {MAX_JSON_BODY} bytes"

        def chunks():
            for i in range(0, len(body), 1 << 16):
                yield body[i : i + (1 << 16)]

        r = client.post(path, content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text
    assert client.get("/api/runs").json() == []


def test_too_many_layers_and_parameters_are_the_networks_limits(client):
    many = {"input": [64], "layers": [{"type": "relu"}] * 256 + [{"type": "linear", "out": 10}]}
    assert refused(client, {**NET, "model_spec": many}) == "invalid model_spec: 257 layers; at most 256"
    wide = {"input": [64], "layers": [{"type": "linear", "out": 65536}, {"type": "linear", "out": 65536}]}
    assert "parameters; at most 268,435,456" in refused(client, {**NET, "model_spec": wide})


def test_a_network_for_other_data_than_the_runs_is_refused_naming_both(client):
    """The digits are 64 features an example in 10 classes: a network of another input or other
    classes is refused before any run (its plan would read past the batch)."""
    detail = refused(client, {**NET, "model_spec": {**CNN, "input": [3, 8, 8]}})
    assert (
        detail
        == "invalid model_spec: the network takes images [3, 8, 8] but the data digits holds images [1, 8, 8]"
    )
    vector = {"input": [32], "layers": [{"type": "linear", "out": 10}]}
    detail = refused(client, {**NET, "model_spec": vector})
    assert detail == (
        "invalid model_spec: the network takes input [32] (32 values an example) but the data digits has 64 "
        "features an example"
    )
    detail = refused(client, {**NET, "model_spec": with_layer(5, out=7)})
    assert detail == (
        "invalid model_spec: the network's last layer has 7 outputs but the data digits has 10 classes"
    )
    assert create(client, **NET, model_spec={"input": [64], "layers": [{"type": "linear", "out": 10}]})


def test_model_net_needs_its_network_and_only_net_takes_one(client):
    assert "give both or neither" in refused(client, {**NET, "model": "net"})
    assert "give both or neither" in refused(client, {**NET, "model": "mlp", "model_spec": CNN})


def test_the_memory_check_reads_the_networks_own_buffers(client):
    """check_plan_size sizes a net plan by its dry run, exactly: a conv whose output alone is past a
    page's binding limit is refused naming that buffer."""
    cfg = TrainConfig(**NET, model_spec=CNN)
    data = training_data(cfg)
    for path in ("native", "emulated"):
        plan, _ = build_plan(cfg, data, path)
        assert estimate_buffers(cfg, data, path) == {b["name"]: b["bytes"] for b in plan["buffers"]}
    wide = {"input": [1, 8, 8], "layers": [{"type": "conv2d", "out": 8192, "kernel": 3, "padding": 1},
                                           {"type": "flatten"}, {"type": "linear", "out": 10}]}  # fmt: skip
    body = {**NET, "batch_size": 256, "model_spec": wide}
    detail = refused(client, body)
    y = 256 * 8 * 8 * 8192 * 2  # layers.0.y: one f16 per pixel and channel, 256 MiB
    assert detail == (
        f"this config's largest GPU buffer, layers.0.y, would be {y} bytes (256.0 MiB); a page's WebGPU "
        f"device holds at most {MAX_BUFFER_BYTES} bytes (128 MiB) in one buffer"
    )
    assert create(client, **{**body, "batch_size": 64})  # 64 MiB: it fits


def test_the_layer_table_is_the_models_own(client):
    """POST /api/network: layer_table(network, batch size, the data).to_dict(), for the form."""
    for batch in (16, 64):
        r = client.post("/api/network", json={"model_spec": CNN, "batch_size": batch})
        assert r.status_code == 200, r.text
        cfg = TrainConfig(model_spec=CNN, batch_size=batch)
        table = layer_table(cfg.model_spec, batch, training_data(cfg)).to_dict()
        assert r.json() == json.loads(json.dumps(table))
    table = r.json()
    paths = [t.path for t in Network.from_dict(CNN).trace()]
    # the residual convolution's patch-gradient scratch last, in a row of its own
    assert [row["path"] for row in table["rows"]][1:] == [*paths, "(shared)"]
    assert table["totals"]["params"] == 160 + 2320 + 2570
    assert client.get("/api/runs").json() == []  # a table makes no run
    r = client.post("/api/network", json={"batch_size": 64})
    assert r.status_code == 422 and r.json()["detail"].startswith("invalid model_spec: ")
    r = client.post("/api/network", json={"model_spec": CNN, "batch_size": 0})
    assert r.status_code == 422
    assert r.json()["detail"] == "invalid batch_size: batch_size must be positive, got 0"
