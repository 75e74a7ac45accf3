"""The nodes of a network's plan (webmp/models/net.py): one class per layer type, each placing its
layer's parameters and emitting its forward and backward dispatches through the launchers of
webmp/ops. Values are h matrices (Value): a vector batch [B, features], an image batch
channels-last [B*H*W, C], a sequence batch [B*T, D]."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from .. import ops
from ..nn import layers as L
from ..nn.network import Residual, Traced
from .common import Param


@dataclass(frozen=True)
class Value:
    """A batch of values in the activation format: its buffer, per-example shape, matrix rows, cols."""

    buffer: str
    shape: tuple[int, ...]
    rows: int
    cols: int
    act: str | None = None  # the buffer holds the pre-activation: the matmul reading it applies `act`


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


class Node:
    """A layer placed in a network: its parameters (declared at construction, in trace order),
    forward (returns its output and what its backward needs) and backward (returns dx, or None
    when its input needs no gradient)."""

    def __init__(self, g: Any, t: Traced, index: int, rng: np.random.Generator):  # g: the Net (net.py)
        self.g, self.mb, self.pb = g, g.mb, g.pb
        self.path, self.layer, self.index = t.path, t.layer, index
        self.in_shape, self.out_shape = t.in_shape, t.out_shape
        self.last = t.depth == 0 and t.path == f"layers.{len(g.net.layers) - 1}"
        self.params: dict[str, Param] = {}
        for full, p in t.params.items():  # by the name after the layer's path: weight, qkv.bias
            name = g.named(full)
            given = g.initial(name, p)
            self.params[full.removeprefix(t.path + ".")] = self.mb.param(
                name, p.shape, _init(rng, p) if given is None else given, copy=p.matrix, decay=p.decay
            )

    def out(self, x: Value, suffix: str = "y") -> Value:
        v = self.g.value(self.g.named(f"{self.path}.{suffix}"), self.out_shape)
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
    """y = x W + b. An activation fused into it (x.act: the activation layer before it wrote
    nothing) is applied as the matmuls load x, and its gradient as the input gradient is stored
    (matmul_dgrad): the MLP's dispatches, one rounding of dx fewer than a separate layer's."""

    @property
    def fp8(self) -> bool:
        """Whether this layer's matmuls read fp8 operands (--precision fp8: models/fp8.py): every Linear
        but, with fp8_keep_ends, the network's first layer and its last."""
        fp8 = self.mb.fp8
        return fp8 is not None and not (fp8.recipe.keep_ends and (self.last or self.path == "layers.0"))

    def fp8_input(self, x, program, record: bool, weight: bool = True) -> tuple[str, int]:
        """The matmul's A (and its fused activation code): x as it is, or with fp8 x cast to E4M3 (the
        activation applied by the cast), after the weight's copy is cast from its master (`weight`:
        the forward pass)."""
        if not self.fp8:
            return x.buffer, _code(x)
        W, fp8 = self.params["weight"], self.mb.fp8
        n_in, n_out = W["shape"]
        if weight:
            fp8.weight(program, self.path, W["master"], str(W["copy"]), n_in, n_out, record=record)
        return fp8.input(program, self.path, x.buffer, x.rows, x.cols, _code(x), record=record), 0

    def forward(self, x, program, flags, training):
        W, b = self.params["weight"], self.params.get("bias")
        n_out, n_in = self.out_shape[-1], self.in_shape[-1]
        a, act = self.fp8_input(x, program, record=training)
        common = dict(A=a, B=str(W["copy"]), M=x.rows, N=n_out, K=n_in, a_act=act, flags=flags)
        if self.last:
            bias = b["master"] if b else self.g.zeros(n_out)
            logits = self.g.named("logits")
            if logits not in self.pb.buffers:
                self.pb.f32(logits, (x.rows, n_out), "activations")
            self.mb.matmul(program, "matmul_logits", C=logits, bias=bias, **common)
            return Value(logits, self.out_shape, x.rows, n_out), None
        y = self.out(x)
        if b:
            self.mb.matmul(program, "matmul_fwd", C=y.buffer, bias=b["master"], **common)
        else:
            self.mb.matmul(program, "matmul_plain", C=y.buffer, **common)
        return y, None

    def backward(self, x, y, saved, dy, program, need_dx):
        """dW = A^T dY, db = the column sums of dY, dX = dY W^T; with fp8, A is x cast to E4M3 again (as
        the forward pass cast it) and dY in both products its E5M2 cast (the bias from dY itself, as
        in Transformer Engine)."""
        W, b = self.params["weight"], self.params.get("bias")
        n_out, n_in = self.out_shape[-1], self.in_shape[-1]
        fp8, g = self.mb.fp8, dy.buffer
        if fp8 is not None and self.fp8:
            g = fp8.grad_output(program, self.path, dy.buffer, dy.rows, dy.cols)
        a, act = self.fp8_input(x, program, record=False, weight=False)
        self.mb.matmul(
            program, "matmul_wgrad", A=a, B=g, C=W["grad"], M=n_in, N=n_out, K=x.rows, a_act=act, trans_a=1
        )
        if b:
            ops.colsum(self.pb, program, G=dy.buffer, out=b["grad"], M=x.rows, N=n_out)
        if not need_dx:
            return None
        dx = self.g.grad(Value(x.buffer, x.shape, x.rows, x.cols))  # of the pre-activation, if fused
        Wt, tb = self.g.transposed(program, W)
        common = dict(A=g, B=Wt, C=dx.buffer, M=x.rows, N=n_in, K=n_out, trans_b=tb)
        if x.act is None:
            self.mb.matmul(program, "matmul_plain", **common)
        else:
            self.mb.matmul(program, "matmul_dgrad", Zprev=x.buffer, out_act=_code(x), **common)
        return dx


