"""Sequence models of webmp.nn layers (a token input; webmp/models/net_seq.py): the spec's checks,
each node's forward and backward against the float64 reference of tests/models/seq_reference.py on
every path, the validation loss, and a 3-block GPT from layers trained on a small text.

The node tests run one train_step (and program 'eval' before it) of two small networks on V = 11
characters, context T = 7, 3 windows (R = 21 loss rows), from enlarged random parameters (so that
attention is far from uniform and no norm parameter or bias is trivial):
  ODD   embedding (D = 13, odd: the half-used last word of every row) with positions, rmsnorm, a
        linear to 9, silu, dropout, residual blocks of linear + tanh and of a bias-less linear +
        gelu, layernorm, relu, the head;
  ATTN  embedding (D = 12) without positions, residual blocks of layernorm + attention (2 heads of
        6) and of rmsnorm + bias-less attention (3 heads of 4), gelu, a bias-less head;
  TIED  embedding (D = 12), a residual block of layernorm + attention, layernorm, and the head tied
        to the embedding (its table transposed), GPT-2's init.
Errors are normwise per tensor, max |got - want| / max |want| (tests/models/test_gradients.py), as
test_gpt.py's, with its tolerances and reasons:
- against the reference rounded where the engine stores (store=path) the engine differs by f32
  arithmetic only, and by the rare f16 store such a difference tips over a rounding boundary,
  which later stages carry along: TOL_STORED = 2^-9 on the f16 paths (a few flips' worth),
  2^-16 for fp32 (f32 sums of <= 36 terms and exp/tanh, ~1e-7 each);
- against exact float64: 2^-14 for fp32 (the MLP's bound: no f16 rounding may sneak in); on the
  f16 paths each gradient sits downstream of a few dozen f16 stores (7 to 12 rounding points a
  layer, forward and backward), 2 U16 each: 2^-5, the gpt's.
Measured on lavapipe (stored, exact): see MEASURED, printed with -s.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from seq_reference import SeqReference, gpt_spec

from webmp.cli import main as cli
from webmp.config import TrainConfig
from webmp.data.tables import Dataset
from webmp.data.text import tokenize
from webmp.engine.state import decode_state
from webmp.models import build_plan
from webmp.nn import Network
from webmp.testing import reference as ref
from webmp.train.checkpoint import initial_weights_blob

V, T, BATCH = 11, 7, 3
TOL_STORED = {"native": 2.0**-9, "emulated": 2.0**-9, "fp32": 2.0**-16}
TOL_EXACT = {"native": 2.0**-5, "emulated": 2.0**-5, "fp32": 2.0**-14}
TOKENS = {"tokens": V, "context": T}
HEAD = {"type": "linear", "out": V}


def res(*layers):
    return {"type": "residual", "layers": list(layers)}


ODD = {
    "input": TOKENS,
    "layers": [
        {"type": "embedding", "dim": 13}, {"type": "rmsnorm"}, {"type": "linear", "out": 9}, {"type": "silu"},
        {"type": "dropout", "p": 0.25}, res({"type": "linear", "out": 9}, {"type": "tanh"}),
        res({"type": "linear", "out": 9, "bias": False}, {"type": "gelu"}), {"type": "layernorm"},
        {"type": "relu"}, HEAD,
    ],
}  # fmt: skip
ATTN = {
    "input": TOKENS,
    "layers": [
        {"type": "embedding", "dim": 12, "positions": False},
        res({"type": "layernorm"}, {"type": "causal_self_attention", "heads": 2}),
        res({"type": "rmsnorm"}, {"type": "causal_self_attention", "heads": 3, "bias": False}),
        {"type": "gelu"}, {**HEAD, "bias": False},
    ],
}  # fmt: skip
TIED = {
    "input": TOKENS,
    "init": "gpt2",
    "layers": [
        {"type": "embedding", "dim": 12},
        res({"type": "layernorm"}, {"type": "causal_self_attention", "heads": 2}),
        {"type": "layernorm"}, {**HEAD, "tied": True},
    ],
}  # fmt: skip
NETS = {"odd": ODD, "attn": ATTN, "tied": TIED}
MEASURED: dict = {}


def test_a_token_network_traces_to_its_shapes_and_parameters():
    net = Network.from_dict(ATTN)
    assert net.loss == "next_token" and net.is_tokens and (net.context, net.classes) == (T, V)
    got = [(t.path, t.layer.type, list(t.in_shape), t.out_shape) for t in net.trace()]
    assert got == [
        ("layers.0", "embedding", [T], (T, 12)), ("layers.1", "residual", [T, 12], (T, 12)),
        ("layers.1.layers.0", "layernorm", [T, 12], (T, 12)),
        ("layers.1.layers.1", "causal_self_attention", [T, 12], (T, 12)),
        ("layers.2", "residual", [T, 12], (T, 12)), ("layers.2.layers.0", "rmsnorm", [T, 12], (T, 12)),
        ("layers.2.layers.1", "causal_self_attention", [T, 12], (T, 12)),
        ("layers.3", "gelu", [T, 12], (T, 12)),
        ("layers.4", "linear", [T, 12], (T, V)),
    ]  # fmt: skip
    shapes = {n: p.shape for n, p in Network.from_dict(ODD).param_shapes().items()}
    assert shapes["layers.0.weight"] == (V, 13) and shapes["layers.0.positions"] == (T, 13)
    shapes = {n: p.shape for n, p in net.param_shapes().items()}
    assert shapes == {
        "layers.0.weight": (V, 12), "layers.1.layers.0.weight": (12,), "layers.1.layers.0.bias": (12,),
        "layers.1.layers.1.qkv.weight": (12, 36), "layers.1.layers.1.qkv.bias": (36,),
        "layers.1.layers.1.proj.weight": (12, 12), "layers.1.layers.1.proj.bias": (12,),
        "layers.2.layers.0.weight": (12,), "layers.2.layers.1.qkv.weight": (12, 36),
        "layers.2.layers.1.proj.weight": (12, 12), "layers.4.weight": (12, V),
    }  # fmt: skip


def _net(*layers, inp=TOKENS):
    return {"input": inp, "layers": list(layers)}


EMB = {"type": "embedding", "dim": 16}
ATT = {"type": "causal_self_attention", "heads": 2}
BAD = {
    "embedding not first": (
        _net(EMB, EMB, HEAD),
        "layers.1 (embedding): takes token ids [T], got [7, 16]: an embedding is the first layer of a "
        "token network",
    ),
    "no embedding first": (
        _net(HEAD),
        "layers.0 (linear): takes a sequence [T, D], got token ids [7] (a token network's first layer is "
        "an embedding)",
    ),
    "embedding on an image": (
        _net(EMB, HEAD, inp=[1, 8, 8]), "layers.0 (embedding): takes token ids [T], got [1, 8, 8]"
    ),
    "attention on an image": (
        _net(ATT, {"type": "flatten"}, HEAD, inp=[1, 8, 8]),
        "layers.0 (causal_self_attention): takes a sequence [T, D], got [1, 8, 8]",
    ),
    "attention on a vector": (
        _net(ATT, HEAD, inp=[16]), "layers.0 (causal_self_attention): takes a sequence [T, D], got [16]"
    ),
    "dim not a multiple of heads": (
        _net(EMB, res({**ATT, "heads": 3}), HEAD),
        "layers.1.layers.0 (causal_self_attention): its input [7, 16] has width 16, not a multiple of "
        "heads 3",
    ),
    "odd head size": (
        _net({**EMB, "dim": 10}, {**ATT, "heads": 2}, HEAD),
        "layers.1 (causal_self_attention): its input [7, 10] has heads 2 of size 5; the head size must "
        "be even",
    ),
    "last layer's outputs not the vocabulary": (
        _net(EMB, {**HEAD, "out": 12}),
        "the last layer (layers.1, linear) has 12 outputs but the input's vocabulary is 11 tokens",
    ),
    "last layer not linear": (
        _net(EMB, HEAD, {"type": "relu"}),
        "the last layer (relu) must be a linear layer: its outputs are the next token's logits",
    ),
    "flatten of a sequence": (
        _net(EMB, {"type": "flatten"}, HEAD),
        "layers.1 (flatten): takes a vector [features] or an image [C, H, W], got [7, 16]",
    ),
    "conv2d on a sequence": (
        _net(EMB, {"type": "conv2d", "out": 4, "kernel": 1}, HEAD),
        "layers.1 (conv2d): takes an image [C, H, W], got [7, 16]",
    ),
    "residual on the tokens": (
        _net(res(EMB), HEAD), "layers.0 (residual): takes a sequence [T, D], got token ids [7]"
    ),
    "residual changes the width": (
        _net(EMB, res({"type": "linear", "out": 8}), HEAD),
        "layers.1 (residual): its layers make [7, 8] of [7, 16]",
    ),
    "softmax_xent on tokens": (
        {**_net(EMB, HEAD), "loss": "softmax_xent"},
        "loss softmax_xent: a token input trains with loss next_token",
    ),
    "next_token on a vector": (
        {**_net({"type": "linear", "out": 3}, inp=[4]), "loss": "next_token"},
        "loss next_token: it needs a token input",
    ),
    "no context": (_net(EMB, HEAD, inp={"tokens": V}), "input.context: Field required"),
    "context too long": (
        _net(EMB, HEAD, inp={"tokens": V, "context": 9000}),
        "input.context: Input should be less than or equal to 8192",
    ),
    "one token": (
        _net(EMB, HEAD, inp={"tokens": 1, "context": T}),
        "input.tokens: Input should be greater than or equal to 2",
    ),
    "unknown input field": (
        _net(EMB, HEAD, inp={**TOKENS, "vocab": 3}), "input.vocab: Extra inputs are not permitted"
    ),
    "tied head not last": (
        _net(EMB, {**HEAD, "out": 16, "tied": True}, HEAD),
        "layers.1 (linear): a tied linear layer is the last layer of a token network whose first layer "
        "is an embedding",
    ),
    "tied head on a vector": (
        _net({"type": "linear", "out": 3, "tied": True}, inp=[4]),
        "layers.0 (linear): a tied linear layer is the last layer of a token network",
    ),
    "tied head of another width": (
        _net(EMB, {"type": "linear", "out": 8}, {**HEAD, "tied": True}),
        "layers.2 (linear): its input [7, 8] has width 8 but the embedding it is tied to (layers.0) has "
        "dim 16",
    ),
    "tied head with a bias": (
        _net(EMB, {**HEAD, "tied": True, "bias": True}),
        "layers.1: a tied linear layer has no bias",
    ),
    "unknown init": (_net(EMB, HEAD) | {"init": "xavier"}, "init: Input should be 'torch' or 'gpt2'"),
    "heads zero": (
        _net(EMB, {**ATT, "heads": 0}, HEAD), "layers.1.heads: Input should be greater than or equal to 1"
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD)
def test_bad_token_specs_are_refused_in_one_line_naming_the_layer(case):
    spec, message = BAD[case]
    with pytest.raises(ValueError) as err:
        Network.from_dict(spec)
    assert message in str(err.value) and len(str(err.value).splitlines()) == 1, str(err.value)


def tiny_corpus(chars="abcdefghij "):
    rng = np.random.default_rng(5)
    return tokenize("".join(rng.choice(list(chars), size=300)), "tiny", "test", "0")


def test_the_text_must_have_the_networks_vocabulary(digits):
    cfg = TrainConfig(model_spec=ODD, batch_size=BATCH)
    assert cfg.model == "net" and cfg.trains_on_text and cfg.window == T
    with pytest.raises(
        ValueError, match="vocabulary of 11 tokens but the text tiny has 9 distinct characters"
    ):
        build_plan(cfg, tiny_corpus("abcdefgh "), "fp32", dry=True)
    with pytest.raises(TypeError, match="a network with a token input trains on a TextCorpus, got Dataset"):
        build_plan(cfg, digits, "fp32", dry=True)
    assert isinstance(digits, Dataset)
    again = TrainConfig(**json.loads(json.dumps(cfg.model_dump())))
    assert again == cfg and again.model_spec.trace() == cfg.model_spec.trace()
    with pytest.raises(ValueError, match=r"steps x rows a step \(1000 x 7340032\)"):
        TrainConfig(model_spec=_net(EMB, HEAD, inp={"tokens": V, "context": 7168}), batch_size=1024)


def test_the_plan_declares_each_layers_parameters_and_the_gpts_data():
    cfg = TrainConfig(model_spec=ATTN, batch_size=BATCH)
    plan, _ = build_plan(cfg, tiny_corpus(), "fp32", dry=True)
    assert [p["name"] for p in plan["params"]] == list(Network.from_dict(ATTN).param_shapes())
    buffers = {b["name"]: b for b in plan["buffers"]}
    assert {"tokens", "val_tokens", "idx", "targets", "spans", "order", "logits", "dlogits"} <= set(buffers)
    assert buffers["logits"]["shape"] == [BATCH * T, V]
    # the scores and dS are shared by the attention layers of one head count, P kept per layer
    assert {"attention_S_h2", "attention_S_h3", "attention_dS_h2", "layers.1.layers.1.P"} <= set(buffers)
    assert plan["eval"]["loss_buffer"] == "val_loss_sum" and plan["layers"] == [V, 12, 12, 12, 12, V]


def enlarged(net: Network, rng) -> dict:
    """Parameters of every kind far from their defaults: matrices 2x PyTorch's uniform bound,
    biases and norm shifts N(0, 0.3^2), gains 1 + N(0, 0.3^2), embeddings N(0, 0.8^2)."""
    out = {}
    for name, p in net.param_shapes().items():
        if p.matrix and p.fan_in:  # (a tied head's embedding table is a matrix without a fan-in)
            w = rng.uniform(-2, 2, p.shape) / np.sqrt(p.fan_in)
        elif p.std is not None:
            w = 0.8 * rng.standard_normal(p.shape)
        elif p.fill == 1.0:
            w = 1 + 0.3 * rng.standard_normal(p.shape)
        else:
            w = 0.3 * rng.standard_normal(p.shape)
        out[name] = w.astype(np.float32)
    return out


_RUNS: dict = {}


def run_step(name, path, gpu):
    """(net, params, idx, targets, iteration, scale, scaled grads, loss, logits, eval (sum, counted))
    of program 'eval' then one train_step, cached per case."""
    if (name, path) not in _RUNS:
        _RUNS[name, path] = _run_step(name, path, gpu)
    return _RUNS[name, path]


def _run_step(name, path, gpu):
    from webmp.testing.probe import cached_runtime

    corpus = tiny_corpus()
    cfg = TrainConfig(
        model_spec=NETS[name], batch_size=BATCH, precision="fp32" if path == "fp32" else "mixed",
        init_scale=1024.0, log_every=1, steps=10, warmup=0, schedule="constant", val_tokens=30,
    )  # fmt: skip
    net = cfg.model_spec
    params = enlarged(net, np.random.default_rng(7))
    plan, blob = initial_weights_blob(*build_plan(cfg, corpus, path), params)
    rt = cached_runtime(plan, blob, gpu)
    rt.run("eval")
    ev = (
        float(np.frombuffer(rt.read("val_loss_sum"), np.float32)[0]),
        np.frombuffer(rt.read("eval_result"), np.uint32),
    )
    state = decode_state(rt.read("state"))
    rt.run("train_step")
    grads = {
        p["name"]: np.frombuffer(rt.read(p["grad"]), np.float32).reshape(p["shape"]).astype(np.float64)
        for p in plan["params"]
    }
    logits = np.frombuffer(rt.read("logits"), np.float32).reshape(BATCH * T, V)
    idx, targets = ref.gather_windows(corpus.train, 0, BATCH, T, cfg.seed)
    loss = decode_state(rt.read("state"))["loss"]
    return net, params, corpus, idx, targets, state, grads, loss, logits, ev


def worst_relative(got: dict, want: dict) -> dict:
    return {k: float(np.abs(got[k] - want[k]).max() / np.abs(want[k]).max()) for k in want}


@pytest.mark.parametrize("name", NETS)
def test_nodes_forward_and_backward_match_the_float64_reference(name, path, gpu):
    net, params, _, idx, targets, state, grads, loss, logits, _ = run_step(name, path, gpu)
    scale = state["scale"]
    assert scale == (1.0 if path == "fp32" else 1024.0)
    common = dict(seed=0, iteration=state["iteration"])
    loss_s, g_s, logits_s = SeqReference(net, params, path, loss_scale=scale, **common).gradients(
        idx, targets
    )
    loss64, g64, logits64 = SeqReference(net, params, None, **common).gradients(idx, targets)
    assert set(grads) == set(g64)
    stored = worst_relative(grads, g_s) | {"logits": worst_relative({"l": logits}, {"l": logits_s})["l"]}
    exact = worst_relative({k: v / scale for k, v in grads.items()}, g64)
    exact["logits"] = worst_relative({"l": logits}, {"l": logits64})["l"]
    MEASURED[name, path] = (max(stored.values()), max(exact.values()))
    print(f"{name} {path}: vs stored {MEASURED[name, path][0]:.3g}, vs exact {MEASURED[name, path][1]:.3g}")
    assert max(stored.values()) <= TOL_STORED[path], f"{path}: normwise errors {stored}"
    assert max(exact.values()) <= TOL_EXACT[path], f"{path}: normwise errors {exact}"
    assert abs(loss - loss_s) <= TOL_STORED[path] * loss_s
    assert abs(loss - loss64) <= TOL_EXACT[path] * loss64


@pytest.mark.parametrize("name", NETS)
def test_the_validation_loss_is_the_references(name, path, gpu):
    """Program 'eval' (before the step): the summed loss over the 29 next characters of the first
    30 validation characters, in 5 consecutive windows (2 chunks of 3 windows: the last 13 rows
    padding), dropout off; the same bounds as the loss in the training step."""
    net, params, corpus, *_, ev = run_step(name, path, gpu)
    total, (_, counted) = ev
    val = corpus.val[:30]
    n = -(-(len(val) - 1) // T)
    idx, targets = ref.gather_windows_eval(val, n, T, 0)
    assert counted == len(val) - 1
    for store, tol in ((path, TOL_STORED[path]), (None, TOL_EXACT[path])):
        logits, _ = SeqReference(net, params, store).forward(idx)
        rows, _, _ = ref.softmax_xent(logits, targets.astype(np.int64))
        want = rows.sum() / counted
        assert abs(total / counted - want) <= tol * want, (store, total / counted, want)


def small_text() -> str:
    rng = np.random.default_rng(3)
    words = ["the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ", "dog. "]
    return "".join(rng.choice(words, size=600))


@pytest.mark.slow  # two runs of 200 steps: ~90 s on a 2-core CPU adapter
def test_a_three_block_gpt_from_layers_trains_in_mixed_and_fp32(tmp_path):
    """On 9 words in random order (28 characters, a unigram entropy of ~4.4 bits) both precisions
    fall below a third of it on the validation split (what is left: which word comes next, ~3.2
    bits per word of ~4.9 characters), within 0.05 bits of each other (measured: 2e-6 bits), no step
    skipped."""
    (tmp_path / "text.txt").write_text(small_text())
    corpus = tokenize(small_text(), "t", "t", "0")
    (tmp_path / "gpt.json").write_text(json.dumps(gpt_spec(corpus.vocab_size, 32, 2, 3, 16)))
    bits = {}
    for precision in ("mixed", "fp32"):
        out = tmp_path / precision
        flags = [
            "--model-spec",
            str(tmp_path / "gpt.json"),
            "--data",
            str(tmp_path / "text.txt"),
            "--steps",
            "200",
        ]
        flags += ["--batch-size", "8", "--quiet", "--precision", precision, "--out", str(out)]
        assert cli(["train", *flags]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["skipped_steps"] == 0
        bits[precision] = summary["val_bits_per_char"]
        assert bits[precision] < summary["unigram_bits_per_char"] / 3, summary
    assert abs(bits["mixed"] - bits["fp32"]) <= 0.05, bits
