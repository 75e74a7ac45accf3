"""`webmp export RUN OUT.safetensors --layout torch|webmp`: a run's trained weights (the f32 masters
of its checkpoint) in webmp's layout (what --init-weights reads back bit for bit) or as the
state_dict of its equivalent PyTorch Sequential (a network of webmp.nn layers; the mlp, mlp-ln and
gpt as the networks they are), which computes in torch the logits the run's own evaluation
computes (the gpt: its validation loss); what cannot be exported refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from webmp.cli import main as cli
from webmp.config import TrainConfig
from webmp.data.text import load_training_data
from webmp.models import build_plan
from webmp.nn import Network
from webmp.train.checkpoint import load_checkpoint
from webmp.train.loop import Trainer

NET = {  # digits as [1, 8, 8]: the flatten's (h, w, c) order goes through a layernorm to the linear
    "input": [1, 8, 8],
    "layers": [
        {"type": "conv2d", "out": 4, "kernel": 3, "padding": 1}, {"type": "relu"},
        {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "layernorm"},
        {"type": "linear", "out": 10},
    ],
}  # fmt: skip
TRAIN = ["--steps", "12", "--batch-size", "8", "--precision", "fp32", "--quiet"]
TEXT = "the quick brown fox jumps over the lazy dog.\nso the dog sleeps, and the fox runs off.\n" * 12
GPT = [
    "--model",
    "gpt",
    "--n-layer",
    "2",
    "--d-model",
    "16",
    "--n-head",
    "2",
    "--context",
    "8",
    "--val-tokens",
    "64",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Trained runs (12 fp32 steps each): a net, an mlp, an mlp-ln (relu) and a gpt with a tied and
    one with an untied head, on a small text."""
    root = tmp_path_factory.mktemp("export")
    (root / "net.json").write_text(json.dumps(NET))
    (root / "fox.txt").write_text(TEXT)
    assert cli(["train", "--model-spec", str(root / "net.json"), *TRAIN, "--out", str(root / "net")]) == 0
    assert cli(["train", "--hidden", "16", *TRAIN, "--out", str(root / "mlp")]) == 0
    mlp_ln = ["--model", "mlp-ln", "--hidden", "16,12", "--act", "relu"]
    assert cli(["train", *mlp_ln, *TRAIN, "--out", str(root / "mlp-ln")]) == 0
    for head in ("tie", "no-tie"):
        argv = ["train", *GPT, f"--{head}-head", "--data", str(root / "fox.txt"), *TRAIN]
        assert cli([*argv, "--out", str(root / f"gpt-{head}")]) == 0
    return root


def _masters(run) -> tuple[TrainConfig, dict[str, np.ndarray]]:
    """The run's config and its checkpoint's masters, by the names of its plan's parameters."""
    contents, meta = load_checkpoint(run)
    cfg = TrainConfig(**meta["config"])
    params = build_plan(cfg, load_training_data(cfg), "fp32", dry=True)[0]["params"]
    return cfg, {
        p["name"]: np.frombuffer(contents[p["master"]], np.float32).reshape(p["shape"]) for p in params
    }


def _reloaded(cfg: TrainConfig, weights, out) -> Trainer:
    """A new run of the same config from `weights` (--init-weights), not trained."""
    return Trainer(cfg.model_copy(update={"init_weights": str(weights)}), out=out, progress=False, log=None)


@pytest.mark.parametrize("model", ["net", "mlp"])
def test_the_webmp_layout_is_the_runs_masters_and_reads_back_as_init_weights(runs, model, capsys):
    out = runs / f"{model}-webmp.safetensors"
    assert cli(["export", str(runs / model), str(out), "--layout", "webmp"]) == 0
    said = capsys.readouterr().out.strip()
    assert said.startswith(f"webmp export: {out}: ") and said.endswith("at step 12, webmp layout"), said
    with safe_open(out, framework="numpy") as f:
        assert f.metadata()["layout"] == "webmp" and f.metadata()["step"] == "12"
    exported, (cfg, masters) = load_file(out), _masters(runs / model)
    assert set(exported) == set(masters)
    assert all(exported[k].dtype == np.float32 and (exported[k] == v).all() for k, v in masters.items())
    t = _reloaded(cfg, out, runs / f"{model}-again")
    assert all(t.runtime.read(k) == v.tobytes() for k, v in masters.items())


