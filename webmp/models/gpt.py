"""The character GPT (model 'gpt'): a pre-LayerNorm GPT-2-style transformer over a TextCorpus, the
training plan of webmp.testing.reference.gpt_loss_and_grads (parameter names, shapes, initialisation,
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

The forward pass (GPTForward: its buffers and dispatches) is shared by the training plan
(build_gpt_plan) and the sampling plan of `webmp sample` (build_gpt_sample_plan).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import TypedDict

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..data.tables import check_tokens, eval_windows, perm_bits
from ..data.text import TextCorpus
from ..engine.plan import (
    PLAN_FORMAT,
    EvalSpec,
    Plan,
    PlanBuilder,
    SamplePlan,
    SampleSpec,
    memory_by_category,
    pack_h,
)
from ..engine.tiles import TileTable
from .common import EVAL, EVAL_FLAGS, Init, ModelBuilder, Param, replayed

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


def check_shape(D: int, H: int, L: int) -> None:
    """ValueError unless d_model D is n_head H times an even head size and n_layer L >= 1."""
    if L < 1 or D % H or (D // H) % 2:
        raise ValueError(f"d_model {D} must be n_head {H} times an even head size, n_layer {L} >= 1")


def working_copies(n_layer: int, tie_head: bool) -> set[str]:
    """The parameters with a working copy in the activation format: the matrices read by matmuls
    (Wqkv, Wo, W1, W2 of every layer, Whead), and wte when it is the tied head's matrix."""
    copied = {f"{w}{l}" for l in range(n_layer) for w in ("Wqkv", "Wo", "W1", "W2")} | {"Whead"}
    return copied | {"wte"} if tie_head else copied


