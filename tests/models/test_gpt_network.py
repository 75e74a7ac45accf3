"""The built-in GPT as a network of layers (webmp.nn.gpt.gpt_network; its plan webmp/models/gpt.py's
GPTNet): its parameters are the GPT's (names, shapes, working copies, weight decay), its plan draws
GPT-2's initialisation exactly as gpt_init does, GPT-2's init rule on other networks, and the same
network given as a file (model 'net', a token network under its own buffer names) trains to the
GPT's curve bit for bit, tied head or not.

That the GPT's plans are the ones it had when its dispatches were listed by hand (plan JSON and
blob, 12 configurations, and its curve) is scripts/fingerprint.py's comparison, run before and after
the change.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from webmp.config import TrainConfig
from webmp.data.text import tokenize
from webmp.models import build_plan
from webmp.models.gpt import build_gpt_plan, gpt_decays, gpt_init, gpt_param_shapes
from webmp.nn import Network
from webmp.nn.gpt import gpt_names, gpt_network

V, D, L, H, T = 11, 16, 3, 2, 8


@pytest.mark.parametrize("tie_head", [True, False])
def test_the_gpt_network_has_the_gpts_parameters(tie_head):
    net = gpt_network(V, D, L, H, T, tie_head)
    shapes, names = net.param_shapes(), gpt_names(L, tie_head)
    assert list(names) == list(shapes)  # trace order is gpt_param_shapes' order
    assert {names[k]: tuple(p.shape) for k, p in shapes.items()} == gpt_param_shapes(V, D, L, T, tie_head)
    assert list(map(names.get, shapes)) == list(gpt_param_shapes(V, D, L, T, tie_head))
    copied = {f"{w}{l}" for l in range(L) for w in ("Wqkv", "Wo", "W1", "W2")} | {
        "wte" if tie_head else "Whead"
    }
    assert {names[k] for k, p in shapes.items() if p.matrix} == copied
    assert {names[k] for k, p in shapes.items() if p.decay} == {n for n in names.values() if gpt_decays(n)}
    assert net.tied_head == tie_head and net.init == "gpt2" and (net.context, net.classes) == (T, V)
    # a preset, but a network a file could hold: it validates as one and comes back the same
    again = Network.from_json(json.dumps(net.model_dump()))
    assert again == net and again.trace() == net.trace()


def tiny_corpus():
    rng = np.random.default_rng(5)
    corpus = tokenize("".join(rng.choice(list("abcdefghij "), size=400)), "tiny", "test", "0")
    assert corpus.vocab_size == V
    return corpus


@pytest.mark.parametrize("tie_head", [True, False])
def test_the_plan_draws_gpt_init_and_takes_given_parameters(tie_head):
    """The plan's initial masters are gpt_init's from numpy's generator seeded by cfg.seed, bit for
    bit (the network's ParamShapes, drawn in trace order); given parameters are taken as they are."""
    cfg = TrainConfig(
        model="gpt", n_layer=L, n_head=H, d_model=D, context=T, tie_head=tie_head, batch_size=2, seed=11
    )
    plan, blob = build_plan(cfg, tiny_corpus(), "native")
    want = gpt_init(V, D, L, H, T, np.random.default_rng(11), tie_head)
    assert [p["name"] for p in plan["params"]] == list(want)
    for name, value in want.items():
        assert np.array_equal(masters(plan, blob)[name], value), name
    assert want["Wo1"].std() < 0.6 * want["Wqkv1"].std()  # the residual projections' smaller std
    given = {k: np.full_like(v, 0.25) for k, v in want.items()}
    plan, blob = build_gpt_plan(cfg, tiny_corpus(), "fp32", params=given)
    assert all((v == 0.25).all() for v in masters(plan, blob).values())
    with pytest.raises(ValueError, match="params must have exactly the shapes"):
        build_gpt_plan(cfg, tiny_corpus(), "fp32", params={k: v for k, v in given.items() if k != "wpe"})


def masters(plan, blob) -> dict[str, np.ndarray]:
    """The parameters' initial f32 masters in the plan's blob, by name."""
    buffers = {b["name"]: b for b in plan["buffers"]}
    out = {}
    for p in plan["params"]:
        b = buffers[p["master"]]
        at = b["init"]
        out[p["name"]] = np.frombuffer(blob, np.float32, at["bytes"] // 4, at["offset"]).reshape(b["shape"])
    return out


def res(*layers):
    return {"type": "residual", "layers": list(layers)}


def test_gpt2_init_on_another_network():
    """init gpt2: every matrix N(0, 0.02), the projection ending a residual branch (its last layer
    with parameters, past a dropout) N(0, 0.02 / sqrt(blocks)), biases 0, gains 1; a branch ending
    in a norm has none."""
    spec = {
        "input": {"tokens": V, "context": T},
        "init": "gpt2",
        "layers": [
            {"type": "embedding", "dim": 8},
            res(
                {"type": "linear", "out": 12}, {"type": "relu"}, {"type": "linear", "out": 8},
                {"type": "dropout"},
            ),
            res({"type": "causal_self_attention", "heads": 2}),
            res({"type": "linear", "out": 8}, {"type": "rmsnorm"}),
            {"type": "linear", "out": V},
        ],
    }  # fmt: skip
    p = Network.from_dict(spec).param_shapes()
    end = 0.02 / math.sqrt(3)
    stds = {k: v.std for k, v in p.items() if len(v.shape) == 2}
    assert stds == {
        "layers.0.weight": 0.02, "layers.0.positions": 0.02, "layers.1.layers.0.weight": 0.02,
        "layers.1.layers.2.weight": end, "layers.2.layers.0.qkv.weight": 0.02,
        "layers.2.layers.0.proj.weight": end, "layers.3.layers.0.weight": 0.02, "layers.4.weight": 0.02,
    }  # fmt: skip
    assert p["layers.1.layers.0.bias"].fill == 0.0 and p["layers.2.layers.0.qkv.bias"].fill == 0.0
    assert p["layers.3.layers.1.weight"].fill == 1.0 and p["layers.4.bias"].fill == 0.0
    torch_default = Network.from_dict({**spec, "init": "torch"}).param_shapes()
    assert (
        torch_default["layers.1.layers.2.weight"].std is None and torch_default["layers.0.weight"].std == 1.0
    )


@pytest.mark.parametrize(
    "tie_head,precision", [(True, "mixed"), pytest.param(False, "fp32", marks=pytest.mark.slow)]
)
def test_the_gpt_as_a_network_file_trains_to_the_gpts_curve_bit_for_bit(tmp_path, tie_head, precision):
    """gpt_network's spec, trained as model 'net' (TokenNet: its own buffer names, a residual's
    gradient added into a buffer of its own), gives the gpt's logged losses, scales and validation
    loss from the same seed: the same draws, dispatches and roundings."""
    from webmp.train.loop import Trainer

    common = dict(
        steps=12, batch_size=4, log_every=4, checkpoint_every=0, precision=precision, val_tokens=512, seed=3,
        lr=3e-3, warmup=3, min_lr=3e-4, weight_decay=0.1,  # (the defaults differ between gpt and net)
    )  # fmt: skip
    data = tmp_path / "text.txt"
    data.write_text(tiny_corpus_text())
    gpt = TrainConfig(model="gpt", n_layer=2, n_head=H, d_model=D, context=T, tie_head=tie_head, **common)
    vocab = len(set(tiny_corpus_text()))
    spec = gpt_network(vocab, D, 2, H, T, tie_head).model_dump()
    curves = []
    for name, cfg in (("gpt", gpt), ("net", TrainConfig(model_spec=spec, **common))):
        cfg = cfg.model_copy(update={"data": str(data)})
        t = Trainer(cfg, out=tmp_path / name, progress=False, log=None)
        t.run()
        summary = json.loads((t.run_dir.path / "summary.json").read_text())
        curves.append(
            [(r["step"], r["loss"], r["scale"], r.get("grad_norm")) for r in t.run_dir.read_metrics()]
            + [summary["val_loss"], summary["skipped_steps"]]
        )
    assert curves[0] == curves[1]
    assert len(curves[0]) == 12 + 2 and curves[0][-1] == 0  # every step read, none skipped


def tiny_corpus_text() -> str:
    rng = np.random.default_rng(3)
    return "".join(rng.choice(["the ", "quick ", "brown ", "fox ", "jumps. "], size=300))
