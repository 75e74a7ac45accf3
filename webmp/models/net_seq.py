"""Sequence models of webmp.nn layers (model 'net' with a token input {"tokens": V, "context": T}):
TokenNet, the Net of webmp/models/net.py on a TextCorpus, with the nodes of its own layers.

The data are the gpt's (webmp/models/gpt.py): windows of T tokens gathered on the GPU in the seeded
order (gather_windows), rows r = b * T + t (window b, position t), R = windows * T loss rows, the
next-token cross-entropy over all of them, and program 'eval' over the validation split's
consecutive windows (next-character accuracy and the summed loss). The layers that act per
position (Linear, the norms, activations, Dropout, Residual) are net.py's nodes on [R, D] values;
the embedding and the attention are the gpt's kernels:
  EmbeddingNode   embed_fwd from the f32 tables; backward token_rows + embed_wgrad (no dx: its
                  input is the data)
  AttentionNode   the gpt block's attention half: qkv = x Wqkv + b, scores, causal softmax, PV,
                  y = O Wproj + b; backward dv, dp, softmax backward, dq, dk, and dx = dqkv Wqkvᵀ.
                  The scores S (f32, reused for dP in the backward pass) and dS are shared by the
                  attention layers of the same head count; qkv, P and O are kept per layer. In the
                  fused form (TrainConfig.attention, webmp.models.attention_form) flash_attention_fwd
                  and flash_attention_bwd instead: no [B*H*T, T] buffer, per layer qkv, O and the
                  row log-sum-exp lse (f32 [B*H*T]) kept, Dsum (f32 [B*H*T]) shared.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..data.tables import check_tokens, eval_windows, perm_bits
from ..data.text import TextCorpus
from ..engine.plan import EvalSpec, Plan
from ..engine.tiles import TileTable
from ..nn import layers as L
from ..nn.network import Network
from .attention_form import attention_form
from .common import EVAL, EVAL_FLAGS, ModelBuilder, Param, replayed
from .net import Net
from .net_nodes import Node, Value


class Heads(TypedDict):
    """The attention's shape, as the attention launchers take it: B windows of T positions, H heads
    of size d."""

    B: int
    T: int
    H: int
    d: int


def build_token_net_plan(
    cfg: TrainConfig,
    corpus: TextCorpus,
    path: str,
    tiles: TileTable | None = None,
    rank: int = 0,
    world: int = 1,
    *,
    dry: bool = False,
) -> tuple[Plan, bytes]:
    """The plan of cfg.model_spec's token network on `corpus` (rank `rank` of `world`); dry: a dry run."""
    net = cfg.model_spec
    if net is None or not net.is_tokens:
        raise ValueError("a token network (model_spec with input {tokens, context}) trains on text")
    mb = ModelBuilder(cfg, path, tiles, rank, world, dry=dry)
    g = TokenNet(mb, net, corpus)
    g.train_step()
    mb.optimizer()
    evaluation = g.evaluation()
    mb.histograms(g.lens)
    return mb.finish([g.V, *[t.out_shape[-1] for t in g.traced if t.depth == 0]], evaluation)


def check_corpus_fits(net: Network, corpus: TextCorpus) -> None:
    """ValueError naming both when the text's vocabulary is not the network's."""
    if corpus.vocab_size != net.classes:
        raise ValueError(
            f"the network's input has a vocabulary of {net.classes} tokens but the text {corpus.name} has "
            f"{corpus.vocab_size} distinct characters; set input.tokens (and the last layer's out) to "
            f"{corpus.vocab_size}"
        )


