"""A network of webmp.nn layers as a training plan (model 'net'): each layer's node declares its
parameters and emits its forward and backward dispatches through the launchers of webmp/ops.

Values flow as h matrices: a vector batch [B, features], an image batch channels-last [B*H*W, C]
(one row a pixel), a sequence batch [B*T, D] (one row a position). A network with a token input
(sequence models on text) is webmp/models/net_seq.py's TokenNet, a Net with its own data, loss
rows and evaluation and the nodes of its own layers (the embedding, attention).

Every value has its own buffer (Flatten of an even-C image reuses its input's: the same bytes),
and its gradient the buffer "d_" + its name, written by the layer that reads the
value. No node's backward reads its own output, so a residual block adds its input into its last
layer's output in place, and its input's gradient into its first layer's input gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..data.tables import Dataset, perm_bits
from ..engine.plan import EvalSpec, Plan
from ..engine.tiles import TileTable
from ..nn import layers as L
from ..nn.network import Network, Residual, Traced
from .common import EVAL, EVAL_FLAGS, ModelBuilder, Param, replayed


@dataclass(frozen=True)
class Value:
    """A batch of values in the activation format: its buffer, per-example shape, matrix rows, cols."""

    buffer: str
    shape: tuple[int, ...]
    rows: int
    cols: int


def value_of(buffer: str, shape: tuple[int, ...], batch: int) -> Value:
    if isinstance(shape, L.Tokens):  # token ids, u32 [B*T]
        return Value(buffer, shape, batch * shape[0], 1)
    if len(shape) == 3:
        C, H, W = shape
        return Value(buffer, shape, batch * H * W, C)
    if len(shape) == 2:
        T, D = shape
        return Value(buffer, shape, batch * T, D)
    return Value(buffer, shape, batch, shape[0])


def build_net_plan(
    cfg: TrainConfig,
    data: Dataset,
    path: str,
    tiles: TileTable | None = None,
    rank: int = 0,
    world: int = 1,
    *,
    dry: bool = False,
) -> tuple[Plan, bytes]:
    """The plan of cfg.model_spec's network on `data` (rank `rank` of `world`); dry: a dry run."""
    net = cfg.model_spec
    if net is None:
        raise ValueError("model 'net' needs a network (model_spec)")
    mb = ModelBuilder(cfg, path, tiles, rank, world, dry=dry)
    g = Net(mb, net, data)
    g.train_step()
    mb.optimizer()
    evaluation = g.evaluation()
    mb.histograms(g.lens)
    return mb.finish([data.features, *[t.out_shape[0] for t in g.traced if t.depth == 0]], evaluation)


def check_data_fits(net: Network, data: Dataset) -> None:
    """ValueError naming both when the data's examples are not the network's input: an image network
    takes images of its shape (or table rows of as many values, read in (c, h, w) order), a vector
    network rows of as many features (images flattened in (c, h, w) order, as torch.flatten)."""
    want = math.prod(net.in_shape)
    if len(net.in_shape) == 3 and data.image is not None and data.image != net.in_shape:
        raise ValueError(
            f"the network takes images {list(net.in_shape)} but the data {data.name} holds images "
            f"{list(data.image)}"
        )
    if data.features != want:
        raise ValueError(
            f"the network takes input {list(net.in_shape)} ({want} values an example) but the data "
            f"{data.name} has {data.features} features an example"
        )
    if data.classes != net.classes:
        raise ValueError(
            f"the network's last layer has {net.classes} outputs but the data {data.name} has "
            f"{data.classes} classes"
        )