def check_params(params: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> None:
    """ValueError unless `params` has exactly the parameters and shapes of gpt_param_shapes."""
    if set(params) != set(shapes) or any(tuple(np.shape(params[k])) != s for k, s in shapes.items()):
        raise ValueError(f"params must have exactly the shapes {shapes}")


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
    """float32 parameters with GPT-2's initialisation (gpt_init_param), drawn in gpt_param_shapes'
    order from `rng` (a numpy Generator), one rng.normal per matrix."""
    if D % n_head:
        raise ValueError(f"D = {D} is not a multiple of n_head = {n_head}")
    shapes = gpt_param_shapes(V, D, n_layer, Tmax, tie_head)
    return {name: gpt_init_param(name, shape, n_layer, rng) for name, shape in shapes.items()}


def gpt_init_param(name: str, shape: tuple[int, ...], n_layer: int, rng: np.random.Generator) -> np.ndarray:
    """Parameter `name`'s GPT-2 initialisation: a matrix (wte, wpe, Wqkv, W1, Whead) normal(0, 0.02),
    except the residual projections Wo and W2, normal(0, 0.02 / sqrt(2 n_layer)) (each layer adds
    two branches to the residual stream); biases 0; LayerNorm gains 1, shifts 0."""
    if len(shape) == 2:
        std = 0.02 / math.sqrt(2 * n_layer) if name.startswith(("Wo", "W2")) else 0.02
        return rng.normal(0.0, std, shape).astype(np.float32)
    if name.startswith(("ln1_g", "ln2_g", "lnf_g")):
        return np.ones(shape, np.float32)
    return np.zeros(shape, np.float32)


class Heads(TypedDict):
    """The attention's shape, as the attention launchers take it: B windows of T positions, H heads
    of size d."""

    B: int
    T: int
    H: int
    d: int


class GPTForward:
    """The GPT's forward pass over R = windows * T rows (r = b * T + t), shared by the training plan
    (build_gpt_plan: train_step and eval) and the sampling plan (build_gpt_sample_plan): the
    constructor declares the activation buffers, in this order, and `emit` adds the dispatches from
    the token ids in `idx` to the f32 logits [R, V] in "logits".

    master(name) / copy(name) give the buffer of a parameter's f32 master and of its working copy in
    the activation format (the matrices read by matmuls: Wqkv, Wo, W1, W2, Whead, and wte when it
    is the tied head's matrix)."""

    def __init__(
        self,
        mb: ModelBuilder,
        *,
        V: int,
        D: int,
        T: int,
        H: int,
        L: int,
        windows: int,
        tie_head: bool,
        master: Callable[[str], str],
        copy: Callable[[str], str],
    ):
        self.mb, self.pb = mb, mb.pb
        self.V, self.D, self.T, self.L, self.tie_head = V, D, T, L, tie_head
        self.R = R = windows * T
        self.master, self.copy = master, copy
        self.att: Heads = {"B": windows, "T": T, "H": H, "d": D // H}
        pb, Z = self.pb, windows * H
        pb.h("X0", R, D)
        self.lay: list[dict[str, str]] = []
        for l in range(L):
            self.lay.append(
                {
                    "x_in": "X0" if l == 0 else self.lay[l - 1]["x"],
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
        self.x_final = self.lay[-1]["x"]
        pb.f32("S", (Z * T, T), "activations")  # scores; dP in the training plan's backward pass
        pb.h("xf", R, D)
        pb.f32("lnf_stats", (R, 2), "activations")
        pb.f32("logits", (R, V), "activations")
        if tie_head:
            pb.f32("head_bias", (V,), "other")  # zeros: the tied head has no bias
        # the tied head's logits read wte transposed: with the weights form "transposed" (as the
        # backward pass: ModelBuilder.weight_transposed) a transposed copy makes them an A·B product
        self.wte_t = None
        if tie_head and mb.tiles.weights == "transposed":
            self.wte_t = pb.h("hT_wte", D, V, "working_weights")

    def _ln(self, program: str, x: str, gname: str, bname: str, y: str, stats: str, flags: str) -> None:
        m = self.master
        ops.layernorm_fwd(
            self.pb, program, Z=x, gamma=m(gname), beta=m(bname), Y=y, stats=stats, M=self.R, N=self.D,
            flags=flags, rows=self.mb.rows,
        )  # fmt: skip

    def emit(self, program: str, flags: str = "flags") -> None:
        """The forward dispatches, idx -> logits, appended to `program`; their f16 stores raise
        overflow bits in `flags`."""
        pb, mb, m, w, att = self.pb, self.mb, self.master, self.copy, self.att
        R, D, T, V = self.R, self.D, self.T, self.V
        ops.embed_fwd(pb, program, idx="idx", wte=m("wte"), wpe=m("wpe"), X="X0", R=R, T=T, D=D, flags=flags)
        for l, c in enumerate(self.lay):
            self._ln(program, c["x_in"], f"ln1_g{l}", f"ln1_b{l}", c["a"], c["ln1"], flags)
            mb.matmul(
                program, "matmul_fwd", A=c["a"], B=w(f"Wqkv{l}"), C=c["qkv"], bias=m(f"bqkv{l}"),
                M=R, N=3 * D, K=D, flags=flags,
            )  # fmt: skip
            mb.attention_matmul(program, "scores", qkv=c["qkv"], S="S", flags=flags, **att)
            ops.attn_softmax_fwd(pb, program, S="S", P=c["P"], flags=flags, rows=mb.rows, **att)
            mb.attention_matmul(program, "values", P=c["P"], qkv=c["qkv"], O=c["O"], flags=flags, **att)
            mb.matmul(
                program, "matmul_fwd", A=c["O"], B=w(f"Wo{l}"), C=c["x_mid"], bias=m(f"bo{l}"),
                M=R, N=D, K=D, flags=flags,
            )  # fmt: skip
            ops.add_h(pb, program, A=c["x_in"], Y=c["x_mid"], M=R, N=D, flags=flags)
            self._ln(program, c["x_mid"], f"ln2_g{l}", f"ln2_b{l}", c["m"], c["ln2"], flags)
            mb.matmul(
                program, "matmul_fwd", A=c["m"], B=w(f"W1{l}"), C=c["z"], bias=m(f"b1{l}"),
                M=R, N=4 * D, K=D, flags=flags,
            )  # fmt: skip
            mb.matmul(
                program, "matmul_fwd", A=c["z"], B=w(f"W2{l}"), C=c["x"], bias=m(f"b2{l}"),
                M=R, N=D, K=4 * D, a_act=GELU, flags=flags,
            )  # fmt: skip
            ops.add_h(pb, program, A=c["x_mid"], Y=c["x"], M=R, N=D, flags=flags)
        self._ln(program, self.x_final, "lnf_g", "lnf_b", "xf", "lnf_stats", flags)
        if self.tie_head and self.wte_t:  # logits = xf wte^T, wte^T as a matrix of its own
            ops.transpose_h(pb, program, X=w("wte"), Y=self.wte_t, rows=V, cols=D)
            mb.matmul(
                program, "matmul_logits", A="xf", B=self.wte_t, C="logits", bias="head_bias",
                M=R, N=V, K=D,
            )  # fmt: skip
        elif self.tie_head:  # logits = xf wte^T
            mb.matmul(
                program, "matmul_logits", A="xf", B=w("wte"), C="logits", bias="head_bias",
                M=R, N=V, K=D, trans_b=1,
            )  # fmt: skip
        else:
            mb.matmul(
                program, "matmul_logits", A="xf", B=w("Whead"), C="logits", bias=m("bhead"),
                M=R, N=V, K=D,
            )  # fmt: skip


def build_gpt_plan(
    cfg: TrainConfig,
    corpus: TextCorpus,
    path: str,
    tiles: TileTable | None = None,
    *,
    params: dict[str, np.ndarray] | None = None,
    rank: int = 0,
    world: int = 1,
    dry: bool = False,
) -> tuple[Plan, bytes]:
    """The GPT's plan (shape: cfg.n_layer, n_head, d_model, context, tie_head): programs train_step
    (batch_size windows of `context` tokens from the train split) and eval (over the first
    cfg.val_tokens characters of the validation split, in consecutive windows: next-character
    accuracy into eval_result, the summed loss into val_loss_sum).

    params: the initial parameters by name (gpt_param_shapes); default
    gpt_init with numpy's generator seeded by cfg.seed. With `world` > 1: data-parallel rank
    `rank`'s plan (ModelBuilder), batch_size / world windows of each global batch. dry: a dry run."""
    mb = ModelBuilder(cfg, path, tiles, rank, world, dry=dry)
    gpt = GPT(mb, corpus, params)
    gpt.train_step()
    mb.optimizer()
    evaluation = gpt.evaluation()
    mb.histograms(gpt.lens_layers())
    return mb.finish([gpt.V, *([gpt.D] * gpt.L), gpt.V], evaluation)


class GPT:
    """The GPT's training plan: the constructor declares its buffers (data, bookkeeping, parameters
    in gpt_param_shapes' order, GPTForward's activations, the backward deltas), the methods add its
    programs."""

    def __init__(self, mb: ModelBuilder, corpus: TextCorpus, params: dict[str, np.ndarray] | None):
        cfg, pb = mb.cfg, mb.pb
        self.mb, self.pb = mb, pb
        self.V, self.D, self.T, self.H, self.L = V, D, T, H, L = (
            corpus.vocab_size, cfg.d_model, cfg.context, cfg.n_head, cfg.n_layer,
        )  # fmt: skip
        self.tie_head = cfg.tie_head
        check_shape(D, H, L)
        self.Bw = Bw = mb.local_batch
        self.R = R = Bw * T
        self.train = check_tokens(corpus.train, V, T, f"{corpus.name} (train split)")
        val = np.asarray(corpus.val, np.uint32)
        self.val = val[: cfg.val_tokens] if cfg.val_tokens else val
        shapes = gpt_param_shapes(V, D, L, T, self.tie_head)
        if params is not None:
            check_params(params, shapes)

        pb.u32("tokens", (len(self.train),), "data", self.train)
        pb.u32("val_tokens", (max(1, len(self.val)),), "data", self.val if len(self.val) else None)
        mb.bookkeeping(R)
        pb.u32("idx", (R,), "activations")
        pb.u32("targets", (R,), "activations")
        # matrices read by matmuls get a working copy (wte too when it is the tied head's matrix)
        copied = working_copies(L, self.tie_head)
        rng = np.random.default_rng(cfg.seed)
        self.P: dict[str, Param] = {}
        for name, shape in shapes.items():
            init = self._initial(name, shape, params, rng)
            self.P[name] = mb.param(name, shape, init, copy=name in copied, decay=gpt_decays(name))
        self.fw = GPTForward(
            mb, V=V, D=D, T=T, H=H, L=L, windows=Bw, tie_head=self.tie_head, master=self.m, copy=self.w
        )
        pb.h("dlogits", R, V)
        for name, cols in (("dx", D), ("dY", D), ("dln", D), ("dO", D), ("dqkv", 3 * D), ("dz", 4 * D)):
            pb.h(name, R, cols)
        pb.h("dS", Bw * H * T, T)
        pb.u32("spans", (V, 2), "activations")
        pb.u32("order", (R,), "activations")

    def _initial(
        self,
        name: str,
        shape: tuple[int, ...],
        params: dict[str, np.ndarray] | None,
        rng: np.random.Generator,
    ) -> Init:
        """Parameter `name`'s initial value: params[name], else drawn from `rng` as gpt_init draws it."""
        if params is not None:
            given = params[name]
            return lambda: np.asarray(given, np.float32)
        return lambda: gpt_init_param(name, shape, self.L, rng)

    def w(self, name: str) -> str:
        """Parameter `name`'s working copy."""
        return str(self.P[name]["copy"])

    def m(self, name: str) -> str:
        """Parameter `name`'s f32 master."""
        return self.P[name]["master"]

    def g(self, name: str) -> str:
        """Parameter `name`'s gradient."""
        return self.P[name]["grad"]

    def train_step(self) -> None:
        """The training step up to complete gradients (grads_program): the next windows, forward,
        the loss and dlogits, then backward from the head through the blocks to the embeddings."""
        mb, pb, S, T, R, V, D = self.mb, self.pb, self.mb.grads_program, self.T, self.R, self.V, self.D
        n_train = len(self.train)
        ops.gather_windows(
            pb, S, tokens="tokens", idx="idx", targets="targets", n_tokens=n_train, T=T, batch=self.Bw,
            seed=mb.cfg.seed, perm_bits=perm_bits(n_train - T), pos_per_window=T, shard=mb.rank * self.Bw,
        )  # fmt: skip
        self.fw.emit(S)
        ops.softmax_xent(
            pb, S, logits="logits", labels="targets", loss_rows="loss_rows", dlogits="dlogits", B=R, C=V,
            counted=mb.counted_rows,
        )  # fmt: skip
        self.head_backward(S)
        self.layernorm_back(S, self.fw.x_final, "lnf_stats", "lnf_g", "lnf_b", dZ="dx")
        for l in reversed(range(self.L)):
            self.block_backward(S, l)
            mb.lens_point(self.block_deltas(l))  # block l - 1 overwrites them
        ops.token_rows(pb, S, idx="idx", spans="spans", order="order", R=R, V=V)
        ops.embed_wgrad(
            pb, S, spans="spans", order="order", dX="dx", dwte=self.g("wte"), dwpe=self.g("wpe"), R=R, T=T,
            V=V, D=D, accumulate=self.tie_head,
        )  # fmt: skip

    def head_backward(self, S: str) -> None:
        """The head's weight gradient, and dxf into dY."""
        mb, pb, g, R, V, D = self.mb, self.pb, self.g, self.R, self.V, self.D
        if self.tie_head:  # g_wte = dlogits^T xf (the embedding's part is added by embed_wgrad at the end)
            mb.matmul(S, "matmul_wgrad", A="dlogits", B="xf", C=g("wte"), M=V, N=D, K=R, trans_a=1)
            mb.matmul(S, "matmul_plain", A="dlogits", B=self.w("wte"), C="dY", M=R, N=D, K=V)
            return
        mb.matmul(S, "matmul_wgrad", A="xf", B="dlogits", C=g("Whead"), M=D, N=V, K=R, trans_a=1)
        ops.colsum(pb, S, G="dlogits", out=g("bhead"), M=R, N=V)
        Wt, tb = mb.weight_transposed(S, self.P["Whead"])
        mb.matmul(S, "matmul_plain", A="dlogits", B=Wt, C="dY", M=R, N=D, K=V, trans_b=tb)

    def block_backward(self, S: str, l: int) -> None:
        """Block l's backward pass: dx (the gradient of its output) through the MLP branch, then the
        attention branch, into the parameters' gradients and dx (the gradient of its input)."""
        mb, pb, g, c, R, D, att = self.mb, self.pb, self.g, self.fw.lay[l], self.R, self.D, self.fw.att
        # MLP branch: x = x_mid + gelu(z) W2 + b2 receives dx
        mb.matmul(
            S, "matmul_wgrad", A=c["z"], B="dx", C=g(f"W2{l}"), M=4 * D, N=D, K=R, a_act=GELU, trans_a=1
        )
        ops.colsum(pb, S, G="dx", out=g(f"b2{l}"), M=R, N=D)
        Wt, tb = mb.weight_transposed(S, self.P[f"W2{l}"])
        mb.matmul(
            S, "matmul_dgrad", A="dx", B=Wt, C="dz", Zprev=c["z"], M=R, N=4 * D, K=D,
            trans_b=tb, out_act=GELU,
        )  # fmt: skip
        mb.matmul(S, "matmul_wgrad", A=c["m"], B="dz", C=g(f"W1{l}"), M=D, N=4 * D, K=R, trans_a=1)
        ops.colsum(pb, S, G="dz", out=g(f"b1{l}"), M=R, N=4 * D)
        Wt, tb = mb.weight_transposed(S, self.P[f"W1{l}"])
        mb.matmul(S, "matmul_plain", A="dz", B=Wt, C="dY", M=R, N=D, K=4 * D, trans_b=tb)
        self.layernorm_back(S, c["x_mid"], c["ln2"], f"ln2_g{l}", f"ln2_b{l}")
        ops.add_h(pb, S, A="dln", Y="dx", M=R, N=D)
        # attention branch: x_mid = x_in + O Wo + bo receives dx
        mb.matmul(S, "matmul_wgrad", A=c["O"], B="dx", C=g(f"Wo{l}"), M=D, N=D, K=R, trans_a=1)
        ops.colsum(pb, S, G="dx", out=g(f"bo{l}"), M=R, N=D)
        Wt, tb = mb.weight_transposed(S, self.P[f"Wo{l}"])
        mb.matmul(S, "matmul_plain", A="dx", B=Wt, C="dO", M=R, N=D, K=D, trans_b=tb)
        mb.attention_matmul(S, "dv", P=c["P"], dO="dO", dqkv="dqkv", **att)
        mb.attention_matmul(S, "dp", dO="dO", qkv=c["qkv"], dP="S", **att)
        ops.attn_softmax_bwd(pb, S, P=c["P"], dP="S", dS="dS", rows=mb.rows, **att)
        mb.attention_matmul(S, "dq", dS="dS", qkv=c["qkv"], dqkv="dqkv", **att)
        mb.attention_matmul(S, "dk", dS="dS", qkv=c["qkv"], dqkv="dqkv", **att)
        mb.matmul(S, "matmul_wgrad", A=c["a"], B="dqkv", C=g(f"Wqkv{l}"), M=D, N=3 * D, K=R, trans_a=1)
        ops.colsum(pb, S, G="dqkv", out=g(f"bqkv{l}"), M=R, N=3 * D)
        Wt, tb = mb.weight_transposed(S, self.P[f"Wqkv{l}"])
        mb.matmul(S, "matmul_plain", A="dqkv", B=Wt, C="dY", M=R, N=D, K=3 * D, trans_b=tb)
        self.layernorm_back(S, c["x_in"], c["ln1"], f"ln1_g{l}", f"ln1_b{l}")
        ops.add_h(pb, S, A="dln", Y="dx", M=R, N=D)

    def layernorm_back(
        self, program: str, x: str, stats: str, gname: str, bname: str, dZ: str = "dln"
    ) -> None:
        """dY (the LayerNorm output's gradient) -> its parameters' gradients and dZ."""
        pb, g, R, D = self.pb, self.g, self.R, self.D
        ops.layernorm_wgrad(pb, program, dY="dY", Z=x, stats=stats, dgamma=g(gname), dbeta=g(bname), M=R, N=D)
        ops.layernorm_bwd(
            pb, program, dY="dY", Z=x, stats=stats, gamma=self.m(gname), dZ=dZ, M=R, N=D, rows=self.mb.rows
        )

    def block_deltas(self, l: int) -> list[tuple[str, str]]:
        """The lens's layers of block l: the backward deltas every block writes into shared buffers."""
        return [(f"{n} (block {l})", n) for n in ("dz", "dqkv", "dO", "dS")]

    def evaluation(self) -> EvalSpec:
        """Program 'eval' over the validation split: next-character accuracy and the summed loss."""
        pb, E, T, Bw, R, V, val = self.pb, EVAL, self.T, self.Bw, self.R, self.V, self.val
        chunks = ops.cdiv(eval_windows(len(val), T), Bw) if len(val) > 1 else 0
        n = max(1, chunks)
        pb.f32("val_loss_partial", (n,), "other")
        pb.f32("val_loss_sum", (1,), "other")
        forward = replayed(pb, lambda program: self.fw.emit(program, flags=EVAL_FLAGS))
        ops.eval_reset(pb, E, logits="logits", labels="targets", result="eval_result", B=R, C=V)
        for chunk in range(chunks):
            ops.gather_windows_eval(
                pb, E, tokens="val_tokens", idx="idx", targets="targets", n_tokens=len(val), T=T, batch=Bw,
                offset=chunk * Bw,
            )  # fmt: skip
            forward(E)
            ops.eval_count(pb, E, logits="logits", labels="targets", result="eval_result", B=R, C=V)
            ops.eval_loss_chunk(
                pb, E, logits="logits", labels="targets", partial="val_loss_partial", total="val_loss_sum",
                B=R, C=V, chunk=chunk, chunks=n,
            )  # fmt: skip
        ops.eval_loss_total(
            pb, E, logits="logits", labels="targets", partial="val_loss_partial", total="val_loss_sum",
            B=R, C=V, chunks=n,
        )  # fmt: skip
        return {
            "result_buffer": "eval_result",
            "test_rows": max(0, len(val) - 1),
            "loss_buffer": "val_loss_sum",
        }

    def lens_layers(self) -> list[tuple[str, str]]:
        """The gradient-range lens's layers: dlogits, dx after the step (the embeddings' gradient,
        the residual stream's at the input), and every block's deltas (counted at its lens point)."""
        blocks = [d for l in range(self.L) for d in self.block_deltas(l)]
        return [("dlogits", "dlogits"), ("dx (embeddings)", "dx"), *blocks]


# --- text generation -------------------------------------------------------------------------------

SAMPLE_STEP = "sample_step"
TOKENS_PER_SUBMIT = 64  # program replays a submit: few submits, and no long-running command buffer


def build_gpt_sample_plan(
    cfg: TrainConfig,
    vocab: Sequence[str],
    path: str,
    tiles: TileTable | None = None,
    *,
    params: dict[str, np.ndarray],
    prompt: Sequence[int],
    tokens: int,
    temperature: float,
    seed: int,
    tokens_per_submit: int = TOKENS_PER_SUBMIT,
) -> tuple[SamplePlan, bytes]:
    """The plan generating `tokens` tokens after the token ids `prompt` with the GPT of shape cfg
    (n_layer, n_head, d_model, context, tie_head) and parameters `params` (f32, by name as
    gpt_param_shapes; a checkpoint's masters), on prelude `path`.

    One program, sample_step, adds one token and is replayed once per token with no host work in
    between (SampleSpec): sample_window puts the last <= T tokens of the GPU's token buffer `seq`
    into idx, GPTForward (the training plan's forward pass, one window: R = T rows) computes the
    logits, and sample_next draws from the last real row and appends to `seq`, counting in
    `seq_len`. The working copies of the matrices are packed on the host from the masters with
    pack_h, as build_gpt_plan packs its initial copies (numpy rounds to nearest even, as adamw_copy
    stores them)."""
    V, D, T, H, L = len(vocab), cfg.d_model, cfg.context, cfg.n_head, cfg.n_layer
    check_shape(D, H, L)
    shapes = gpt_param_shapes(V, D, L, T, cfg.tie_head)
    check_params(params, shapes)
    prompt_ids = np.asarray(prompt, np.int64)
    if prompt_ids.ndim != 1 or len(prompt_ids) < 1 or prompt_ids.min() < 0 or prompt_ids.max() >= V:
        raise ValueError(f"the prompt must be at least one token id in 0 .. {V - 1}")
    if tokens < 1 or tokens_per_submit < 1:
        raise ValueError(f"tokens ({tokens}) and tokens_per_submit ({tokens_per_submit}) must be positive")
    capacity = len(prompt_ids) + tokens

    mb = ModelBuilder(cfg, path, tiles)
    pb = mb.pb
    pb.u32("flags", (4,), "other")
    # the runtimes stage a plan's metrics buffer; this plan has no metrics or state, and this word
    # stands in for both (never read)
    pb.u32("no_metrics", (1,), "other")
    sample_weights(pb, [(name, params[name]) for name in shapes], working_copies(L, cfg.tie_head))
    pb.u32("seq", (capacity,), "data", prompt_ids)
    pb.u32("seq_len", (1,), "data", [len(prompt_ids)])
    pb.u32("idx", (T,), "activations")
    fw = GPTForward(
        mb, V=V, D=D, T=T, H=H, L=L, windows=1, tie_head=cfg.tie_head, master=str, copy=lambda n: "h_" + n
    )

    P = SAMPLE_STEP
    ops.sample_window(pb, P, seq="seq", seq_len="seq_len", idx="idx", T=T, capacity=capacity)
    fw.emit(P)
    ops.sample_next(
        pb, P, logits="logits", seq="seq", seq_len="seq_len", V=V, T=T, capacity=capacity,
        temperature=temperature, seed=seed,
    )  # fmt: skip
    sample: SampleSpec = {
        "program": P,
        "seq": "seq",
        "seq_len": "seq_len",
        "flags": "flags",
        "prompt_tokens": len(prompt_ids),
        "tokens": tokens,
        "tokens_per_submit": tokens_per_submit,
        "temperature": temperature,
        "seed": seed,
        "vocab": list(vocab),
    }
    return sample_plan(cfg, pb, sample), bytes(pb.blob)


def sample_weights(pb: PlanBuilder, params: list[tuple[str, np.ndarray]], copied: set[str]) -> None:
    """The (name, value) parameters, in order, as the sampling plan's buffers: each f32 master under
    its name and, for the matrices in `copied`, its working copy h_<name> packed from it (pack_h)."""
    for name, param in params:
        value = np.asarray(param, np.float32)
        pb.f32(name, value.shape, "master_weights", value)
        if name in copied:
            rows, cols = value.shape
            pb.h("h_" + name, rows, cols, category="working_weights", init=pack_h(value, pb.path))


def sample_plan(cfg: TrainConfig, pb: PlanBuilder, sample: SampleSpec) -> SamplePlan:
    """The sampling plan of builder `pb`, which holds its buffers and program."""
    kp = pb.kernel_plan(state="no_metrics", metrics="no_metrics")
    return {
        **kp,
        "format": PLAN_FORMAT,
        "config": cfg.model_dump(),
        "precision": cfg.precision,
        "f16_path": None if pb.path == "fp32" else pb.path,
        "prelude": pb.prelude,
        "blob_bytes": len(pb.blob),
        "sample": sample,
        "memory": memory_by_category(kp["buffers"]),
    }