class TokenNet(Net):
    """A token network's nodes and programs: the gpt's data buffers and windows, net.py's layers."""

    def __init__(self, mb: ModelBuilder, net: Network, corpus: TextCorpus):
        check_corpus_fits(net, corpus)
        pb, cfg = mb.pb, mb.cfg
        self.mb, self.pb, self.net = mb, pb, net
        self.V, self.T = net.classes, net.context
        self.Bt = mb.local_batch
        self.R = R = self.Bt * self.T
        self.train = check_tokens(corpus.train, self.V, self.T, f"{corpus.name} (train split)")
        val = np.asarray(corpus.val, np.uint32)
        self.val = val[: cfg.val_tokens] if cfg.val_tokens else val
        pb.u32("tokens", (len(self.train),), "data", self.train)
        pb.u32("val_tokens", (max(1, len(self.val)),), "data", self.val if len(self.val) else None)
        mb.bookkeeping(R)
        pb.u32("idx", (R,), "activations")
        pb.u32("targets", (R,), "activations")
        self.place_nodes()

    def node_type(self, layer: L.Layer) -> type[Node]:
        if isinstance(layer, L.Linear) and layer.tied:
            return TiedHeadNode
        return SEQ_NODES.get(type(layer)) or super().node_type(layer)

    def input_value(self, program: str, flags: str) -> Value:
        return Value("idx", self.net.in_shape, self.R, 1)

    def f32(self, name: str, shape: tuple[int, ...], init: np.ndarray | None = None) -> str:
        """The f32 buffer `name` (as `named` names it), declared at its first use."""
        name = self.named(name)
        if name not in self.pb.buffers:
            self.pb.f32(name, shape, "activations" if init is None else "other", init)
        return name

    def train_step(self) -> None:
        """The next windows, forward, the loss over all R rows and dlogits, backward (as the gpt's)."""
        mb, pb, S, T = self.mb, self.pb, self.mb.grads_program, self.T
        n_train = len(self.train)
        ops.gather_windows(
            pb, S, tokens="tokens", idx="idx", targets="targets", n_tokens=n_train, T=T, batch=self.Bt,
            seed=mb.cfg.seed, perm_bits=perm_bits(n_train - T), pos_per_window=T, shard=mb.rank * self.Bt,
            micro=mb.micro_stride,
        )  # fmt: skip
        self.kept: dict[str, Any] = {}
        self.forward(S, "flags", True, self.kept)
        self.loss_and_backward(S, "targets", self.R)

    def evaluation(self) -> EvalSpec:
        """Program 'eval' over the validation split, as the gpt's: accuracy and the summed loss."""
        pb, E, T, Bw, R, V, val = self.pb, EVAL, self.T, self.Bt, self.R, self.V, self.val
        chunks = ops.cdiv(eval_windows(len(val), T), Bw) if len(val) > 1 else 0
        n = max(1, chunks)
        pb.f32("val_loss_partial", (n,), "other")
        pb.f32("val_loss_sum", (1,), "other")
        pb.u32("eval_chunk", (1,), "other")
        forward = replayed(pb, lambda program: self.forward(program, EVAL_FLAGS, False, None))
        counters = dict(logits="logits", labels="targets", result="eval_result", chunk="eval_chunk")
        sums = dict(logits="logits", labels="targets", partial="val_loss_partial", total="val_loss_sum")
        ops.eval_reset(pb, E, **counters, B=R, C=V)
        for _ in range(chunks):
            ops.gather_windows_eval(
                pb, E, tokens="val_tokens", chunk="eval_chunk", idx="idx", targets="targets",
                n_tokens=len(val), T=T, batch=Bw,
            )  # fmt: skip
            forward(E)
            ops.eval_count(pb, E, **counters, B=R, C=V)
            ops.eval_loss_chunk(pb, E, **sums, chunk="eval_chunk", B=R, C=V, chunks=n)
            ops.eval_next_chunk(pb, E, **counters, B=R, C=V)
        ops.eval_loss_total(pb, E, **sums, chunk="eval_chunk", B=R, C=V, chunks=n)
        return {
            "result_buffer": "eval_result",
            "test_rows": max(0, len(val) - 1),
            "loss_buffer": "val_loss_sum",
        }


