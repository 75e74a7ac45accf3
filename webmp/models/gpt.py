"""The character GPT (model 'gpt'): a pre-LayerNorm GPT-2-style transformer over a TextCorpus, the
training plan of webmp.reference.gpt_loss_and_grads (parameter names, shapes, initialisation,
weight decay and the points where values are stored in the activation format all follow it).

Rows are r = b * T + t (window b, position t) throughout; R = batch * T rows are the loss rows, so
the scaler's B and softmax_xent's B are R, and gather_windows advances one window per T of them
(pos_per_window = T).

Buffers per layer l (h: the activation format; f32 where stated):
  x_in = previous layer's x (layer 0: X0, the embedding), a = LN1(x_in), qkv, P (kept for the
  backward pass), O, x_mid = x_in + (O Wo + bo), m = LN2(x_mid), z = m W1 + b1 (GELU applied on
  load by W2's matmul and its weight gradient), x = x_mid + (gelu(z) W2 + b2); LN statistics f32.
Shared by the layers: S (f32 scores, reused for dP in the backward pass), dS, and the backward
deltas dx (the residual stream's gradient, updated in place with add_h), dY (the gradient entering
a LayerNorm: dxf, dm, da), dln (a LayerNorm's input gradient before the residual add), dO, dqkv, dz.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..corpus import TextCorpus
from ..data import check_tokens, eval_windows, perm_bits
from ..plan import EvalSpec, Plan
from ..tilecache import TileTable
from .common import EVAL, TRAIN_STEP, ModelBuilder

GELU = ops.ACT_CODES["gelu"]


GPT_DECAY = ("wte", "wpe", "Whead", "Wqkv{l}", "Wo{l}", "W1{l}", "W2{l}")
"""Names of the parameters AdamW decays ({l}: any layer number): every 2-D parameter, embeddings
included, as nanoGPT does; biases and LayerNorm gains/shifts are not decayed. Embeddings decay
because with a tied head wte *is* the head's matrix (excluding it would leave the tied head
undecayed, and make decay depend on tie_head), and one rule ("matrices decay") is simpler to state
and to check than minGPT's per-module list."""


def gpt_decays(name: str) -> bool:
    """Whether parameter `name` gets weight decay (it matches a pattern of GPT_DECAY)."""
    pats = [re.escape(p).replace(r"\{l\}", r"\d+") for p in GPT_DECAY]
    return any(re.fullmatch(p, name) for p in pats)


def gpt_param_shapes(V: int, D: int, n_layer: int, Tmax: int, tie_head: bool) -> dict:
    """{name: shape} of the GPT's parameters, in a fixed order (embeddings, layers, final LN, head)."""
    shapes: dict[str, tuple[int, ...]] = {"wte": (V, D), "wpe": (Tmax, D)}
    for l in range(n_layer):
        shapes |= {
            f"ln1_g{l}": (D,),
            f"ln1_b{l}": (D,),
            f"Wqkv{l}": (D, 3 * D),
            f"bqkv{l}": (3 * D,),
            f"Wo{l}": (D, D),
            f"bo{l}": (D,),
            f"ln2_g{l}": (D,),
            f"ln2_b{l}": (D,),
            f"W1{l}": (D, 4 * D),
            f"b1{l}": (4 * D,),
            f"W2{l}": (4 * D, D),
            f"b2{l}": (D,),
        }
    shapes |= {"lnf_g": (D,), "lnf_b": (D,)}
    if not tie_head:
        shapes |= {"Whead": (D, V), "bhead": (V,)}
    return shapes


def gpt_init(V: int, D: int, n_layer: int, n_head: int, Tmax: int, rng, tie_head: bool) -> dict:
    """float32 parameters with GPT-2's initialisation: every matrix (wte, wpe, Wqkv, W1, Whead)
    normal(0, 0.02), except the residual projections Wo and W2, normal(0, 0.02 / sqrt(2 n_layer))
    (each layer adds two branches to the residual stream); biases 0; LayerNorm gains 1, shifts 0.
    Drawn in gpt_param_shapes' order from `rng` (a numpy Generator), one rng.normal per matrix."""
    if D % n_head:
        raise ValueError(f"D = {D} is not a multiple of n_head = {n_head}")
    params = {}
    for name, shape in gpt_param_shapes(V, D, n_layer, Tmax, tie_head).items():
        if len(shape) == 2:
            std = 0.02 / math.sqrt(2 * n_layer) if name.startswith(("Wo", "W2")) else 0.02
            params[name] = rng.normal(0.0, std, shape).astype(np.float32)
        elif name.startswith(("ln1_g", "ln2_g", "lnf_g")):
            params[name] = np.ones(shape, np.float32)
        else:
            params[name] = np.zeros(shape, np.float32)
    return params