def channels_last(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Rows of (c, h, w)-ordered images as the GPU reads them, (h, w, c): one pixel's channels together."""
    if len(shape) != 3 or shape[0] == 1:
        return x
    C, H, W = shape
    return np.ascontiguousarray(x.reshape(len(x), C, H, W).transpose(0, 2, 3, 1).reshape(len(x), -1))


class Net:
    """The network's nodes (their parameters declared in trace order) and its programs."""

    def __init__(self, mb: ModelBuilder, net: Network, data: Dataset):
        check_data_fits(net, data)
        pb = mb.pb
        self.mb, self.pb, self.net, self.data = mb, pb, net, data
        self.Bt = Bt = mb.local_batch
        pb.f32("train_x", data.train_x.shape, "data", channels_last(data.train_x, net.in_shape))
        pb.u32("train_y", data.train_y.shape, "data", data.train_y)
        pb.f32("test_x", data.test_x.shape, "data", channels_last(data.test_x, net.in_shape))
        pb.u32("test_y", data.test_y.shape, "data", data.test_y)
        mb.bookkeeping(Bt)
        pb.h("X", Bt, data.features)
        pb.u32("y", (Bt,), "activations")
        self.place_nodes()

    def place_nodes(self) -> None:
        """Every layer's node, its parameters declared (and drawn from the seed) in trace order."""
        self.traced = self.net.trace()
        rng = np.random.default_rng(self.mb.cfg.seed)
        self.nodes = {t.path: self.node_type(t.layer)(self, t, i, rng) for i, t in enumerate(self.traced)}
        self.lens: list[tuple[str, str]] = []

    def node_type(self, layer: L.Layer) -> type[Node]:
        return NODES[type(layer)]

    def act(self, name: str, rows: int, cols: int) -> str:
        """The h buffer `name` [rows, cols], declared at its first use."""
        if name not in self.pb.buffers:
            self.pb.h(name, rows, cols)
        return name

    def grad(self, v: Value) -> Value:
        """The gradient of value v: buffer d_<v's buffer>, v's shape."""
        return Value(self.act("d_" + v.buffer, v.rows, v.cols), v.shape, v.rows, v.cols)

    def input_value(self, program: str, flags: str) -> Value:
        """X as the first layer takes it: an odd-C image re-laid one row a pixel."""
        shape = self.net.in_shape
        x = value_of("X", shape, self.Bt)
        if len(shape) == 3 and shape[0] % 2:
            v = Value(self.act("X_pixels", x.rows, x.cols), shape, x.rows, x.cols)
            ops.repack_h(
                self.pb, program, X="X", Y=v.buffer, rows_in=self.Bt, cols_in=self.data.features,
                rows_out=v.rows, cols_out=v.cols,
            )  # fmt: skip
            return v
        return x

    def forward(self, program: str, flags: str, training: bool, keep: dict[str, Any] | None) -> None:
        x = self.input_value(program, flags)
        self._forward_layers(self.net.layers, "", x, program, flags, training, keep)

    def _forward_layers(self, layers, prefix, x, program, flags, training, keep) -> Value:
        for i, _ in enumerate(layers):
            node = self.nodes[f"{prefix}layers.{i}"]
            y, saved = node.forward(x, program, flags, training)
            if keep is not None:
                keep[node.path] = (x, y, saved)
            x = y
        return x

    def train_step(self) -> None:
        mb, pb, Bt, T = self.mb, self.pb, self.Bt, self.mb.grads_program
        n_train = len(self.data.train_x)
        ops.gather_train(
            pb, T, xs="train_x", ys="train_y", X="X", y="y", n_rows=n_train, features=self.data.features,
            batch=Bt, seed=mb.cfg.seed, perm_bits=perm_bits(n_train), shard=mb.rank * Bt,
        )  # fmt: skip
        self.kept: dict[str, Any] = {}
        self.forward(T, "flags", True, self.kept)
        self.loss_and_backward(T, "y", Bt)

    def loss_and_backward(self, program: str, labels: str, rows: int) -> None:
        """softmax_xent over the `rows` rows of logits (labels in `labels`), then the backward pass."""
        C = self.net.classes
        self.act("dlogits", rows, C)
        ops.softmax_xent(
            self.pb, program, logits="logits", labels=labels, loss_rows="loss_rows", dlogits="dlogits",
            B=rows, C=C, counted=self.mb.counted_rows,
        )  # fmt: skip
        dlogits = Value("dlogits", self.net.out_shape("network", self.net.in_shape), rows, C)
        self.lens.append(("logits", "dlogits"))
        self._backward_layers(self.net.layers, "", dlogits, program, first=True)

    def _backward_layers(self, layers, prefix, dy: Value, program: str, first: bool) -> Value | None:
        """The layers' backward passes, last first, from the gradient of their output; returns the
        gradient of their input (None for the network's first layer, whose input is the data)."""
        for i in reversed(range(len(layers))):
            node = self.nodes[f"{prefix}layers.{i}"]
            x, y, saved = self.kept[node.path]
            dx = node.backward(x, y, saved, dy, program, need_dx=not (first and i == 0))
            if dx is None:
                return None
            if all(b != dx.buffer for _, b in self.lens):
                self.lens.append((f"{node.path} ({node.layer.type}) dx", dx.buffer))
            dy = dx
        return dy

    def zeros(self, n: int) -> str:
        """An f32 [n] of zeros: the bias of a bias-less last layer (matmul_logits adds one)."""
        name = f"zeros_{n}"
        if name not in self.pb.buffers:
            self.pb.f32(name, (n,), "other", np.zeros(n, np.float32))
        return name

    def evaluation(self) -> EvalSpec:
        """Program 'eval' on the test split, as the MLP's: one batch a chunk, dropout off."""
        pb, Bt, E, C = self.pb, self.Bt, EVAL, self.net.classes
        n_test = len(self.data.test_x)
        forward = replayed(pb, lambda program: self.forward(program, EVAL_FLAGS, False, None))
        ops.eval_reset(pb, E, logits="logits", labels="y", result="eval_result", B=Bt, C=C)
        for chunk in range(ops.cdiv(n_test, Bt)):
            ops.gather_eval(
                pb, E, xs="test_x", ys="test_y", X="X", y="y", n_rows=n_test, features=self.data.features,
                batch=Bt, offset=chunk * Bt,
            )  # fmt: skip
            forward(E)
            ops.eval_count(pb, E, logits="logits", labels="y", result="eval_result", B=Bt, C=C)
        return {"result_buffer": "eval_result", "test_rows": n_test, "loss_buffer": None}


# --- the nodes: one per layer type --------------------------------------------------------------


class Node:
    """A layer placed in a network: its parameters (declared at construction, in trace order),
    forward (returns its output and what its backward needs) and backward (returns dx, or None
    when its input needs no gradient)."""

    def __init__(self, g: Net, t: Traced, index: int, rng: np.random.Generator):
        self.g, self.mb, self.pb = g, g.mb, g.pb
        self.path, self.layer, self.index = t.path, t.layer, index
        self.in_shape, self.out_shape = t.in_shape, t.out_shape
        self.last = t.depth == 0 and t.path == f"layers.{len(g.net.layers) - 1}"
        self.params: dict[str, Param] = {}
        for full, p in t.params.items():  # by the name after the layer's path: weight, qkv.bias
            self.params[full.removeprefix(t.path + ".")] = self.mb.param(
                full, p.shape, _init(rng, p), copy=p.matrix, decay=p.decay
            )

    def out(self, x: Value, suffix: str = "y") -> Value:
        v = value_of(f"{self.path}.{suffix}", self.out_shape, self.g.Bt)
        self.g.act(v.buffer, v.rows, v.cols)
        return v

    def forward(self, x: Value, program: str, flags: str, training: bool) -> tuple[Value, Any]:
        raise NotImplementedError

    def backward(
        self, x: Value, y: Value, saved: Any, dy: Value, program: str, need_dx: bool
    ) -> Value | None:
        raise NotImplementedError


def _init(rng: np.random.Generator, p: L.ParamShape):
    """PyTorch's default: uniform in +-1/sqrt(fan_in), drawn when called (not in a dry run); or a
    fill, or normal(0, std) (nn.Embedding's)."""
    if p.fill is not None:
        fill = p.fill
        return lambda: np.full(p.shape, fill, np.float32)
    if p.std is not None:
        std = p.std
        return lambda: rng.normal(0.0, std, size=p.shape).astype(np.float32)
    bound = 1.0 / math.sqrt(p.fan_in)
    return lambda: rng.uniform(-bound, bound, size=p.shape).astype(np.float32)


class LinearNode(Node):
    def forward(self, x, program, flags, training):
        W, b = self.params["weight"], self.params.get("bias")
        n_out, n_in = self.out_shape[-1], self.in_shape[-1]
        common = dict(A=x.buffer, B=str(W["copy"]), M=x.rows, N=n_out, K=n_in, flags=flags)
        if self.last:
            bias = b["master"] if b else self.g.zeros(n_out)
            if "logits" not in self.pb.buffers:
                self.pb.f32("logits", (x.rows, n_out), "activations")
            self.mb.matmul(program, "matmul_logits", C="logits", bias=bias, **common)
            return Value("logits", self.out_shape, x.rows, n_out), None
        y = self.out(x)
        if b:
            self.mb.matmul(program, "matmul_fwd", C=y.buffer, bias=b["master"], **common)
        else:
            self.mb.matmul(program, "matmul_plain", C=y.buffer, **common)
        return y, None

    def backward(self, x, y, saved, dy, program, need_dx):
        W, b = self.params["weight"], self.params.get("bias")
        n_out, n_in = self.out_shape[-1], self.in_shape[-1]
        self.mb.matmul(
            program,
            "matmul_wgrad",
            A=x.buffer,
            B=dy.buffer,
            C=W["grad"],
            M=n_in,
            N=n_out,
            K=x.rows,
            trans_a=1,
        )
        if b:
            ops.colsum(self.pb, program, G=dy.buffer, out=b["grad"], M=x.rows, N=n_out)
        if not need_dx:
            return None
        dx = self.g.grad(x)
        self.mb.matmul(
            program, "matmul_plain", A=dy.buffer, B=str(W["copy"]), C=dx.buffer, M=x.rows, N=n_in, K=n_out,
            trans_b=1,
        )  # fmt: skip
        return dx


def _image(v: Value) -> dict[str, Any]:
    C, H, W = v.shape
    return {"C": C, "H": H, "W": W}


class Conv2dNode(Node):
    """im2col (the patches kept for the weight gradient) and a matmul; a 1x1 kernel at stride 1
    without padding reads its input as the patches."""

    def geometry(self, x: Value) -> dict[str, Any]:
        k, s, p = self.layer.kernel, self.layer.stride, self.layer.padding  # type: ignore[attr-defined]
        return {"B": self.g.Bt, **_image(x), "KH": k, "KW": k, "SH": s, "SW": s, "PH": p, "PW": p}

    def patches(self, x: Value, y: Value, program: str, flags: str) -> Value:
        k, s, p = self.layer.kernel, self.layer.stride, self.layer.padding  # type: ignore[attr-defined]
        if (k, s, p) == (1, 1, 0):
            return x
        cols = k * k * x.cols
        P = Value(self.g.act(f"{self.path}.patches", y.rows, cols), (cols,), y.rows, cols)
        ops.im2col(self.pb, program, X=x.buffer, P=P.buffer, flags=flags, **self.geometry(x))
        return P

    def forward(self, x, program, flags, training):
        W, b = self.params["weight"], self.params.get("bias")
        y = self.out(x)
        P = self.patches(x, y, program, flags)
        common = dict(A=P.buffer, B=str(W["copy"]), C=y.buffer, M=y.rows, N=y.cols, K=P.cols, flags=flags)
        if b:
            self.mb.matmul(program, "matmul_fwd", bias=b["master"], **common)
        else:
            self.mb.matmul(program, "matmul_plain", **common)
        return y, P

    def backward(self, x, y, P, dy, program, need_dx):
        W, b = self.params["weight"], self.params.get("bias")
        self.mb.matmul(
            program, "matmul_wgrad", A=P.buffer, B=dy.buffer, C=W["grad"], M=P.cols, N=y.cols, K=y.rows,
            trans_a=1,
        )  # fmt: skip
        if b:
            ops.colsum(self.pb, program, G=dy.buffer, out=b["grad"], M=y.rows, N=y.cols)
        if not need_dx:
            return None
        dx = self.g.grad(x)
        dP = dx if P is x else self.g.grad(P)
        self.mb.matmul(
            program, "matmul_plain", A=dy.buffer, B=str(W["copy"]), C=dP.buffer, M=y.rows, N=P.cols,
            K=y.cols, trans_b=1,
        )  # fmt: skip
        if P is not x:
            ops.col2im(self.pb, program, dP=dP.buffer, dX=dx.buffer, **self.geometry(x))
        return dx


class PoolNode(Node):
    def window(self, x: Value) -> dict[str, Any]:
        lay = self.layer
        return {"B": self.g.Bt, **_image(x), "K": lay.kernel, "S": lay.step, "P": lay.padding}  # type: ignore[attr-defined]

    def forward(self, x, program, flags, training):
        y = self.out(x)
        if isinstance(self.layer, L.MaxPool2d):
            argmax = f"{self.path}.argmax"
            if argmax not in self.pb.buffers:
                self.pb.u32(argmax, (y.rows * y.cols,), "activations")
            ops.maxpool_fwd(
                self.pb, program, X=x.buffer, Y=y.buffer, argmax=argmax, flags=flags, **self.window(x)
            )
            return y, argmax
        ops.avgpool_fwd(self.pb, program, X=x.buffer, Y=y.buffer, flags=flags, **self.window(x))
        return y, None

    def backward(self, x, y, argmax, dy, program, need_dx):
        if not need_dx:
            return None
        dx = self.g.grad(x)
        if argmax is not None:
            ops.maxpool_bwd(self.pb, program, dY=dy.buffer, argmax=argmax, dX=dx.buffer, **self.window(x))
        else:
            ops.avgpool_bwd(self.pb, program, dY=dy.buffer, dX=dx.buffer, **self.window(x))
        return dx


class FlattenNode(Node):
    """An image's pixel rows as one row an example: the same bytes for an even C, else a re-lay."""

    def forward(self, x, program, flags, training):
        n = self.out_shape[0]
        if len(x.shape) == 1 or x.cols % 2 == 0:
            return Value(x.buffer, self.out_shape, self.g.Bt, n), None
        y = self.out(x)
        ops.repack_h(
            self.pb, program, X=x.buffer, Y=y.buffer, rows_in=x.rows, cols_in=x.cols, rows_out=y.rows,
            cols_out=y.cols,
        )  # fmt: skip
        return y, None

    def backward(self, x, y, saved, dy, program, need_dx):
        if not need_dx:
            return None
        if y.buffer == x.buffer:
            return Value(dy.buffer, x.shape, x.rows, x.cols)
        dx = self.g.grad(x)
        ops.repack_h(
            self.pb, program, X=dy.buffer, Y=dx.buffer, rows_in=dy.rows, cols_in=dy.cols, rows_out=x.rows,
            cols_out=x.cols,
        )  # fmt: skip
        return dx


class ActNode(Node):
    def forward(self, x, program, flags, training):
        y = self.out(x)
        ops.act_fwd(
            self.pb,
            program,
            X=x.buffer,
            Y=y.buffer,
            rows=x.rows,
            cols=x.cols,
            act=self.layer.type,
            flags=flags,
        )
        return y, None

    def backward(self, x, y, saved, dy, program, need_dx):
        if not need_dx:
            return None
        dx = self.g.grad(x)
        ops.act_bwd(
            self.pb, program, X=x.buffer, dY=dy.buffer, dX=dx.buffer, rows=x.rows, cols=x.cols,
            act=self.layer.type,
        )  # fmt: skip
        return dx


class DropoutNode(Node):
    """A draw per step and value from (seed, the layer's index, the GPU's iteration word): the backward
    pass draws the same mask; evaluation and p = 0 pass the input through."""

    def settings(self) -> dict[str, Any]:
        return {"p": self.layer.p, "seed": self.mb.cfg.seed % (1 << 32), "stream": self.index}  # type: ignore[attr-defined]

    def forward(self, x, program, flags, training):
        if not training or self.layer.p == 0:  # type: ignore[attr-defined]
            return x, False
        y = self.out(x)
        ops.dropout_fwd(
            self.pb, program, X=x.buffer, Y=y.buffer, state="state", rows=x.rows, cols=x.cols, flags=flags,
            **self.settings(),
        )  # fmt: skip
        return y, True

    def backward(self, x, y, dropped, dy, program, need_dx):
        if not need_dx:
            return None
        if not dropped:
            return Value(dy.buffer, x.shape, x.rows, x.cols)
        dx = self.g.grad(x)
        ops.dropout_bwd(
            self.pb, program, dY=dy.buffer, dX=dx.buffer, state="state", rows=x.rows, cols=x.cols,
            **self.settings(),
        )  # fmt: skip
        return dx


class NormNode(Node):
    """LayerNorm or RMSNorm over a vector's features, with the layer's eps."""

    def forward(self, x, program, flags, training):
        y = self.out(x)
        g, rows = self.params["weight"], self.mb.rows
        stats = f"{self.path}.stats"
        if isinstance(self.layer, L.LayerNorm):
            if stats not in self.pb.buffers:
                self.pb.f32(stats, (x.rows, 2), "activations")
            ops.layernorm_fwd(
                self.pb, program, Z=x.buffer, gamma=g["master"], beta=self.params["bias"]["master"],
                Y=y.buffer, stats=stats, M=x.rows, N=x.cols, flags=flags, rows=rows, eps=self.layer.eps,
            )  # fmt: skip
        else:
            if stats not in self.pb.buffers:
                self.pb.f32(stats, (x.rows,), "activations")
            ops.rmsnorm_fwd(
                self.pb, program, X=x.buffer, gamma=g["master"], Y=y.buffer, rstd=stats, M=x.rows, N=x.cols,
                eps=self.layer.eps, flags=flags,  # type: ignore[attr-defined]
            )  # fmt: skip
        return y, stats

    def backward(self, x, y, stats, dy, program, need_dx):
        g = self.params["weight"]
        pb, M, N = self.pb, x.rows, x.cols
        dx = self.g.grad(x) if need_dx else None
        if isinstance(self.layer, L.LayerNorm):
            b = self.params["bias"]
            ops.layernorm_wgrad(
                pb,
                program,
                dY=dy.buffer,
                Z=x.buffer,
                stats=stats,
                dgamma=g["grad"],
                dbeta=b["grad"],
                M=M,
                N=N,
            )
            if dx is not None:
                ops.layernorm_bwd(
                    pb, program, dY=dy.buffer, Z=x.buffer, stats=stats, gamma=g["master"], dZ=dx.buffer, M=M,
                    N=N, rows=self.mb.rows,
                )  # fmt: skip
        else:
            ops.rmsnorm_wgrad(pb, program, dY=dy.buffer, X=x.buffer, rstd=stats, dgamma=g["grad"], M=M, N=N)
            if dx is not None:
                ops.rmsnorm_bwd(
                    pb,
                    program,
                    dY=dy.buffer,
                    X=x.buffer,
                    rstd=stats,
                    gamma=g["master"],
                    dX=dx.buffer,
                    M=M,
                    N=N,
                )
        return dx


class ResidualNode(Node):
    """y = x + f(x): f's output receives x in place; x's gradient, f's input gradient plus dy."""

    def forward(self, x, program, flags, training):
        layers = cast(Residual, self.layer).layers
        f = self.g._forward_layers(
            layers, f"{self.path}.", x, program, flags, training, self.g_keep(training)
        )
        if f.buffer == x.buffer:  # f passed x through: x + x goes to a buffer of its own, x stays
            f = self.copy(x, f"{self.path}.y", program)
        ops.add_h(self.pb, program, A=x.buffer, Y=f.buffer, M=x.rows, N=x.cols, flags=flags)
        return Value(f.buffer, x.shape, x.rows, x.cols), None

    def copy(self, v: Value, name: str, program: str) -> Value:
        out = Value(self.g.act(name, v.rows, v.cols), v.shape, v.rows, v.cols)
        ops.repack_h(
            self.pb, program, X=v.buffer, Y=out.buffer, rows_in=v.rows, cols_in=v.cols, rows_out=v.rows,
            cols_out=v.cols,
        )  # fmt: skip
        return out

    def g_keep(self, training: bool) -> dict[str, Any] | None:
        return self.g.kept if training else None

    def backward(self, x, y, saved, dy, program, need_dx):
        dx = self.g._backward_layers(
            cast(Residual, self.layer).layers, f"{self.path}.", dy, program, first=False
        )
        assert dx is not None
        if dx.buffer == dy.buffer:  # f passed its gradient through: dy + dy to a buffer of its own
            dx = self.copy(dy, f"d_{self.path}.x", program)
        ops.add_h(self.pb, program, A=dy.buffer, Y=dx.buffer, M=x.rows, N=x.cols)
        return dx


NODES: dict[type, type[Node]] = {
    L.Linear: LinearNode, L.Conv2d: Conv2dNode, L.MaxPool2d: PoolNode, L.AvgPool2d: PoolNode,
    L.Flatten: FlattenNode, L.ReLU: ActNode, L.GELU: ActNode, L.SiLU: ActNode, L.Tanh: ActNode,
    L.Dropout: DropoutNode, L.LayerNorm: NormNode, L.RMSNorm: NormNode, Residual: ResidualNode,
}  # fmt: skip


def make_node(g: Net, t: Traced, index: int, rng: np.random.Generator) -> Node:
    return NODES[type(t.layer)](g, t, index, rng)
