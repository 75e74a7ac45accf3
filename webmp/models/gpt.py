"""The character GPT (model 'gpt'): a pre-LayerNorm GPT-2-style transformer over a TextCorpus, the
training plan of webmp.testing.reference.gpt_loss_and_grads (parameter names, shapes, initialisation,
weight decay and the points where values are stored in the activation format all follow it).

Its plan is the network webmp.nn.gpt.gpt_network's (GPTNet: a token network, webmp/models/net_seq.py,
whose nodes emit the dispatches) under the GPT's own names: parameters wte, Wqkv0, ... (gpt_names),
buffers below (gpt_buffers), declared in the order they always had, so that its plans, checkpoints
and curves are the ones it had when its dispatches were listed here by hand.

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
from typing import cast

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..data.text import TextCorpus
from ..engine.plan import (
    PLAN_FORMAT,
    Plan,
    PlanBuilder,
    SamplePlan,
    SampleSpec,
    memory_by_category,
    pack_h,
)
from ..engine.tiles import TileTable
from ..nn.gpt import gpt_names, gpt_network
from ..nn.layers import CausalSelfAttention, Layer, ParamShape
from ..nn.network import Residual
from .common import Init, ModelBuilder, Param
from .net_nodes import Node, ResidualNode
from .net_seq import Heads, TokenNet

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
    gpt = GPTNet(mb, corpus, params)
    gpt.train_step()
    mb.optimizer()
    evaluation = gpt.evaluation()
    mb.histograms(gpt.lens_layers())
    return mb.finish([gpt.V, *([gpt.D] * gpt.L), gpt.V], evaluation)


def gpt_buffers(n_layer: int, n_head: int) -> dict[str, str]:
    """{a buffer of gpt_network's nodes (by its layer's path): the GPT's name}: the values, the
    attention scores, and the backward deltas, which the blocks share (module docstring). A value's
    gradient is d_<its buffer>, named here by the layer that writes it."""
    L = n_layer
    names = {"layers.0.y": "X0", "d_X0": "dln"}
    names |= {f"attention_S_h{n_head}": "S", f"attention_dS_h{n_head}": "dS"}
    for l in range(L):
        att, mlp = f"layers.{1 + 2 * l}.layers", f"layers.{2 + 2 * l}.layers"
        names |= {
            f"{att}.0.y": f"a{l}", f"{att}.0.stats": f"ln1_stats{l}", f"{att}.1.qkv": f"qkv{l}",
            f"{att}.1.P": f"P{l}", f"{att}.1.O": f"O{l}", f"{att}.1.y": f"x_mid{l}",
            f"d_{att}.1.O": "dO", f"d_{att}.1.qkv": "dqkv",
            f"{mlp}.0.y": f"m{l}", f"{mlp}.0.stats": f"ln2_stats{l}", f"{mlp}.1.y": f"z{l}",
            f"{mlp}.3.y": f"x{l}",
            f"d_a{l}": "dY", f"d_m{l}": "dY", f"d_z{l}": "dz", f"d_x_mid{l}": "dln",
            f"d_x{l}": "dx" if l == L - 1 else "dln",  # the last block's output: the final LN's input
        }  # fmt: skip
    final = 1 + 2 * L
    names |= {f"layers.{final}.y": "xf", f"layers.{final}.stats": "lnf_stats", "d_xf": "dY"}
    return names | {f"layers.{final + 1}.zero_bias": "head_bias"}


class GPTNet(TokenNet):
    """The GPT's training plan: gpt_network's nodes under the GPT's names (gpt_names, gpt_buffers),
    its buffers declared in the GPT's order (data, bookkeeping, parameters in gpt_param_shapes'
    order, then `declare`'s activations and deltas), the weights its backward reads transposed in
    the table's form (ModelBuilder.weight_transposed), and its residual blocks adding their
    branch's input gradient into the stream's, dx, in place (StreamResidualNode)."""

    def __init__(self, mb: ModelBuilder, corpus: TextCorpus, params: dict[str, np.ndarray] | None):
        cfg = mb.cfg
        self.V, self.D, self.H, self.L = V, D, H, L = corpus.vocab_size, cfg.d_model, cfg.n_head, cfg.n_layer
        check_shape(D, H, L)
        if params is not None:
            check_params(params, gpt_param_shapes(V, D, L, cfg.context, cfg.tie_head))
        self.given = params
        self.names = gpt_names(L, cfg.tie_head) | gpt_buffers(L, H)
        super().__init__(mb, gpt_network(V, D, L, H, cfg.context, cfg.tie_head), corpus)
        self.declare()

    def declare(self) -> None:
        """The activations and backward deltas, in the GPT's order (the nodes find them declared)."""
        pb, R, D, T, V, L = self.pb, self.R, self.D, self.T, self.V, self.L
        scores = (self.Bt * self.H * T, T)
        pb.h("X0", R, D)
        for l in range(L):
            pb.h(f"a{l}", R, D)
            pb.f32(f"ln1_stats{l}", (R, 2), "activations")
            pb.h(f"qkv{l}", R, 3 * D)
            pb.h(f"P{l}", *scores)
            for name in (f"O{l}", f"x_mid{l}", f"m{l}"):
                pb.h(name, R, D)
            pb.f32(f"ln2_stats{l}", (R, 2), "activations")
            pb.h(f"z{l}", R, 4 * D)
            pb.h(f"x{l}", R, D)
        pb.f32("S", scores, "activations")  # scores; dP in the backward pass
        pb.h("xf", R, D)
        pb.f32("lnf_stats", (R, 2), "activations")
        pb.f32("logits", (R, V), "activations")
        if self.net.tied_head:
            pb.f32("head_bias", (V,), "other")  # zeros: the tied head has no bias
            if self.mb.tiles.weights == "transposed":
                pb.h("hT_wte", D, V, "working_weights")
        pb.h("dlogits", R, V)
        for name, cols in (("dx", D), ("dY", D), ("dln", D), ("dO", D), ("dqkv", 3 * D), ("dz", 4 * D)):
            pb.h(name, R, cols)
        pb.h("dS", *scores)
        pb.u32("spans", (V, 2), "activations")
        pb.u32("order", (R,), "activations")

    def named(self, name: str) -> str:
        return self.names.get(name, name)

    def initial(self, name: str, p: ParamShape) -> Init | None:
        if self.given is None:
            return None
        given = self.given[name]
        return lambda: np.asarray(given, np.float32)

    def transposed(self, program: str, p: Param) -> tuple[str, int]:
        return self.mb.weight_transposed(program, p)

    def node_type(self, layer: Layer) -> type[Node]:
        return StreamResidualNode if isinstance(layer, Residual) else super().node_type(layer)

    def block_deltas(self, l: int) -> list[tuple[str, str]]:
        """The lens's layers of block l: the backward deltas every block writes into shared buffers."""
        return [(f"{n} (block {l})", n) for n in ("dz", "dqkv", "dO", "dS")]

    def lens_layers(self) -> list[tuple[str, str]]:
        """The gradient-range lens's layers: dlogits, dx after the step (the embeddings' gradient,
        the residual stream's at the input), and every block's deltas (counted at its lens point)."""
        blocks = [d for l in range(self.L) for d in self.block_deltas(l)]
        return [("dlogits", "dlogits"), ("dx (embeddings)", "dx"), *blocks]


class StreamResidualNode(ResidualNode):
    """A GPT residual block: its backward adds its branch's input gradient into dy (dx, the
    stream's gradient) in place and passes dy on. After a block's attention half (its input's
    gradient complete), the lens counts the block's deltas, which the block before overwrites."""

    g: GPTNet

    def backward(self, x, y, saved, dy, program, need_dx):
        layers = cast(Residual, self.layer).layers
        df = self.g._backward_layers(layers, f"{self.path}.", dy, program, first=False)
        assert df is not None and df.buffer != dy.buffer
        ops.add_h(self.pb, program, A=df.buffer, Y=dy.buffer, M=x.rows, N=x.cols)
        if isinstance(layers[-1], CausalSelfAttention):  # block l is layers.{1 + 2 l} and .{2 + 2 l}
            self.mb.lens_point(self.g.block_deltas((int(self.path.removeprefix("layers.")) - 1) // 2))
        return dy


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