def build_gpt_plan(
    cfg: TrainConfig,
    corpus: TextCorpus,
    path: str,
    tiles: TileTable | None = None,
    *,
    params: dict[str, np.ndarray] | None = None,
) -> tuple[Plan, bytes]:
    """The GPT's plan (shape: cfg.n_layer, n_head, d_model, context, tie_head): programs train_step
    (batch_size windows of `context` tokens from the train split) and eval (over the first
    cfg.val_tokens characters of the validation split, in consecutive windows: next-character
    accuracy into eval_result, the summed loss into val_loss_sum).

    params: the initial parameters by name (gpt_param_shapes); default
    gpt_init with numpy's generator seeded by cfg.seed."""
    mb = ModelBuilder(cfg, path, tiles)
    pb = mb.pb
    V, D, T, H, L = corpus.vocab_size, cfg.d_model, cfg.context, cfg.n_head, cfg.n_layer
    tie_head = cfg.tie_head
    if L < 1 or D % H or (D // H) % 2:
        raise ValueError(f"d_model {D} must be n_head {H} times an even head size, n_layer {L} >= 1")
    d = D // H
    Bw = cfg.batch_size
    R = Bw * T
    train = check_tokens(corpus.train, V, T, f"{corpus.name} (train split)")
    val = np.asarray(corpus.val, np.uint32)
    if cfg.val_tokens:
        val = val[: cfg.val_tokens]
    shapes = gpt_param_shapes(V, D, L, T, tie_head)
    if params is None:
        params = gpt_init(V, D, L, H, T, np.random.default_rng(cfg.seed), tie_head)
    if set(params) != set(shapes) or any(tuple(np.shape(params[k])) != s for k, s in shapes.items()):
        raise ValueError(f"params must have exactly the shapes {shapes}")

    pb.u32("tokens", (len(train),), "data", train)
    pb.u32("val_tokens", (max(1, len(val)),), "data", val if len(val) else None)
    mb.bookkeeping(R)
    pb.u32("idx", (R,), "activations")
    pb.u32("targets", (R,), "activations")

    # parameters, in gpt_param_shapes' order; matrices read by matmuls get a working copy (wte too
    # when it is the tied head's matrix), decay per gpt_decays
    copied = {f"{w}{l}" for l in range(L) for w in ("Wqkv", "Wo", "W1", "W2")} | {"Whead"}
    if tie_head:
        copied.add("wte")
    P: dict[str, Any] = {}
    for name, shape in shapes.items():
        init = np.asarray(params[name], np.float32)
        copy_shape = (shape[0], shape[1]) if name in copied else None
        P[name] = mb.param(name, init, copy_shape)
        P[name]["decay"] = gpt_decays(name)

    def w(name: str) -> str:
        return str(P[name]["copy"])

    def m(name: str) -> str:
        return str(P[name]["master"])

    def g(name: str) -> str:
        return str(P[name]["grad"])

    # activations
    Z = Bw * H
    pb.h("X0", R, D)
    lay: list[dict[str, str]] = []
    for l in range(L):
        lay.append(
            {
                "x_in": "X0" if l == 0 else lay[l - 1]["x"],
                "a": pb.h(f"a{l}", R, D),
                "ln1": pb.f32(f"ln1_stats{l}", (R, 2), "activations"),
                "qkv": pb.h(f"qkv{l}", R, 3 * D),
                "P": pb.h(f"P{l}", Z * T, T),
                "O": pb.h(f"O{l}", R, D),
                "x_mid": pb.h(f"x_mid{l}", R, D),
                "m": pb.h(f"m{l}", R, D),
                "ln2": pb.f32(f"ln2_stats{l}", (R, 2), "activations"),
                "z": pb.h(f"z{l}", R, 4 * D),
                "x": pb.h(f"x{l}", R, D),
            }
        )
    x_final = lay[-1]["x"]
    pb.f32("S", (Z * T, T), "activations")  # scores; dP in the backward pass
    pb.h("xf", R, D)
    pb.f32("lnf_stats", (R, 2), "activations")
    pb.f32("logits", (R, V), "activations")
    if tie_head:
        pb.f32("head_bias", (V,), "other")  # zeros: the tied head has no bias
    # backward
    pb.h("dlogits", R, V)
    for name, cols in (("dx", D), ("dY", D), ("dln", D), ("dO", D), ("dqkv", 3 * D), ("dz", 4 * D)):
        pb.h(name, R, cols)
    pb.h("dS", Z * T, T)
    pb.u32("spans", (V, 2), "activations")
    pb.u32("order", (R,), "activations")
    att: dict[str, Any] = {"B": Bw, "T": T, "H": H, "d": d}

    def ln_fwd(program: str, x: str, gname: str, bname: str, y: str, stats: str) -> None:
        ops.layernorm_fwd(pb, program, Z=x, gamma=m(gname), beta=m(bname), Y=y, stats=stats, M=R, N=D)

    def forward(program: str) -> None:
        ops.embed_fwd(pb, program, idx="idx", wte=m("wte"), wpe=m("wpe"), X="X0", R=R, T=T, D=D)
        for l, c in enumerate(lay):
            ln_fwd(program, c["x_in"], f"ln1_g{l}", f"ln1_b{l}", c["a"], c["ln1"])
            mb.matmul(
                program, "matmul_fwd", A=c["a"], B=w(f"Wqkv{l}"), C=c["qkv"], bias=m(f"bqkv{l}"),
                M=R, N=3 * D, K=D,
            )  # fmt: skip
            ops.attention_matmul(pb, program, "scores", qkv=c["qkv"], S="S", **att)
            ops.attn_softmax_fwd(pb, program, S="S", P=c["P"], **att)
            ops.attention_matmul(pb, program, "values", P=c["P"], qkv=c["qkv"], O=c["O"], **att)
            mb.matmul(
                program, "matmul_fwd", A=c["O"], B=w(f"Wo{l}"), C=c["x_mid"], bias=m(f"bo{l}"),
                M=R, N=D, K=D,
            )  # fmt: skip
            ops.add_h(pb, program, A=c["x_in"], Y=c["x_mid"], M=R, N=D)
            ln_fwd(program, c["x_mid"], f"ln2_g{l}", f"ln2_b{l}", c["m"], c["ln2"])
            mb.matmul(
                program, "matmul_fwd", A=c["m"], B=w(f"W1{l}"), C=c["z"], bias=m(f"b1{l}"),
                M=R, N=4 * D, K=D,
            )  # fmt: skip
            mb.matmul(
                program, "matmul_fwd", A=c["z"], B=w(f"W2{l}"), C=c["x"], bias=m(f"b2{l}"),
                M=R, N=D, K=4 * D, a_act=GELU,
            )  # fmt: skip
            ops.add_h(pb, program, A=c["x_mid"], Y=c["x"], M=R, N=D)
        ln_fwd(program, x_final, "lnf_g", "lnf_b", "xf", "lnf_stats")
        if tie_head:  # logits = xf wte^T
            mb.matmul(
                program, "matmul_logits", A="xf", B=w("wte"), C="logits", bias="head_bias",
                M=R, N=V, K=D, trans_b=1,
            )  # fmt: skip
        else:
            mb.matmul(
                program, "matmul_logits", A="xf", B=w("Whead"), C="logits", bias=m("bhead"),
                M=R, N=V, K=D,
            )  # fmt: skip

    def layernorm_back(program: str, x: str, stats: str, gname: str, bname: str, dZ: str = "dln") -> None:
        """dY (the LayerNorm output's gradient) -> its parameters' gradients and dZ."""
        ops.layernorm_wgrad(pb, program, dY="dY", Z=x, stats=stats, dgamma=g(gname), dbeta=g(bname), M=R, N=D)
        ops.layernorm_bwd(pb, program, dY="dY", Z=x, stats=stats, gamma=m(gname), dZ=dZ, M=R, N=D)

    # --- the training step ---------------------------------------------------------------------
    S = TRAIN_STEP
    ops.gather_windows(
        pb, S, tokens="tokens", idx="idx", targets="targets", n_tokens=len(train), T=T, batch=Bw,
        seed=cfg.seed, perm_bits=perm_bits(len(train) - T), pos_per_window=T,
    )  # fmt: skip
    forward(S)
    ops.softmax_xent(
        pb, S, logits="logits", labels="targets", loss_rows="loss_rows", dlogits="dlogits", B=R, C=V
    )
    # head: its weight gradient, and dxf into dY
    if tie_head:  # g_wte = dlogits^T xf (the embedding's part is added by embed_wgrad at the end)
        mb.matmul(S, "matmul_wgrad", A="dlogits", B="xf", C=g("wte"), M=V, N=D, K=R, trans_a=1)
        mb.matmul(S, "matmul_plain", A="dlogits", B=w("wte"), C="dY", M=R, N=D, K=V)
    else:
        mb.matmul(S, "matmul_wgrad", A="xf", B="dlogits", C=g("Whead"), M=D, N=V, K=R, trans_a=1)
        ops.colsum(pb, S, G="dlogits", out=g("bhead"), M=R, N=V)
        mb.matmul(S, "matmul_plain", A="dlogits", B=w("Whead"), C="dY", M=R, N=D, K=V, trans_b=1)
    layernorm_back(S, x_final, "lnf_stats", "lnf_g", "lnf_b", dZ="dx")
    for l in reversed(range(L)):
        c = lay[l]
        # MLP branch: x = x_mid + gelu(z) W2 + b2 receives dx
        mb.matmul(
            S, "matmul_wgrad", A=c["z"], B="dx", C=g(f"W2{l}"), M=4 * D, N=D, K=R, a_act=GELU, trans_a=1
        )
        ops.colsum(pb, S, G="dx", out=g(f"b2{l}"), M=R, N=D)
        mb.matmul(
            S, "matmul_dgrad", A="dx", B=w(f"W2{l}"), C="dz", Zprev=c["z"], M=R, N=4 * D, K=D,
            trans_b=1, out_act=GELU,
        )  # fmt: skip
        mb.matmul(S, "matmul_wgrad", A=c["m"], B="dz", C=g(f"W1{l}"), M=D, N=4 * D, K=R, trans_a=1)
        ops.colsum(pb, S, G="dz", out=g(f"b1{l}"), M=R, N=4 * D)
        mb.matmul(S, "matmul_plain", A="dz", B=w(f"W1{l}"), C="dY", M=R, N=D, K=4 * D, trans_b=1)
        layernorm_back(S, c["x_mid"], c["ln2"], f"ln2_g{l}", f"ln2_b{l}")
        ops.add_h(pb, S, A="dln", Y="dx", M=R, N=D)
        # attention branch: x_mid = x_in + O Wo + bo receives dx
        mb.matmul(S, "matmul_wgrad", A=c["O"], B="dx", C=g(f"Wo{l}"), M=D, N=D, K=R, trans_a=1)
        ops.colsum(pb, S, G="dx", out=g(f"bo{l}"), M=R, N=D)
        mb.matmul(S, "matmul_plain", A="dx", B=w(f"Wo{l}"), C="dO", M=R, N=D, K=D, trans_b=1)
        ops.attention_matmul(pb, S, "dv", P=c["P"], dO="dO", dqkv="dqkv", **att)
        ops.attention_matmul(pb, S, "dp", dO="dO", qkv=c["qkv"], dP="S", **att)
        ops.attn_softmax_bwd(pb, S, P=c["P"], dP="S", dS="dS", **att)
        ops.attention_matmul(pb, S, "dq", dS="dS", qkv=c["qkv"], dqkv="dqkv", **att)
        ops.attention_matmul(pb, S, "dk", dS="dS", qkv=c["qkv"], dqkv="dqkv", **att)
        mb.matmul(S, "matmul_wgrad", A=c["a"], B="dqkv", C=g(f"Wqkv{l}"), M=D, N=3 * D, K=R, trans_a=1)
        ops.colsum(pb, S, G="dqkv", out=g(f"bqkv{l}"), M=R, N=3 * D)
        mb.matmul(S, "matmul_plain", A="dqkv", B=w(f"Wqkv{l}"), C="dY", M=R, N=D, K=3 * D, trans_b=1)
        layernorm_back(S, c["x_in"], c["ln1"], f"ln1_g{l}", f"ln1_b{l}")
        ops.add_h(pb, S, A="dln", Y="dx", M=R, N=D)
    ops.token_rows(pb, S, idx="idx", spans="spans", order="order", R=R, V=V)
    ops.embed_wgrad(
        pb, S, spans="spans", order="order", dX="dx", dwte=g("wte"), dwpe=g("wpe"), R=R, T=T, V=V, D=D,
        accumulate=tie_head,
    )  # fmt: skip
    mb.optimizer(S, R)

    # --- evaluation over the validation split: next-character accuracy and the summed loss -----
    E = EVAL
    io: dict[str, Any] = {"logits": "logits", "labels": "targets", "result": "eval_result", "B": R, "C": V}
    chunks = ops.cdiv(eval_windows(len(val), T), Bw) if len(val) > 1 else 0
    pb.f32("val_loss_partial", (max(1, chunks),), "other")
    pb.f32("val_loss_sum", (1,), "other")
    sums: dict[str, Any] = {"partial": "val_loss_partial", "total": "val_loss_sum", "chunks": max(1, chunks)}
    ops.eval_reset(pb, E, **io)
    for chunk in range(chunks):
        ops.gather_windows_eval(
            pb, E, tokens="val_tokens", idx="idx", targets="targets", n_tokens=len(val), T=T, batch=Bw,
            offset=chunk * Bw,
        )  # fmt: skip
        forward(E)
        ops.eval_count(pb, E, **io)
        ops.eval_loss_chunk(pb, E, logits="logits", labels="targets", B=R, C=V, chunk=chunk, **sums)
    ops.eval_loss_total(pb, E, logits="logits", labels="targets", B=R, C=V, **sums)
    evaluation: EvalSpec = {
        "result_buffer": "eval_result",
        "test_rows": max(0, len(val) - 1),
        "loss_buffer": "val_loss_sum",
    }
    return mb.finish([V, *([D] * L), V], evaluation)
