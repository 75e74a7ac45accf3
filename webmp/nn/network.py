"""A network: an input and a list of layers (Residual holds a list of its own), from Python or from a
JSON file (`Network.from_file`, its schema `network_schema()`), checked whole before any GPU work:
every layer's shape chained from the input (ShapeError naming the layer and both shapes), the depth
and size bounded, the last layer a Linear whose outputs are the classes (an image or vector input,
loss softmax_xent) or the vocabulary (a token input {"tokens": V, "context": T}, loss next_token:
each position's logits for the token after it).

`trace` walks it once and says, for each layer, its path (`layers.3.layers.0`: the names its
parameters carry in checkpoints), its input and output shapes and its parameters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator

from .layers import (
    GELU,
    MAX_IMAGE_SIDE,
    MAX_WIDTH,
    AvgPool2d,
    CausalSelfAttention,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Layer,
    LayerNorm,
    Linear,
    MaxPool2d,
    ParamShape,
    ReLU,
    RMSNorm,
    Shape,
    ShapeError,
    SiLU,
    Tanh,
    Tokens,
)

MAX_LAYERS = 256  # layers in all, nested ones included
MAX_DEPTH = 8  # residual blocks inside residual blocks
MAX_SPEC_BYTES = 1 << 20  # a network file; a real one is a few kilobytes
MAX_PARAMS = 1 << 28  # 1 GiB of f32 masters, before the optimizer's moments
MAX_CONTEXT = 1 << 13  # TrainConfig.context's limit: the attention scores grow with its square


class Residual(Layer):
    """y = x + f(x), f its layers, whose output shape must be their input's."""

    type: Literal["residual"] = "residual"
    layers: list[AnyLayer] = Field(min_length=1)

    def out_shape(self, path: str, shape: Shape) -> Shape:
        self.check_input(path, shape)
        out = shape
        for i, layer in enumerate(self.layers):
            out = layer.out_shape(f"{path}.layers.{i}", out)
        if out != shape:
            raise ShapeError(
                f"{self.where(path)}: its layers make {list(out)} of {list(shape)}; a residual block "
                "must keep its input's shape (x + f(x))"
            )
        return shape


AnyLayer = Annotated[
    Linear | Conv2d | MaxPool2d | AvgPool2d | Flatten | ReLU | GELU | SiLU | Tanh | Dropout | LayerNorm
    | RMSNorm | Embedding | CausalSelfAttention | Residual,
    Field(discriminator="type"),
]  # fmt: skip
Residual.model_rebuild()

InputShape = Annotated[list[Annotated[int, Field(ge=1, le=1 << 16)]], Field(min_length=1, max_length=3)]


