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

The sampling plan of `webmp sample` (build_gpt_sample_plan) is a token network's
(webmp/models/net_sample.py) over the same network and names: its forward pass is the training
plan's for one window.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import cast

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..data.text import TextCorpus
from ..engine.plan import (
    Plan,
    SamplePlan,
)
from ..engine.tiles import TileTable
from ..nn.gpt import gpt_names, gpt_network
from ..nn.layers import CausalSelfAttention, Layer, ParamShape
from ..nn.network import Residual
from .attention_form import attention_entry, attention_form
from .common import Init, ModelBuilder, Param, check_params
from .net_nodes import Node, ResidualNode
from .net_sample import TOKENS_PER_SUBMIT, build_net_sample_plan
from .net_seq import TokenNet

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
    plan, blob = mb.finish([gpt.V, *([gpt.D] * gpt.L), gpt.V], evaluation)
    plan["attention"] = attention_entry(gpt.attention, gpt.attention_why)
    return plan, blob


def gpt_buffers(n_layer: int, n_head: int, shared_blocks: bool = False) -> dict[str, str]:
    """{a buffer of gpt_network's nodes (by its layer's path): the GPT's name}: the values, the
    attention scores, and the backward deltas, which the blocks share (module docstring). A value's
    gradient is d_<its buffer>, named here by the layer that writes it. shared_blocks (recompute
    "blocks"): every block's values but the residual stream (x_mid, x) are block 0's buffers."""
    L = n_layer
    names = {"layers.0.y": "X0", "d_X0": "dln"}
    names |= {
        f"attention_S_h{n_head}": "S",
        f"attention_dS_h{n_head}": "dS",
        f"attention_Dsum_h{n_head}": "Dsum",
    }
    for l in range(L):
        att, mlp = f"layers.{1 + 2 * l}.layers", f"layers.{2 + 2 * l}.layers"
        b = 0 if shared_blocks else l  # the block whose buffers hold block l's values
        names |= {
            f"{att}.0.y": f"a{b}", f"{att}.0.stats": f"ln1_stats{b}", f"{att}.1.qkv": f"qkv{b}",
            f"{att}.1.P": f"P{b}", f"{att}.1.lse": f"lse{b}", f"{att}.1.O": f"O{b}",
            f"{att}.1.y": f"x_mid{l}",
            f"d_{att}.1.O": "dO", f"d_{att}.1.qkv": "dqkv",
            f"{mlp}.0.y": f"m{b}", f"{mlp}.0.stats": f"ln2_stats{b}", f"{mlp}.1.y": f"z{b}",
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
    branch's input gradient into the stream's, dx, in place (StreamResidualNode). With recompute
    "blocks" the blocks share block 0's buffers but the stream's, and each block but the last
    runs its forward pass again right before its backward (StreamResidualNode)."""

    def __init__(self, mb: ModelBuilder, corpus: TextCorpus, params: dict[str, np.ndarray] | None):
        cfg = mb.cfg
        self.V, self.D, self.H, self.L = V, D, H, L = corpus.vocab_size, cfg.d_model, cfg.n_head, cfg.n_layer
        check_shape(D, H, L)
        if params is not None:
            check_params(params, gpt_param_shapes(V, D, L, cfg.context, cfg.tie_head))
        self.given = params
        self.recompute = cfg.recompute == "blocks"
        self.names = gpt_names(L, cfg.tie_head) | gpt_buffers(L, H, self.recompute)
        # every block's attention takes the same form (AttentionNode.form decides the same)
        self.attention, self.attention_why = attention_form(
            cfg.attention, mb.tiles, mb.path, mb.local_batch, cfg.context, H, D // H
        )
        super().__init__(mb, gpt_network(V, D, L, H, cfg.context, cfg.tie_head), corpus)
        self.declare()

    def declare(self) -> None:
        """The activations and backward deltas, in the GPT's order (the nodes find them declared)."""
        pb, R, D, T, V, L = self.pb, self.R, self.D, self.T, self.V, self.L
        scores, fused = (self.Bt * self.H * T, T), self.attention == "fused"
        pb.h("X0", R, D)
        for l in range(L):
            own = l == 0 or not self.recompute  # with recompute, the blocks share block 0's values
            if own:
                pb.h(f"a{l}", R, D)
                pb.f32(f"ln1_stats{l}", (R, 2), "activations")
                pb.h(f"qkv{l}", R, 3 * D)
                if fused:
                    pb.f32(f"lse{l}", (scores[0],), "activations")
                else:
                    pb.h(f"P{l}", *scores)
                pb.h(f"O{l}", R, D)
            pb.h(f"x_mid{l}", R, D)
            if own:
                pb.h(f"m{l}", R, D)
                pb.f32(f"ln2_stats{l}", (R, 2), "activations")
                pb.h(f"z{l}", R, 4 * D)
            pb.h(f"x{l}", R, D)
        if not fused:
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
        if fused:
            pb.f32("Dsum", (scores[0],), "activations")
        else:
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
        deltas = ("dz", "dqkv", "dO") if self.attention == "fused" else ("dz", "dqkv", "dO", "dS")
        return [(f"{n} (block {l})", n) for n in deltas]

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
        block = (int(self.path.removeprefix("layers.")) - 1) // 2
        if self.g.recompute and block < self.g.L - 1:
            # block 0's buffers hold a later block's values by now: this half's forward again, from
            # its input (the stream, kept), the same dispatches as in the forward pass
            self.forward(x, program, "flags", True)
        df = self.g._backward_layers(layers, f"{self.path}.", dy, program, first=False)
        assert df is not None and df.buffer != dy.buffer
        ops.add_h(self.pb, program, A=df.buffer, Y=dy.buffer, M=x.rows, N=x.cols)
        if isinstance(layers[-1], CausalSelfAttention):  # block l is layers.{1 + 2 l} and .{2 + 2 l}
            self.mb.lens_point(self.g.block_deltas(block))
        return dy


# --- text generation -------------------------------------------------------------------------------


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
    kv_cache: bool = True,
    fp8_scale: np.ndarray | None = None,
) -> tuple[SamplePlan, bytes]:
    """The plan generating `tokens` tokens after the token ids `prompt` with the GPT of shape cfg
    (n_layer, n_head, d_model, context, tie_head) and parameters `params` (f32, by name as
    gpt_param_shapes; a checkpoint's masters), on prelude `path`: a token network's sampling plan
    (webmp/models/net_sample.py) over gpt_network under the GPT's names, so that its forward pass
    is the training plan's for one window."""
    V, D, T, H, L = len(vocab), cfg.d_model, cfg.context, cfg.n_head, cfg.n_layer
    check_shape(D, H, L)
    check_params(params, gpt_param_shapes(V, D, L, T, cfg.tie_head))
    return build_net_sample_plan(
        cfg, vocab, path, tiles, params=params, prompt=prompt, tokens=tokens, temperature=temperature,
        seed=seed, tokens_per_submit=tokens_per_submit, kv_cache=kv_cache, fp8_scale=fp8_scale,
        net=gpt_network(V, D, L, H, T, cfg.tie_head), names=gpt_names(L, cfg.tie_head) | gpt_buffers(L, H),
    )  # fmt: skip