def _code(x: Value) -> int:
    return ops.ACT_CODES[x.act or "none"]


def _image(v: Value) -> dict[str, Any]:
    C, H, W = v.shape
    return {"C": C, "H": H, "W": W}


class Conv2dNode(Node):
    """A convolution is one matmul on its input read as its patch matrix (implicit im2col: nothing
    stored, and the weight gradient reads the same patches again); a 1x1 kernel at stride 1
    without padding reads its input as the patches. The input gradient is dY Wᵀ into the patch
    gradient, a scratch buffer shared by the layers of its shape (only this layer's backward uses
    it), then col2im."""

    def geometry(self, x: Value) -> dict[str, Any]:
        k, s, p = self.layer.kernel, self.layer.stride, self.layer.padding  # type: ignore[attr-defined]
        return {"B": self.g.Bt, **_image(x), "KH": k, "KW": k, "SH": s, "SW": s, "PH": p, "PW": p}

    def patches(self, x: Value) -> dict[str, Any] | None:
        """The geometry with which the matmuls read x as its patches; None where x is its own."""
        k, s, p = self.layer.kernel, self.layer.stride, self.layer.padding  # type: ignore[attr-defined]
        return None if (k, s, p) == (1, 1, 0) else self.geometry(x)

    def forward(self, x, program, flags, training):
        W, b = self.params["weight"], self.params.get("bias")
        y = self.out(x)
        n = self.layer.kernel**2 * x.cols  # type: ignore[attr-defined]
        common = dict(
            A=x.buffer, B=str(W["copy"]), C=y.buffer, M=y.rows, N=y.cols, K=n, flags=flags,
            a_image=self.patches(x),
        )  # fmt: skip
        if b:
            self.mb.matmul(program, "matmul_fwd", bias=b["master"], **common)
        else:
            self.mb.matmul(program, "matmul_plain", **common)
        return y, None

    def backward(self, x, y, saved, dy, program, need_dx):
        W, b = self.params["weight"], self.params.get("bias")
        n, image = self.layer.kernel**2 * x.cols, self.patches(x)  # type: ignore[attr-defined]
        self.mb.matmul(
            program, "matmul_wgrad", A=x.buffer, B=dy.buffer, C=W["grad"], M=n, N=y.cols, K=y.rows,
            trans_a=1, a_image=image,
        )  # fmt: skip
        if b:
            ops.colsum(self.pb, program, G=dy.buffer, out=b["grad"], M=y.rows, N=y.cols)
        if not need_dx:
            return None
        dx = self.g.grad(x)
        dP = dx.buffer if image is None else self.g.act(f"conv_d_patches_{y.rows}x{n}", y.rows, n)
        self.mb.matmul(
            program, "matmul_plain", A=dy.buffer, B=str(W["copy"]), C=dP, M=y.rows, N=n, K=y.cols,
            trans_b=1,
        )  # fmt: skip
        if image is not None:
            ops.col2im(self.pb, program, dP=dP, dX=dx.buffer, **image)
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
    """An activation as a layer of its own, or, when the layer after it is a linear one, fused into
    that layer's matmuls (its output never stored: the same bits forward, one rounding less back)."""

    def forward(self, x, program, flags, training):
        if self.path in self.g.fused:
            assert x.act is None
            return Value(x.buffer, x.shape, x.rows, x.cols, act=self.layer.type), None
        y = self.out(x)
        ops.act_fwd(
            self.pb, program, X=x.buffer, Y=y.buffer, rows=x.rows, cols=x.cols, act=self.layer.type,
            flags=flags,
        )  # fmt: skip
        return y, None

    def backward(self, x, y, saved, dy, program, need_dx):
        if not need_dx:
            return None
        if self.path in self.g.fused:  # the linear layer after it gave the pre-activation's gradient
            return Value(dy.buffer, x.shape, x.rows, x.cols)
        dx = self.g.grad(x)
        ops.act_bwd(
            self.pb, program, X=x.buffer, dY=dy.buffer, dX=dx.buffer, rows=x.rows, cols=x.cols,
            act=self.layer.type,
        )  # fmt: skip
        return dx