class EmbeddingNode(Node):
    """X = weight[idx] + positions[t] (embed_fwd, f32 tables); without positions a zero table, and
    its gradient into a scratch buffer no parameter owns."""

    g: TokenNet

    def tables(self) -> tuple[str, str]:
        """(the position table, its gradient's buffer)."""
        if "positions" in self.params:
            return self.params["positions"]["master"], self.params["positions"]["grad"]
        T, D = self.out_shape
        zeros = self.g.f32(f"{self.path}.no_positions", (T, D), np.zeros((T, D), np.float32))
        return zeros, self.g.f32(f"{self.path}.no_positions_grad", (T, D))

    def forward(self, x, program, flags, training):
        y = self.out(x)
        T, D = self.out_shape
        ops.embed_fwd(
            self.pb, program, idx=x.buffer, wte=self.params["weight"]["master"], wpe=self.tables()[0],
            X=y.buffer, R=y.rows, T=T, D=D, flags=flags,
        )  # fmt: skip
        return y, None

    def backward(self, x, y, saved, dy, program, need_dx):
        g, pb = self.g, self.pb
        T, D = self.out_shape
        for name, shape in (("spans", (g.V, 2)), ("order", (y.rows,))):
            if name not in pb.buffers:
                pb.u32(name, shape, "activations")
        spans, order = "spans", "order"
        ops.token_rows(pb, program, idx=x.buffer, spans=spans, order=order, R=y.rows, V=g.V)
        ops.embed_wgrad(
            pb, program, spans=spans, order=order, dX=dy.buffer, dwte=self.params["weight"]["grad"],
            dwpe=self.tables()[1], R=y.rows, T=T, V=g.V, D=D, accumulate=g.net.tied_head,
        )  # fmt: skip
        return None  # its input is the data


class TiedHeadNode(Node):
    """The last layer tied to the embedding (Linear tied): logits = x wteᵀ from the table's working
    copy, with a zero bias no parameter owns; backward the table's gradient dlogitsᵀ x (the
    embedding's backward, last, adds its own part: embed_wgrad accumulate) and dx = dlogits wte.
    With the weights form "transposed" (TileTable.weights) the forward product reads a transposed
    copy hT_<table>, made in each pass that runs it, as A·B."""

    g: TokenNet

    def table(self) -> Param:
        return self.g.nodes["layers.0"].params["weight"]

    def forward(self, x, program, flags, training):
        pb, mb, wte, V, D = self.pb, self.mb, self.table(), self.out_shape[-1], x.cols
        bias, logits = self.g.named(f"{self.path}.zero_bias"), self.g.named("logits")
        for name, shape in ((logits, (x.rows, V)), (bias, (V,))):
            if name not in pb.buffers:
                pb.f32(name, shape, "activations" if name == logits else "other")
        common: dict[str, Any] = dict(A=x.buffer, C=logits, bias=bias, M=x.rows, N=V, K=D)
        if mb.tiles.weights == "transposed":
            mb.matmul(program, "matmul_logits", B=self.transposed_table(program), **common)
        else:
            mb.matmul(program, "matmul_logits", B=str(wte["copy"]), trans_b=1, **common)
        return Value(logits, self.out_shape, x.rows, V), None

    def transposed_table(self, program: str) -> str:
        """hT_<table>: the table's working copy transposed, [D, V], made in `program`."""
        wte = self.table()
        V, D = wte["shape"]
        t = "hT_" + wte["name"]
        if t not in self.pb.buffers:
            self.pb.h(t, D, V, "working_weights")
        ops.transpose_h(self.pb, program, X=str(wte["copy"]), Y=t, rows=V, cols=D)
        return t

    def backward(self, x, y, saved, dy, program, need_dx):
        mb, wte, R, V, D = self.mb, self.table(), x.rows, self.out_shape[-1], x.cols
        mb.matmul(program, "matmul_wgrad", A=dy.buffer, B=x.buffer, C=wte["grad"], M=V, N=D, K=R, trans_a=1)
        if not need_dx:
            return None
        dx = self.g.grad(x)
        mb.matmul(program, "matmul_plain", A=dy.buffer, B=str(wte["copy"]), C=dx.buffer, M=R, N=D, K=V)
        return dx