def test_what_cannot_be_exported_is_refused_in_one_line(runs, tmp_path, capsys):
    out = str(tmp_path / "w.safetensors")
    cases = [
        (["export", str(tmp_path / "nowhere"), out], 1, "nowhere: no such run directory"),
        (["export", str(tmp_path), out], 1, "has no checkpoint (checkpoint.safetensors)"),
        (
            ["export", str(runs / "net"), str(tmp_path)],
            1,
            "is a directory; give the path of the .safetensors",
        ),
        (["export", str(runs / "net"), str(tmp_path / "no" / "w.st")], 1, "its directory"),
        (["export", str(runs / "net"), out, "--layout", "pytorch"], 2, "invalid choice: 'pytorch'"),
    ]
    for argv, code, message in cases:
        assert cli(argv) == code, argv
        err = capsys.readouterr().err.strip()
        assert message in err and "Traceback" not in err, (argv, err)
        if code == 1:
            assert len(err.splitlines()) == 1 and err.startswith("webmp export: "), err
        else:  # argparse: its usage line, then the error
            assert err.splitlines()[-1].startswith("webmp export: error: argument --layout"), err
    assert not (tmp_path / "w.safetensors").exists()


def _torch_export(runs, run: str, capsys):
    """The run's torch export in its equivalent Sequential (loaded strictly), and the network."""
    import torch
    from parity import sequential

    from webmp.models import network_of
    from webmp.train.export import run_weights

    out = runs / f"{run}-torch.safetensors"
    assert cli(["export", str(runs / run), str(out), "--layout", "torch"]) == 0
    assert capsys.readouterr().out.strip().endswith("at step 12, torch layout")
    cfg, weights, _ = run_weights(runs / run)
    net, _ = network_of(cfg, {name: w.shape for name, w in weights.items()})
    model = sequential(net)
    model.load_state_dict({k: torch.tensor(v) for k, v in load_file(out).items()}, strict=True)
    return out, net, model


@pytest.mark.slow  # imports torch
@pytest.mark.parametrize("run", ["net", "mlp", "mlp-ln"])
def test_the_torch_layout_computes_the_runs_logits_in_torch(runs, run, capsys):
    """The exported state_dict loads into the equivalent torch Sequential (strict), which gives the
    logits of the run's evaluation (the engine's fp32 forward, from the same file read back with
    --init-weights: the same masters bit for bit) within f32 rounding (test_torch_layout.py's bound),
    and the run's test accuracy."""
    torch = pytest.importorskip("torch")

    out, net, model = _torch_export(runs, run, capsys)
    if run == "net":
        assert net == Network.from_dict(NET)
    cfg, masters = _masters(runs / run)
    t = _reloaded(cfg, out, runs / f"{run}-eval")
    assert all(t.runtime.read(k) == v.tobytes() for k, v in masters.items())
    t.evaluate()
    test_x, test_y = t.data.test_x, t.data.test_y
    first = (len(test_x) - 1) // cfg.batch_size * cfg.batch_size  # the last chunk's rows
    ours = np.frombuffer(t.runtime.read("logits"), np.float32).reshape(-1, 10)[: len(test_x) - first]
    with torch.no_grad():
        theirs = model(torch.tensor(test_x).view(-1, *net.in_shape)).numpy()
    worst = float(np.abs(ours - theirs[first:]).max() / np.abs(theirs[first:]).max())
    print(f"worst logit difference {worst:.3g} of the largest")
    assert worst <= 1e-5
    summary = json.loads((runs / run / "summary.json").read_text())
    assert (theirs.argmax(1) == test_y).mean() == pytest.approx(summary["test_accuracy"], abs=1e-12)


@pytest.mark.slow  # imports torch
@pytest.mark.parametrize("head", ["tie", "no-tie"])
def test_a_gpt_exported_to_torch_has_the_runs_validation_loss(runs, head, capsys):
    """The gpt's export loads (strictly) into gpt_network's torch twin, a tied head sharing the
    embedding's weight, whose loss over the run's validation windows (consecutive windows of the
    context, each character but the first a target once) is the run's validation loss (an fp32
    run: within 1e-5 relative; a wrong layout or an untied copy errs by far more)."""
    torch = pytest.importorskip("torch")
    from webmp.data.text import load_text

    out, net, model = _torch_export(runs, f"gpt-{head}", capsys)
    if head == "tie":
        assert model[-1].weight is model[0].weight
    cfg, masters = _masters(runs / f"gpt-{head}")
    t = _reloaded(cfg, out, runs / f"gpt-{head}-again")  # --init-weights reads the torch file back
    assert all(t.runtime.read(k) == v.tobytes() for k, v in masters.items())
    val = load_text(str(runs / "fox.txt")).val[:64].astype(np.int64)
    T, total = net.context, 0.0
    with torch.no_grad():
        for start in range(0, len(val) - 1, T):
            x = torch.zeros(1, T, dtype=torch.long)
            window = torch.tensor(val[start : start + T])
            x[0, : len(window)] = window
            y = torch.tensor(val[start + 1 : start + T + 1])
            logits = model(x)[0, : len(y)].double()
            total += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
    summary = json.loads((runs / f"gpt-{head}" / "summary.json").read_text())
    mean = total / (len(val) - 1)
    print(f"{head}: torch {mean:.7f}, run {summary['val_loss']:.7f}")
    assert mean == pytest.approx(summary["val_loss"], rel=1e-5)