class DropoutNode(Node):
    """A draw per step and value from (seed, the layer's index, the GPU's iteration word; with
    accumulation the value's place among the step's rows): the backward pass draws the same mask;
    evaluation and p = 0 pass the input through."""

    def settings(self, x: Value) -> dict[str, Any]:
        mb = self.mb
        micro = x.rows * x.cols * mb.world if mb.micro_batches > 1 else 0  # a micro-batch's elements
        p = self.layer.p  # type: ignore[attr-defined]
        return {"p": p, "seed": mb.cfg.seed % (1 << 32), "stream": self.index, "micro_elems": micro}

    def forward(self, x, program, flags, training):
        if not training or self.layer.p == 0:  # type: ignore[attr-defined]
            return x, False
        y = self.out(x)
        ops.dropout_fwd(
            self.pb, program, X=x.buffer, Y=y.buffer, state="state", rows=x.rows, cols=x.cols, flags=flags,
            **self.settings(x),
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
            **self.settings(x),
        )  # fmt: skip
        return dx


class NormNode(Node):
    """LayerNorm or RMSNorm over a vector's features, with the layer's eps."""

    def forward(self, x, program, flags, training):
        y = self.out(x)
        g, rows = self.params["weight"], self.mb.rows
        stats = self.g.named(f"{self.path}.stats")
        if isinstance(self.layer, L.LayerNorm):
            if stats not in self.pb.buffers:
                self.pb.f32(stats, (x.rows, 2), "activations")
            ops.layernorm_fwd(
                self.pb, program, Z=x.buffer, gamma=g["master"], beta=self.params["bias"]["master"],
                Y=y.buffer, stats=stats, M=x.rows, N=x.cols, flags=flags, rows=rows, eps=self.layer.eps,
                add=self.residual_add(x, program, flags),
            )  # fmt: skip
        else:
            if stats not in self.pb.buffers:
                self.pb.f32(stats, (x.rows,), "activations")
            ops.rmsnorm_fwd(
                self.pb, program, X=x.buffer, gamma=g["master"], Y=y.buffer, rstd=stats, M=x.rows, N=x.cols,
                eps=self.layer.eps, flags=flags,  # type: ignore[attr-defined]
            )  # fmt: skip
        return y, stats

    def residual_add(self, x: Value, program: str, flags: str) -> str | None:
        """The buffer a LayerNorm adds into x first, in its own dispatch (layernorm_fwd's `add`):
        none here; the sampler's row pass takes the residual add before it (net_sample.RowNormNode)."""
        return None

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


def make_node(g: Any, t: Traced, index: int, rng: np.random.Generator) -> Node:
    return NODES[type(t.layer)](g, t, index, rng)