class AttentionNode(Node):
    """Causal self-attention: the gpt block's attention half (module docstring)."""

    g: TokenNet

    def shape(self) -> Heads:
        T, D = self.in_shape
        H = self.layer.heads  # type: ignore[attr-defined]
        return {"B": self.g.Bt, "T": T, "H": H, "d": D // H}

    def form(self) -> str:
        """The form this layer takes, "fused" or "unfused" (attention_form of TrainConfig.attention)."""
        mb = self.mb
        return attention_form(mb.cfg.attention, mb.tiles, mb.path, **self.shape())[0]

    def square(self, name: str, h: bool) -> str:
        """The [B*H*T, T] buffer `name` of this head count (S f32, dS h), shared by such layers."""
        att = self.shape()
        rows, T = att["B"] * att["H"] * att["T"], att["T"]
        full = f"attention_{name}_h{att['H']}"
        return self.g.act(full, rows, T) if h else self.g.f32(full, (rows, T))

    def fp8_input(self, program: str, p: str, x: str, rows: int, k: int, record: bool, weight: bool) -> str:
        """Projection p's A: x, or with --precision fp8 x cast to E4M3 (after W_p's copy is cast from
        its master, with `weight`: the forward pass; the backward pass casts x again)."""
        fp8 = self.mb.fp8
        if fp8 is None:
            return x
        if weight:
            W = self.params[f"{p}.weight"]
            fp8.weight(program, f"{self.path}.{p}", W["master"], str(W["copy"]), *W["shape"], record=record)
        return fp8.input(program, f"{self.path}.{p}", x, rows, k, 0, record=record)

    def fp8_grad(self, program: str, p: str, dy: str, rows: int, n: int) -> str:
        """The gradient of projection p's output as its products read it: dy, or its E5M2 cast."""
        fp8 = self.mb.fp8
        return dy if fp8 is None else fp8.grad_output(program, f"{self.path}.{p}", dy, rows, n)

    def project(
        self, program: str, x: str, p: str, y: str, rows: int, n: int, k: int, flags: str, record: bool
    ) -> None:
        """y = x W_p (+ b_p): the qkv or the output projection."""
        W, b = self.params[f"{p}.weight"], self.params.get(f"{p}.bias")
        a = self.fp8_input(program, p, x, rows, k, record, weight=True)
        common: dict[str, Any] = dict(A=a, B=str(W["copy"]), C=y, M=rows, N=n, K=k, flags=flags)
        if b:
            self.mb.matmul(program, "matmul_fwd", bias=b["master"], **common)
        else:
            self.mb.matmul(program, "matmul_plain", **common)

    def forward(self, x, program, flags, training):
        g, mb, att, D = self.g, self.mb, self.shape(), x.cols
        qkv = g.act(f"{self.path}.qkv", x.rows, 3 * D)
        self.project(program, x.buffer, "qkv", qkv, x.rows, 3 * D, D, flags, training)
        if self.form() == "fused":
            lse, O = (
                g.f32(f"{self.path}.lse", (att["B"] * att["H"] * att["T"],)),
                g.act(f"{self.path}.O", x.rows, D),
            )
            ops.flash_attention_fwd(self.pb, program, qkv=qkv, O=O, lse=lse, flags=flags, **att)
            y = self.out(x)
            self.project(program, O, "proj", y.buffer, x.rows, D, D, flags, training)
            return y, (qkv, lse, O)
        S, P = self.square("S", h=False), g.act(f"{self.path}.P", att["B"] * att["H"] * att["T"], att["T"])
        mb.attention_matmul(program, "scores", qkv=qkv, S=S, flags=flags, **att)
        ops.attn_softmax_fwd(self.pb, program, S=S, P=P, flags=flags, rows=mb.rows, **att)
        O = g.act(f"{self.path}.O", x.rows, D)
        mb.attention_matmul(program, "values", P=P, qkv=qkv, O=O, flags=flags, **att)
        y = self.out(x)
        self.project(program, O, "proj", y.buffer, x.rows, D, D, flags, training)
        return y, (qkv, P, O)

    def weight_grad(self, program: str, p: str, x: str, g: str, dy: str, k: int, n: int, rows: int) -> None:
        """W_p's gradient x^T g (and b_p's, the column sums of dy); g: dy as the products read it."""
        a = self.fp8_input(program, p, x, rows, k, record=False, weight=False)
        self.mb.matmul(
            program, "matmul_wgrad", A=a, B=g, C=self.params[f"{p}.weight"]["grad"], M=k, N=n, K=rows,
            trans_a=1,
        )  # fmt: skip
        if f"{p}.bias" in self.params:
            ops.colsum(self.pb, program, G=dy, out=self.params[f"{p}.bias"]["grad"], M=rows, N=n)

    def backward(self, x, y, saved, dy, program, need_dx):
        g, mb, pb, att, R, D = self.g, self.mb, self.pb, self.shape(), x.rows, x.cols
        qkv, kept, O = saved  # kept: P (unfused) or lse (fused)
        gproj = self.fp8_grad(program, "proj", dy.buffer, R, D)
        self.weight_grad(program, "proj", O, gproj, dy.buffer, D, D, R)
        dO = g.act(f"d_{self.path}.O", R, D)
        Wproj, tb = g.transposed(program, self.params["proj.weight"])
        mb.matmul(program, "matmul_plain", A=gproj, B=Wproj, C=dO, M=R, N=D, K=D, trans_b=tb)
        if self.form() == "fused":
            dqkv, Dsum = (
                g.act(f"d_{self.path}.qkv", R, 3 * D),
                g.f32(f"attention_Dsum_h{att['H']}", (R * att["H"],)),
            )
            ops.flash_attention_bwd(pb, program, qkv=qkv, O=O, dO=dO, lse=kept, Dsum=Dsum, dqkv=dqkv, **att)
        else:
            dqkv = self.unfused_backward(program, saved, dO)
        return self.input_grads(program, x, dqkv, need_dx)

    def unfused_backward(self, program: str, saved: tuple[str, str, str], dO: str) -> str:
        """dqkv from the kept qkv and P and dO: dv, dp, the softmax backward, dq, dk."""
        g, mb, pb, att = self.g, self.mb, self.pb, self.shape()
        qkv, P, _ = saved
        R, D = att["B"] * att["T"], att["H"] * att["d"]
        dqkv, dP, dS = (
            g.act(f"d_{self.path}.qkv", R, 3 * D),
            self.square("S", h=False),
            self.square("dS", h=True),
        )
        mb.attention_matmul(program, "dv", P=P, dO=dO, dqkv=dqkv, **att)
        mb.attention_matmul(program, "dp", dO=dO, qkv=qkv, dP=dP, **att)
        ops.attn_softmax_bwd(pb, program, P=P, dP=dP, dS=dS, rows=mb.rows, **att)
        mb.attention_matmul(program, "dq", dS=dS, qkv=qkv, dqkv=dqkv, **att)
        mb.attention_matmul(program, "dk", dS=dS, qkv=qkv, dqkv=dqkv, **att)
        return dqkv

    def input_grads(self, program: str, x: Value, dqkv: str, need_dx: bool) -> Value | None:
        """The qkv projection's weight gradient and, with need_dx, dx = dqkv Wqkvᵀ."""
        g, mb, R, D = self.g, self.mb, x.rows, x.cols
        gqkv = self.fp8_grad(program, "qkv", dqkv, R, 3 * D)
        self.weight_grad(program, "qkv", x.buffer, gqkv, dqkv, D, 3 * D, R)
        if not need_dx:
            return None
        dx = g.grad(x)
        Wqkv, tb = g.transposed(program, self.params["qkv.weight"])
        mb.matmul(program, "matmul_plain", A=gqkv, B=Wqkv, C=dx.buffer, M=R, N=D, K=3 * D, trans_b=tb)
        return dx


SEQ_NODES: dict[type, type[Node]] = {L.Embedding: EmbeddingNode, L.CausalSelfAttention: AttentionNode}
