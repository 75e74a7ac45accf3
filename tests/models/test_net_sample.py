"""Text generation with a token network of one's own (webmp/models/net_sample.py, `webmp sample` on a
`--model-spec` run): its sampling plan's forward pass is its training plan's for one window, its
greedy text is a float64 decode's (tests/models/seq_reference.py), the gpt's network under layer
paths samples the gpt's text token for token, and the command line samples a trained run.

The networks are test_net_seq.py's: ATTN (no positions, two attention blocks, a bias-less head),
TIED (a head tied to the embedding) and ODD (dropout among per-position layers, no attention:
sampling leaves dropout out, as evaluation does).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from kernel_cases import enlarged_gpt_params
from seq_reference import SeqReference
from test_net_seq import ATTN, ODD, TIED, enlarged

from webmp.cli import main
from webmp.config import TrainConfig
from webmp.data.text import tokenize
from webmp.models import build_plan, build_sample_plan, sample_param_shapes
from webmp.nn.gpt import gpt_names, gpt_network
from webmp.sample.job import SampleError
from webmp.sample.replay import generate_ids, sample

VOCAB = list("abcdefghij ")
V, T = len(VOCAB), 7
NETS = {"attn": ATTN, "tied": TIED, "odd": ODD}
PROMPT = [0, 3, 5]  # shorter than the context: windows grow, then slide


def config(spec: dict, path: str, **kw) -> TrainConfig:
    precision = "fp32" if path == "fp32" else "mixed"
    return TrainConfig(model_spec=spec, precision=precision, batch_size=1, **kw)


def described(plan, dispatches, binds=True):
    kernels = {k["name"]: k for k in plan["kernels"]}
    return [
        (k["sources"], k["entry"], k["constants"], d["workgroups"], d["bind"] if binds else None)
        for k, d in ((kernels[d["kernel"]], d) for d in dispatches)
    ]


@pytest.mark.parametrize("name", ["attn", "tied", "odd"])
def test_the_sampling_forward_is_the_training_forward(name):
    """sample_step = sample_window, train_step's forward dispatches for one window (the same kernels,
    constants, workgroups and buffers; dropout left out, so the layer after it reads its input),
    sample_next; no gradients or moments."""
    corpus = tokenize("".join(VOCAB) * 8, "t", "t", "0")
    cfg = config(NETS[name], "emulated")
    params = enlarged(cfg.model_spec, np.random.default_rng(3))
    train, _ = build_plan(cfg, corpus, "emulated")
    plan, _ = build_sample_plan(
        cfg, corpus.vocab, "emulated", params=params, prompt=[1, 2], tokens=4, temperature=0.5, seed=1
    )
    steps = plan["programs"]["sample_step"]
    entries = [e[1] for e in described(plan, steps)]
    assert entries[0] == "sample_window" and entries[-1] == "sample_next"
    binds = name != "odd"
    sampled = described(plan, steps[1:-1], binds)
    training = described(train, train["programs"]["train_step"][1:], binds)
    assert ("dropout" in [d[1] for d in training]) == (name == "odd") and "dropout" not in entries
    forward = [d for d in training if d[1] != "dropout"]
    assert sampled == forward[: len(sampled)] and sampled[-1][1] == "matmul_logits"
    assert plan["memory"]["gradients"] == plan["memory"]["optimizer_state"] == 0
    assert plan["sample"]["vocab"] == corpus.vocab and set(plan["programs"]) == {"sample_step", "sample_row"}


# measured on lavapipe (ATTN, enlarged weights of seeds 0-5, windows of 1-7 tokens): the last row's
# logits (up to ~3) within 7.7e-7 of float64 on fp32 and 3.7e-3 on the f16 paths; bounds with
# headroom, and a greedy choice is checked where the reference's top-2 margin exceeds twice one
LOGIT_ERR = {"fp32": 2.0**-14, "native": 2.0**-7, "emulated": 2.0**-7}
N = 20


def ref_logits(net, params, window):
    """The float64 logits of the last token of `window` (padded to the context: attention is causal)."""
    idx = np.zeros(T, np.int64)
    idx[: len(window)] = window
    logits, _ = SeqReference(net, params, None).forward(idx)
    return logits[len(window) - 1]


def test_greedy_decode_matches_float64(path, gpu):
    """Greedy tokens of ATTN on the GPU against float64 on the GPU's own prefix: the reference's
    argmax wherever its top-2 margin is clear of the logits' error; on fp32 the whole text is an
    independent float64 greedy decode."""
    cfg = config(ATTN, path)
    net = cfg.model_spec
    params = enlarged(net, np.random.default_rng(3))
    out = generate_ids(cfg, VOCAB, params, PROMPT, tokens=N, temperature=0.0, seed=0, gpu=gpu, path=path)
    seq = [*PROMPT, *out.tolist()]
    checked, margins = 0, []
    for i in range(len(PROMPT), len(seq)):
        logits = ref_logits(net, params, seq[max(0, i - T) : i])
        top = np.sort(logits)
        margins.append(top[-1] - top[-2])
        if margins[-1] > 2 * LOGIT_ERR[path]:
            checked += 1
            assert seq[i] == int(np.argmax(logits)), f"{path}: token {i - len(PROMPT)}"
    print(f"{path}: {checked}/{N} checked, smallest margin {min(margins):.3g}: {seq}")
    assert checked >= N // 2 and len(set(out.tolist())) >= 3
    if path == "fp32":
        decode = list(PROMPT)
        for _ in range(N):
            decode.append(int(np.argmax(ref_logits(net, params, decode[-T:]))))
        assert seq == decode


@pytest.mark.parametrize("tie_head", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_the_gpts_network_samples_the_gpts_text(path, gpu, tie_head):
    """gpt_network as a --model-spec network, its parameters under layer paths, generates the gpt's
    tokens exactly (greedy and at 0.8): one sampling plan under two sets of names."""
    Lb, D, H, Tc = 2, 16, 2, 8
    gpt_params = enlarged_gpt_params(V, D, Lb, H, Tc, 24, tie_head)
    precision = "fp32" if path == "fp32" else "mixed"
    gpt = TrainConfig(
        model="gpt", n_layer=Lb, d_model=D, n_head=H, context=Tc, tie_head=tie_head, precision=precision
    )
    net = TrainConfig(model_spec=gpt_network(V, D, Lb, H, Tc, tie_head).model_dump(), precision=precision)
    names = gpt_names(Lb, tie_head)
    by_path = {p: gpt_params[names[p]] for p in sample_param_shapes(net, V)}
    for temperature in (0.0, 0.8):
        kw = dict(tokens=N, temperature=temperature, seed=5, gpu=gpu, path=path)
        want = generate_ids(gpt, VOCAB, gpt_params, PROMPT, **kw)
        assert generate_ids(net, VOCAB, by_path, PROMPT, **kw).tolist() == want.tolist()


def test_a_model_without_text_does_not_sample():
    cnn = TrainConfig(
        model_spec={"input": [1, 8, 8], "layers": [{"type": "flatten"}, {"type": "linear", "out": 10}]}
    )
    for cfg in (cnn, TrainConfig()):
        with pytest.raises(ValueError, match="on a table or images does not generate text"):
            sample_param_shapes(cfg, 10)
    with pytest.raises(ValueError, match="a vocabulary of 10 characters for a network of 11 tokens"):
        build_sample_plan(
            config(ATTN, "fp32"), VOCAB[:10], "fp32", params={}, prompt=[0], tokens=1, temperature=0.0, seed=0
        )


# --- the command line on a trained run --------------------------------------------------------------

TEXT = "the quick brown fox jumps over the lazy dog.\nso the dog sleeps, and the fox runs off.\n" * 12


@pytest.mark.slow  # trains a run (~10 s)
def test_cli_samples_a_token_network_run(tmp_path, gpu, capsys):
    """`webmp train --model-spec` of a token network on a text file, then `webmp sample` of its run:
    the text is the Python API's on the run, greedy and per seed; a CNN run is refused in one line."""
    data = tmp_path / "fox.txt"
    data.write_text(TEXT)
    V_fox = len(set(TEXT))
    spec = {
        **ATTN,
        "input": {"tokens": V_fox, "context": 8},
        "layers": [*ATTN["layers"][:-1], {"type": "linear", "out": V_fox}],
    }
    spec_file = tmp_path / "net.json"
    spec_file.write_text(json.dumps(spec))
    run = tmp_path / "run"
    argv = [
        "train", "--model-spec", str(spec_file), "--data", str(data), "--out", str(run), "--quiet",
        "--steps", "8", "--batch-size", "4", "--val-tokens", "64", "--log-every", "4", "--lr", "0.01",
    ]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["sample", str(run), "--prompt", "the ", "--tokens", "30", "--temperature", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("the ") and len(out) == 4 + 30 + 1
    assert out == sample(run, "the ", tokens=30, temperature=0.0) + "\n"
    drawn = [sample(run, "fox", tokens=30, temperature=1.0, seed=s) for s in (3, 3, 4)]
    assert drawn[0] == drawn[1] != drawn[2]

    cnn = tmp_path / "cnn"
    cnn.mkdir()
    flat = {"input": [1, 8, 8], "layers": [{"type": "flatten"}, {"type": "linear", "out": 10}]}
    (cnn / "config.json").write_text(json.dumps(TrainConfig(model_spec=flat).model_dump()))
    assert main(["sample", str(cnn)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'net' run on a table or images" in err and "token input" in err, err
    with pytest.raises(SampleError, match="'net' run on a table or images"):
        sample(cnn)
