"""A network's layer table, as torchinfo's or Keras' summary shows one: each layer's output shape,
parameters and the activation bytes it keeps in each precision, read from the buffers a dry run of
the training plan declares (so the table is what the GPU will hold, not an estimate).

A buffer belongs to the layer whose path is its name's longest prefix (`layers.3.layers.0.y`,
`layers.3.layers.0.patches`, and their gradients `d_...`); the logits and their gradient belong to the
last layer; the batch as the GPU reads it (X, its pixel re-lay, the labels, the loss rows) to the
input row; scratch that several layers share (the attention scores of layers with the same head
count) to a row of its own.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..config import TrainConfig
from ..data.tables import Dataset, make_dataset
from ..data.text import TextCorpus, tokenize
from ..engine.plan import BufferSpec, memory_by_category
from ..nn.network import Network
from . import plan_buffers

PRECISIONS = {"mixed": "native", "fp32": "fp32"}  # the table's columns: precision -> the plan's f16 path
INPUT = "(input)"
SHARED = "(shared)"
OUTPUT_BUFFERS = ("logits", "dlogits")
# the batch as the GPU reads it: examples, their pixel re-lay, labels or token ids and targets, the
# loss rows, and the embedding gradient's row order (spans, order)
INPUT_BUFFERS = ("X", "X_pixels", "y", "loss_rows", "idx", "targets", "spans", "order")


@dataclass(frozen=True)
class LayerRow:
    path: str
    type: str
    depth: int
    out_shape: tuple[int, ...]  # per example: [C, H, W] or [features]
    params: int
    activations: dict[str, int]  # bytes by precision ("mixed", "fp32")


@dataclass(frozen=True)
class LayerTable:
    """The rows (the input first, then every layer in trace order, nested ones after their block),
    the batch size they were sized for and the totals: parameters, and bytes by category and
    precision (the plan's own accounting)."""

    input_shape: tuple[int, ...]
    batch_size: int
    rows: list[LayerRow]
    totals: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def format(self) -> str:
        return format_layer_table(self)


def spec_dataset(net: Network, rows: int = 2) -> Dataset | TextCorpus:
    """A stand-in for data of the network's shape (what a dry run needs: the features and classes,
    or a text of the vocabulary's size a few windows long)."""
    if net.is_tokens:
        V, T = net.classes, net.context
        chars = "".join(chr(0x4E00 + i) for i in range(V))  # V distinct characters (CJK: no surrogates)
        return tokenize(chars * (1 + 20 * T // V), "spec", "", "")
    x = np.zeros((rows, math.prod(net.in_shape)))
    y = np.arange(rows) % net.classes
    return make_dataset("spec", x, y, x, y, net.classes)


def owner(name: str, paths: list[str], last: str) -> str:
    """The layer a buffer belongs to: the longest layer path its name starts with."""
    base = name.removeprefix("d_")
    if base in OUTPUT_BUFFERS or name in OUTPUT_BUFFERS:
        return last
    mine = [p for p in paths if base.startswith(p + ".")]
    if mine:
        return max(mine, key=len)
    return INPUT if name in INPUT_BUFFERS else SHARED


def activation_bytes(buffers: list[BufferSpec], paths: list[str], last: str) -> dict[str, int]:
    out = dict.fromkeys([INPUT, *paths, SHARED], 0)
    for b in buffers:
        if b["category"] == "activations":
            out[owner(b["name"], paths, last)] += b["bytes"]
    return out


def layer_table(net: Network, batch_size: int, data: Dataset | TextCorpus | None = None) -> LayerTable:
    """The layer table of `net` trained at `batch_size` (on `data` when given: its splits sized in the
    data row; else a stand-in of the network's shape)."""
    data = data or spec_dataset(net)
    traced = net.trace()
    paths = [t.path for t in traced]
    last = f"layers.{len(net.layers) - 1}"
    acts: dict[str, dict[str, int]] = {}
    memory: dict[str, dict[str, int]] = {}
    for precision, path in PRECISIONS.items():
        cfg = TrainConfig.model_validate(
            {"model_spec": net, "batch_size": batch_size, "precision": precision}
        )
        buffers = plan_buffers(cfg, data, path)
        acts[precision] = activation_bytes(buffers, paths, last)
        memory[precision] = memory_by_category(buffers)
    in_shape = tuple(net.in_shape)  # plain (a token input's shape is a tuple subclass asdict cannot copy)
    rows = [LayerRow(INPUT, "input", 0, in_shape, 0, {p: acts[p][INPUT] for p in PRECISIONS})]
    for t in traced:
        n = sum(math.prod(p.shape) for p in t.params.values())
        rows.append(
            LayerRow(
                t.path, t.layer.type, t.depth, tuple(t.out_shape), n, {p: acts[p][t.path] for p in PRECISIONS}
            )
        )
    if any(acts[p][SHARED] for p in PRECISIONS):
        rows.append(LayerRow(SHARED, "scratch", 0, (), 0, {p: acts[p][SHARED] for p in PRECISIONS}))
    totals = {
        "params": sum(r.params for r in rows),
        "activations": {p: sum(a[p] for a in (r.activations for r in rows)) for p in PRECISIONS},
        "memory": memory,
    }
    return LayerTable(in_shape, batch_size, rows, totals)


def size(n: int) -> str:
    """Bytes as torchinfo writes them (decimal units)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def format_layer_table(table: LayerTable) -> str:
    B = table.batch_size
    head = ("layer", "type", "output shape", "params", "act. mixed", "act. fp32")
    lines = [
        (
            "  " * r.depth + r.path,
            r.type,
            str([B, *r.out_shape]) if r.path != SHARED else "",
            f"{r.params:,}",
            size(r.activations["mixed"]),
            size(r.activations["fp32"]),
        )
        for r in table.rows
    ]
    t = table.totals
    total = (
        "total",
        "",
        "",
        f"{t['params']:,}",
        size(t["activations"]["mixed"]),
        size(t["activations"]["fp32"]),
    )
    widths = [max(len(row[i]) for row in [head, *lines, total]) for i in range(len(head))]

    def line(cells: tuple[str, ...]) -> str:
        left = [c.ljust(w) for c, w in zip(cells[:3], widths[:3], strict=True)]
        right = [c.rjust(w) for c, w in zip(cells[3:], widths[3:], strict=True)]
        return "  ".join(left + right).rstrip()

    rule = "-" * len(line(head))
    out = [line(head), rule, *map(line, lines), rule, line(total), ""]
    for precision in PRECISIONS:
        m = t["memory"][precision]
        parts = ", ".join(f"{k.replace('_', ' ')} {size(v)}" for k, v in m.items())
        out.append(f"{precision}: {size(sum(m.values()))} on the GPU ({parts})")
    ratio = t["activations"]["mixed"] / max(t["activations"]["fp32"], 1)
    out.append(f"activations mixed/fp32: {ratio:.2f} (batch {B})")
    return "\n".join(out)