class TokenInput(BaseModel):
    """A token network's input: windows of `context` token ids from a vocabulary of `tokens` (for
    text, its distinct characters)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tokens: Annotated[int, Field(ge=2, le=MAX_WIDTH)]
    context: Annotated[int, Field(ge=1, le=MAX_CONTEXT)]


def _input_kind(value: object) -> str:
    return "token_input" if isinstance(value, dict | TokenInput) else "shape"


# tagged, so that an error names input.context, not the union's members
NetworkInput = Annotated[
    Annotated[InputShape, Tag("shape")] | Annotated[TokenInput, Tag("token_input")],
    Discriminator(_input_kind),
]
_INPUT_TAGS = {"shape", "token_input"}


@dataclass(frozen=True)
class Traced:
    """One layer as the network places it: its path, its input and output shapes, its parameters
    (by full name, e.g. layers.0.weight) and its depth (0 at the top level)."""

    path: str
    layer: Layer
    in_shape: Shape
    out_shape: Shape
    params: dict[str, ParamShape]
    depth: int


def _walk(layers: Sequence[Layer], prefix: str, shape: Shape, depth: int, out: list[Traced]) -> Shape:
    for i, layer in enumerate(layers):
        path = f"{prefix}layers.{i}"
        after = layer.out_shape(path, shape)
        params = {f"{path}.{n}": p for n, p in layer.params(shape).items()}
        out.append(Traced(path, layer, shape, after, params, depth))
        if isinstance(layer, Residual):
            _walk(layer.layers, f"{path}.", shape, depth + 1, out)
        shape = after
    return shape


class Network(Layer):
    """{"input": [C, H, W] or [features], "layers": [...]}: the last layer's outputs are the classes,
    trained with softmax cross-entropy (loss "softmax_xent"). {"input": {"tokens": V, "context": T},
    "layers": [{"type": "embedding", ...}, ...]}: a sequence model; the last layer's outputs at
    each position are the logits of the next token, trained with cross-entropy over every position
    of every window (loss "next_token", implied by the token input).

    init: the parameters' initial values. "torch": each layer's PyTorch default (its ParamShape);
    "gpt2": GPT-2's (nanoGPT's) for a transformer, every matrix (a linear or attention layer's
    weights, an embedding's tables) normal(0, 0.02), except the projection that ends a residual
    block's branch (its last layer with parameters, a linear layer's weight or an attention's
    proj.weight), normal(0, 0.02 / sqrt(the number of residual blocks)); biases 0, norms' gains 1."""

    type: Literal["network"] = "network"
    input: NetworkInput
    layers: list[AnyLayer] = Field(min_length=1)
    loss: Literal["softmax_xent", "next_token"] = "softmax_xent"
    init: Literal["torch", "gpt2"] = "torch"

    @model_validator(mode="before")
    @classmethod
    def _implied_loss(cls, data):
        """A token input's loss, when left out, is next_token."""
        if isinstance(data, dict) and "loss" not in data and isinstance(data.get("input"), dict | TokenInput):
            data = {**data, "loss": "next_token"}
        return data

    @model_validator(mode="after")
    def _fits(self) -> Network:
        self._check_input()
        count, depth = _count(self.layers)
        if count > MAX_LAYERS:
            raise ValueError(f"{count} layers; at most {MAX_LAYERS}")
        if depth > MAX_DEPTH:
            raise ValueError(f"residual blocks nested {depth} deep; at most {MAX_DEPTH}")
        traced = self.trace()  # ShapeError (a ValueError) names the layer
        last = traced[-1] if not isinstance(self.layers[-1], Residual) else None
        outputs = "the next token's logits" if self.is_tokens else "the classes' logits"
        if last is None or not isinstance(last.layer, Linear):
            raise ValueError(
                f"the last layer ({type(self.layers[-1]).__name__.lower()}) must be a linear layer: its "
                f"outputs are {outputs}"
            )
        if isinstance(self.input, TokenInput) and last.out_shape[-1] != self.input.tokens:
            raise ValueError(
                f"the last layer ({last.path}, linear) has {last.out_shape[-1]} outputs but the input's "
                f"vocabulary is {self.input.tokens} tokens: its outputs are {outputs}"
            )
        self._check_tied(traced)
        total = sum(math.prod(p.shape) for t in traced for p in t.params.values())
        if total > MAX_PARAMS:
            raise ValueError(f"{total:,} parameters; at most {MAX_PARAMS:,}")
        return self

    def _check_input(self) -> None:
        if isinstance(self.input, TokenInput):
            if self.loss != "next_token":
                raise ValueError(f"loss {self.loss}: a token input trains with loss next_token")
            return
        if self.loss != "softmax_xent":
            raise ValueError(f"loss {self.loss}: it needs a token input {{tokens, context}}")
        if len(self.input) == 2:
            raise ValueError(
                f"input {self.input}: give [features] or an image [C, H, W] (or, for text, "
                '{"tokens": V, "context": T})'
            )
        if len(self.input) == 3 and max(self.input[1:]) > MAX_IMAGE_SIDE:
            raise ValueError(f"input {self.input}: images up to {MAX_IMAGE_SIDE} pixels a side")

    def _check_tied(self, traced: list[Traced]) -> None:
        """A tied linear layer is a token network's last, reading the first layer's (an embedding's)
        table transposed: the embedding's dim is its input's width."""
        for t in traced:
            if not (isinstance(t.layer, Linear) and t.layer.tied):
                continue
            first = self.layers[0]
            if t is not traced[-1] or t.depth or not isinstance(first, Embedding):
                raise ValueError(
                    f"{t.layer.where(t.path)}: a tied linear layer is the last layer of a token network "
                    "whose first layer is an embedding (its weight is that table, transposed)"
                )
            if t.in_shape[-1] != first.dim:
                raise ValueError(
                    f"{t.layer.where(t.path)}: its input {list(t.in_shape)} has width {t.in_shape[-1]} but "
                    f"the embedding it is tied to (layers.0) has dim {first.dim}"
                )

    @property
    def tied_head(self) -> bool:
        """Whether the last layer is a tied linear layer (the embedding's table transposed)."""
        last = self.layers[-1]
        return isinstance(last, Linear) and last.tied

    @property
    def is_tokens(self) -> bool:
        """Whether this is a sequence model (a token input)."""
        return isinstance(self.input, TokenInput)

    @property
    def in_shape(self) -> Shape:
        if isinstance(self.input, TokenInput):
            return Tokens(self.input.context, self.input.tokens)
        return tuple(self.input)

    @property
    def classes(self) -> int:
        """The last layer's outputs: the classes, or a token network's vocabulary."""
        return self.out_shape("network", self.in_shape)[-1]

    @property
    def context(self) -> int:
        """A token network's window length T (ValueError for the others)."""
        if not isinstance(self.input, TokenInput):
            raise ValueError("only a token network has a context")
        return self.input.context

    def out_shape(self, path: str, shape: Shape) -> Shape:
        out: list[Traced] = []
        return _walk(self.layers, "", shape, 0, out)

    def trace(self) -> list[Traced]:
        out: list[Traced] = []
        _walk(self.layers, "", self.in_shape, 0, out)
        if self.tied_head and isinstance(out[0].layer, Embedding):  # its table is read by the head's
            t, name = out[0], out[0].path + ".weight"  # matmuls: a working copy
            out[0] = replace(t, params={**t.params, name: t.params[name].model_copy(update={"matrix": True})})
        return _gpt2_init(out) if self.init == "gpt2" else out

    def param_shapes(self) -> dict[str, ParamShape]:
        return {name: p for t in self.trace() for name, p in t.params.items()}

    @classmethod
    def from_json(cls, text: str | bytes, what: str = "network") -> Network:
        """The network of a JSON text; ValueError in one line naming what is wrong and where."""
        if len(text) > MAX_SPEC_BYTES:
            raise ValueError(f"{what}: {len(text):,} bytes; a network file is at most {MAX_SPEC_BYTES:,}")
        try:
            data = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{what}: not JSON ({e})") from None
        except RecursionError:
            raise ValueError(f"{what}: nested deeper than a JSON parser goes") from None
        return cls.from_dict(data, what)

    @classmethod
    def from_dict(cls, data: object, what: str = "network") -> Network:
        if not isinstance(data, dict):
            raise ValueError(f"{what}: a network is a JSON object with input and layers")
        depth = residual_depth(data)
        if depth > MAX_DEPTH:  # said before pydantic recurses that deep (past its guard, in its words)
            raise ValueError(f"{what}: residual blocks nested {depth} deep; at most {MAX_DEPTH}")
        try:
            return cls(**{k: v for k, v in data.items() if k != "type"})
        except ValidationError as e:
            raise ValueError(f"{what}: {network_error(e)}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> Network:
        p = Path(path)
        try:
            size = p.stat().st_size
            if size > MAX_SPEC_BYTES:
                raise ValueError(f"{p}: {size:,} bytes; a network file is at most {MAX_SPEC_BYTES:,}")
            text = p.read_bytes()
        except OSError as e:
            raise ValueError(f"{p}: cannot read it ({e.strerror})") from None
        return cls.from_json(text, str(p))


def _gpt2_init(traced: list[Traced]) -> list[Traced]:
    """The traced layers with GPT-2's initial values (Network's init "gpt2")."""
    blocks = [t for t in traced if isinstance(t.layer, Residual)]
    ends = {name for t in blocks if (name := _branch_projection(t, traced))}
    std_end = 0.02 / math.sqrt(len(blocks)) if blocks else 0.02
    out = []
    for t in traced:
        params = {}
        for name, p in t.params.items():
            if len(p.shape) == 2:
                p = p.model_copy(update={"std": std_end if name in ends else 0.02, "fill": None})
            elif p.fill is None:  # a bias
                p = p.model_copy(update={"fill": 0.0, "std": None})
            params[name] = p
        out.append(replace(t, params=params))
    return out


def _branch_projection(block: Traced, traced: list[Traced]) -> str | None:
    """The parameter that projects residual block `block`'s branch into the stream: its last layer
    with parameters (layers without any after it, activations or dropout), a linear layer's weight
    or an attention's proj.weight; None for another layer there (a norm, a nested block)."""
    inner = [t for t in traced if t.depth == block.depth + 1 and t.path.startswith(block.path + ".layers.")]
    for t in reversed(inner):
        if isinstance(t.layer, Linear) and not t.layer.tied:
            return f"{t.path}.weight"
        if isinstance(t.layer, CausalSelfAttention):
            return f"{t.path}.proj.weight"
        if t.params or isinstance(t.layer, Residual):
            return None
    return None


def residual_depth(spec: object) -> int:
    """How deep a network's JSON nests layer lists (residual blocks), counted without recursion."""
    deepest, todo = 0, [(spec, -1)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, dict) and isinstance(node.get("layers"), list):
            deepest = max(deepest, depth + 1)
            todo += [(layer, depth + 1) for layer in node["layers"]]
    return deepest


def _count(layers: Sequence[Layer], depth: int = 0) -> tuple[int, int]:
    count, deepest = 0, depth
    for layer in layers:
        count += 1
        if isinstance(layer, Residual):
            c, d = _count(layer.layers, depth + 1)
            count, deepest = count + c, max(deepest, d)
    return count, deepest


def network_error(e: ValidationError) -> str:
    """The first error of a network's validation in one line: where (layers.3.kernel) and what."""
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"] if not (isinstance(x, str) and x in _TAGS | _INPUT_TAGS))
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "union_tag_invalid":
        msg = f"unknown layer type {err['input'].get('type')!r}; one of {sorted(_TAGS - {'network'})}"
    elif err["type"] == "union_tag_not_found":
        msg = f"a layer needs a type, one of {sorted(_TAGS - {'network'})}"
    return f"{where}: {msg}" if where else msg


_TAGS = {
    "linear", "conv2d", "maxpool2d", "avgpool2d", "flatten", "relu", "gelu", "silu", "tanh", "dropout",
    "layernorm", "rmsnorm", "embedding", "causal_self_attention", "residual", "network",
}  # fmt: skip


def network_schema() -> dict:
    """The JSON schema of a network file, from the pydantic models (as TrainConfig's is)."""
    return Network.model_json_schema()
