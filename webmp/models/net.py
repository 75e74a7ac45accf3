"""A network of webmp.nn layers as a training plan (model 'net'): each layer's node declares its
parameters and emits its forward and backward dispatches through the launchers of webmp/ops.

Values flow as h matrices: a vector batch [B, features], an image batch channels-last [B*H*W, C]
(one row a pixel), a sequence batch [B*T, D] (one row a position). A network with a token input
(sequence models on text) is webmp/models/net_seq.py's TokenNet, a Net with its own data, loss
rows and evaluation and the nodes of its own layers (the embedding, attention). The built-in
models are presets: MLPNet (mlp.py) and GPTNet (gpt.py) build their networks under their own names
and buffer order through the hooks below (named, placed, initial, transposed, node_type).

Every value has its own buffer (Flatten of an even-C image reuses its input's: the same bytes),
and its gradient the buffer "d_" + its name, written by the layer that reads the
value. No node's backward reads its own output, so a residual block adds its input into its last
layer's output in place, and its input's gradient into its first layer's input gradient.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..data.tables import Dataset, perm_bits
from ..engine.plan import EvalSpec, Plan
from ..engine.tiles import TileTable
from ..nn import layers as L
from ..nn.network import Network, Residual, Traced
from .common import EVAL, EVAL_FLAGS, Init, ModelBuilder, Param, replayed
from .net_nodes import NODES, Node, Value, value_of


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


ACTIVATIONS = (L.ReLU, L.GELU, L.SiLU, L.Tanh)


def fused_activations(layers, prefix: str = "") -> set[str]:
    """The paths of the activation layers whose next layer (in the same list) is a linear one: that
    layer's matmuls apply them on load (and their gradient on store), so no node stores them."""
    out = set()
    for i, layer in enumerate(layers):
        if isinstance(layer, ACTIVATIONS) and i + 1 < len(layers) and isinstance(layers[i + 1], L.Linear):
            out.add(f"{prefix}layers.{i}")
        if isinstance(layer, Residual):
            out |= fused_activations(layer.layers, f"{prefix}layers.{i}.")
    return out


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
        self.rng = np.random.default_rng(self.mb.cfg.seed)
        self.fused = fused_activations(self.net.layers)
        self.nodes: dict[str, Node] = {}
        for i, t in enumerate(self.traced):
            self.nodes[t.path] = self.node_type(t.layer)(self, t, i, self.rng)
            self.placed(t)
        self.lens: list[tuple[str, str]] = []

    def node_type(self, layer: L.Layer) -> type[Node]:
        return NODES[type(layer)]

    def act(self, name: str, rows: int, cols: int) -> str:
        """The h buffer `name` [rows, cols] (as `named` names it), declared at its first use."""
        name = self.named(name)
        if name not in self.pb.buffers:
            self.pb.h(name, rows, cols)
        return name

    # hooks of a preset (webmp/models/gpt.py, mlp.py): its own names, buffer order, initial values,
    # weight forms
    def named(self, name: str) -> str:
        """The buffer that a node's value or parameter `name` (by its layer's path) is stored in."""
        return name

    def placed(self, t: Traced) -> None:
        """After layer t's node declared its parameters: a preset declares the buffers that follow
        them in its order (the MLP its layer's activations); a user's network declares them at
        their first use."""

    def initial(self, name: str, p: L.ParamShape) -> Init | None:
        """Parameter `name`'s (shape p) initial value, drawn when called from self.rng or given;
        None: drawn as p says."""
        return None

    def transposed(self, program: str, p: Param) -> tuple[str, int]:
        """Weight p's working copy for a product reading it transposed (dx = dy Wᵀ), and its trans_b."""
        return str(p["copy"]), 1

    def value(self, buffer: str, shape: tuple[int, ...]) -> Value:
        """The value in `buffer` of a layer's output shape, for this plan's batch."""
        return value_of(buffer, shape, self.Bt)

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
            micro=mb.micro_stride,
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
            # the network's first layer's input is the data (and so is a fused first activation's)
            to_data = first and (i == 0 or (i == 1 and f"{prefix}layers.0" in self.fused))
            dx = node.backward(x, y, saved, dy, program, need_dx=not to_data)
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
        pb.u32("eval_chunk", (1,), "other")
        counters = dict(logits="logits", labels="y", result="eval_result", chunk="eval_chunk")
        ops.eval_reset(pb, E, **counters, B=Bt, C=C)
        for _ in range(ops.cdiv(n_test, Bt)):
            ops.gather_eval(
                pb, E, xs="test_x", ys="test_y", chunk="eval_chunk", X="X", y="y", n_rows=n_test,
                features=self.data.features, batch=Bt,
            )  # fmt: skip
            forward(E)
            ops.eval_count(pb, E, **counters, B=Bt, C=C)
            ops.eval_next_chunk(pb, E, **counters, B=Bt, C=C)
        return {"result_buffer": "eval_result", "test_rows": n_test, "loss_buffer": None}
