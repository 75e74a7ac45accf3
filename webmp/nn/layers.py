"""The layers a network is built from, as what they are: their settings (pydantic models, so a JSON
file and Python give the same objects and the same errors), the shape each makes of its input and
the parameters it owns. How each runs on the GPU (its dispatches, forward and backward) is its
twin in webmp/models/net.py.

Shapes are per example: `(features,)` for vectors, `(C, H, W)` for images, `(T, D)` for sequences
(a value per position of a window of T tokens) and `Tokens` for a token network's input (T token
ids from a vocabulary of V). On the GPU an image batch is stored channels-last, one row a pixel
([B*H*W, C]); Flatten gives the (H, W, C) order, whose Linear weights are PyTorch's (C, H, W) ones
with their rows permuted. A sequence batch is one row a position ([B*T, D], row b*T + t), so the
layers that act per feature vector (Linear, the norms, activations, Dropout) act per position.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Shape = tuple[int, ...]
# Limits beyond any model this engine trains on one device, so a typo is caught before any work.
MAX_WIDTH = 1 << 16  # features, channels or classes of one layer
MAX_IMAGE_SIDE = 1 << 12
MAX_KERNEL = 64
MAX_HEADS = 1 << 10  # attention heads (TrainConfig.n_head's limit)
Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]
Side = Annotated[int, Field(ge=1, le=MAX_KERNEL)]


class ShapeError(ValueError):
    """A layer that cannot take its input: the message names the layer (path and type) and both shapes."""


class Tokens(tuple[int, ...]):
    """A token network's input as a shape: (T,), T token ids an example, with the vocabulary size V
    (`vocab`) the embedding's table needs. Equal to the plain tuple (T,)."""

    vocab: int

    def __new__(cls, context: int, vocab: int) -> Tokens:
        shape = super().__new__(cls, (context,))
        shape.vocab = vocab
        return shape


def kind_of(shape: Shape) -> str:
    """ "tokens", "vector", "sequence" or "image": what a value of this per-example shape is."""
    if isinstance(shape, Tokens):
        return "tokens"
    return {1: "vector", 2: "sequence", 3: "image"}[len(shape)]


KIND_TEXT = {
    "vector": "a vector [features]", "image": "an image [C, H, W]", "sequence": "a sequence [T, D]",
    "tokens": "token ids [T]",
}  # fmt: skip
# A network on a table (vector or image input) or on text (tokens, then sequences): a layer that
# cannot take its input names what it takes in that kind of network (all it takes if none).
_FAMILY = {"vector": "table", "image": "table", "sequence": "text", "tokens": "text"}
_HINT = {
    ("image", "vector"): " (put a flatten layer before it)",
    ("tokens", "sequence"): " (a token network's first layer is an embedding)",
}


def shape_text(shape: Shape) -> str:
    """A shape in messages: [1, 8, 8], [7, 16]; token ids as `token ids [7]`."""
    return f"token ids [{shape[0]}]" if isinstance(shape, Tokens) else str(list(shape))


class ParamShape(BaseModel):
    """A parameter a layer owns: its shape (weights [in, out]), PyTorch's default init (uniform in
    +-1/sqrt(fan_in), the constant `fill` or normal(0, `std`)), and whether AdamW's weight decay
    applies."""

    shape: tuple[int, ...]
    fan_in: int = 0
    fill: float | None = None
    std: float | None = None  # normal(0, std) instead (nn.Embedding's default: 1)
    decay: bool = False
    matrix: bool = False  # read by the matmuls: an f16 working copy is kept


class Layer(BaseModel):
    """What every layer has: a `type` (its JSON name), the shape it makes of its input (ShapeError
    naming both otherwise) and the parameters it owns for that input."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str  # each layer's Literal: its name in a JSON file
    takes: ClassVar[tuple[str, ...]] = ("vector", "image", "sequence")  # the input kinds (kind_of)

    def where(self, path: str) -> str:
        return f"{path} ({self.type})"

    def check_input(self, path: str, shape: Shape) -> None:
        kind = kind_of(shape)
        if kind not in self.takes:
            fits = [k for k in self.takes if _FAMILY[k] == _FAMILY[kind]] or list(self.takes)
            want = " or ".join(KIND_TEXT[k] for k in fits)
            hint = "".join(_HINT.get((kind, k), "") for k in fits)
            raise ShapeError(f"{self.where(path)}: takes {want}, got {shape_text(shape)}{hint}")

    def out_shape(self, path: str, shape: Shape) -> Shape:
        self.check_input(path, shape)
        return shape

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        return {}


class Linear(Layer):
    """y = x W + b, W [in, out] (PyTorch's nn.Linear weight transposed), on a vector or on each
    position of a sequence [T, in] (-> [T, out]).

    tied: a token network's last layer whose weight is its embedding's table transposed (GPT-2's
    tied head, logits = x wteᵀ): it owns no parameters, and has no bias (bias false is implied)."""

    type: Literal["linear"] = "linear"
    out: Width
    bias: bool = True
    tied: bool = False
    takes: ClassVar[tuple[str, ...]] = ("vector", "sequence")

    @model_validator(mode="before")
    @classmethod
    def _tied_has_no_bias(cls, data):
        if isinstance(data, dict) and data.get("tied") and "bias" not in data:
            data = {**data, "bias": False}
        return data

    @model_validator(mode="after")
    def _tied_bias(self) -> Linear:
        if self.tied and self.bias:
            raise ValueError("a tied linear layer has no bias (its weight is the embedding's table)")
        return self

    def out_shape(self, path: str, shape: Shape) -> Shape:
        self.check_input(path, shape)
        return (*shape[:-1], self.out)

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        if self.tied:
            return {}
        fan_in = shape[-1]
        p = {"weight": ParamShape(shape=(fan_in, self.out), fan_in=fan_in, decay=True, matrix=True)}
        if self.bias:
            p["bias"] = ParamShape(shape=(self.out,), fan_in=fan_in)
        return p


def _pooled(where: str, shape: Shape, k: int, stride: int, padding: int) -> Shape:
    """(OH, OW) of a k x k window at `stride` over the image padded by `padding` on each side."""
    C, H, W = shape
    if padding * 2 > k:
        raise ShapeError(f"{where}: padding {padding} must be at most half the kernel {k} (as PyTorch)")
    if k > H + 2 * padding or k > W + 2 * padding:
        raise ShapeError(f"{where}: kernel {k} is larger than its input {list(shape)} padded by {padding}")
    return ((H + 2 * padding - k) // stride + 1, (W + 2 * padding - k) // stride + 1)


class Conv2d(Layer):
    """A 2-D convolution (cross-correlation, as PyTorch's nn.Conv2d): square kernel, one stride and
    zero padding for both sides. Weights [kernel*kernel*C, out], rows in (kh, kw, c) order."""

    type: Literal["conv2d"] = "conv2d"
    out: Width
    kernel: Side
    stride: Side = 1
    padding: Annotated[int, Field(ge=0, le=MAX_KERNEL)] = 0
    bias: bool = True
    takes: ClassVar[tuple[str, ...]] = ("image",)

    def out_shape(self, path: str, shape: Shape) -> Shape:
        self.check_input(path, shape)
        k, p = self.kernel, self.padding
        C, H, W = shape
        if k > H + 2 * p or k > W + 2 * p:
            raise ShapeError(
                f"{self.where(path)}: kernel {k} is larger than its input {list(shape)} padded by {p}"
            )
        return (self.out, (H + 2 * p - k) // self.stride + 1, (W + 2 * p - k) // self.stride + 1)

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        fan_in = shape[0] * self.kernel**2
        p = {"weight": ParamShape(shape=(fan_in, self.out), fan_in=fan_in, decay=True, matrix=True)}
        if self.bias:
            p["bias"] = ParamShape(shape=(self.out,), fan_in=fan_in)
        return p


class _Pool(Layer):
    kernel: Side
    stride: Annotated[int | None, Field(ge=1, le=MAX_KERNEL)] = None  # None: the kernel (PyTorch)
    padding: Annotated[int, Field(ge=0, le=MAX_KERNEL)] = 0
    takes: ClassVar[tuple[str, ...]] = ("image",)

    @property
    def step(self) -> int:
        return self.stride or self.kernel

    def out_shape(self, path: str, shape: Shape) -> Shape:
        self.check_input(path, shape)
        return (shape[0], *_pooled(self.where(path), shape, self.kernel, self.step, self.padding))


class MaxPool2d(_Pool):
    type: Literal["maxpool2d"] = "maxpool2d"


class AvgPool2d(_Pool):
    """PyTorch's AvgPool2d defaults: padding counts as zeros in the average (count_include_pad)."""

    type: Literal["avgpool2d"] = "avgpool2d"


class Flatten(Layer):
    """An image [C, H, W] as a vector of H*W*C features in (h, w, c) order (the layout it has on the
    GPU; a vector passes through)."""

    type: Literal["flatten"] = "flatten"
    takes: ClassVar[tuple[str, ...]] = ("vector", "image")

    def out_shape(self, path: str, shape: Shape) -> Shape:
        self.check_input(path, shape)
        n = 1
        for s in shape:
            n *= s
        return (n,)


class ReLU(Layer):
    type: Literal["relu"] = "relu"


class GELU(Layer):
    """GELU, tanh approximation (PyTorch's GELU(approximate="tanh"))."""

    type: Literal["gelu"] = "gelu"


class SiLU(Layer):
    type: Literal["silu"] = "silu"


class Tanh(Layer):
    type: Literal["tanh"] = "tanh"


class Dropout(Layer):
    """Zeroes each value with probability p in training (a counter-based draw per step, seeded by
    the run's seed), scaling the rest by 1/(1-p); the identity in evaluation."""

    type: Literal["dropout"] = "dropout"
    p: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.5


class LayerNorm(Layer):
    """LayerNorm over a vector's features, or each position's of a sequence (PyTorch's
    nn.LayerNorm(features)): gamma 1, beta 0."""

    type: Literal["layernorm"] = "layernorm"
    eps: Annotated[float, Field(gt=0.0, le=1.0)] = 1e-5
    takes: ClassVar[tuple[str, ...]] = ("vector", "sequence")

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        n = shape[-1:]
        return {"weight": ParamShape(shape=n, fill=1.0), "bias": ParamShape(shape=n, fill=0.0)}


class RMSNorm(Layer):
    """RMSNorm over a vector's features, or each position's of a sequence (PyTorch's
    nn.RMSNorm(features)): gamma 1; eps None is PyTorch's default, float32's machine epsilon."""

    type: Literal["rmsnorm"] = "rmsnorm"
    eps: Annotated[float | None, Field(gt=0.0, le=1.0)] = None
    takes: ClassVar[tuple[str, ...]] = ("vector", "sequence")

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        return {"weight": ParamShape(shape=shape[-1:], fill=1.0)}


class Embedding(Layer):
    """Token ids [T] -> a sequence [T, dim]: row id of the token table `weight` [V, dim] plus, with
    `positions`, row t of the learned position table `positions` [T, dim] (GPT-2's wte and wpe),
    added in f32 from the f32 tables. The first layer of a token network, and only there. Initial
    values PyTorch's nn.Embedding default, normal(0, 1), both tables; AdamW decays both, as it
    does the gpt's embeddings."""

    type: Literal["embedding"] = "embedding"
    dim: Width
    positions: bool = True
    takes: ClassVar[tuple[str, ...]] = ("tokens",)

    def check_input(self, path: str, shape: Shape) -> None:
        if not isinstance(shape, Tokens):
            raise ShapeError(
                f"{self.where(path)}: takes token ids [T], got {shape_text(shape)}: an embedding is the "
                'first layer of a token network (input {"tokens": V, "context": T}), and only there'
            )

    def out_shape(self, path: str, shape: Shape) -> Shape:
        self.check_input(path, shape)
        return (shape[0], self.dim)

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        vocab = shape.vocab if isinstance(shape, Tokens) else 0
        p = {"weight": ParamShape(shape=(vocab, self.dim), std=1.0, decay=True)}
        if self.positions:
            p["positions"] = ParamShape(shape=(shape[0], self.dim), std=1.0, decay=True)
        return p


class CausalSelfAttention(Layer):
    """Multi-head causal self-attention over a sequence [T, D], as the gpt's blocks have it: the
    fused projection qkv = x W_qkv + b_qkv ([D, 3D], columns q | k | v, head h owning columns
    h*d .. h*d + d - 1 of each third, d = D / heads), per head softmax(q k^T / sqrt(d)) over the
    positions up to each one, the heads' outputs side by side (o [T, D]), then y = o W_proj + b_proj.
    D must be `heads` times an even head size (the kernels load a head's columns as whole words).
    Parameters qkv.weight, qkv.bias, proj.weight, proj.bias (bias=False: no biases), with PyTorch's
    nn.Linear defaults (uniform in +-1/sqrt(D)); the weights decayed."""

    type: Literal["causal_self_attention"] = "causal_self_attention"
    heads: Annotated[int, Field(ge=1, le=MAX_HEADS)]
    bias: bool = True
    takes: ClassVar[tuple[str, ...]] = ("sequence",)

    def out_shape(self, path: str, shape: Shape) -> Shape:
        self.check_input(path, shape)
        D, H = shape[1], self.heads
        if D % H:
            raise ShapeError(
                f"{self.where(path)}: its input {list(shape)} has width {D}, not a multiple of heads {H}"
            )
        if (D // H) % 2:
            raise ShapeError(
                f"{self.where(path)}: its input {list(shape)} has heads {H} of size {D // H}; the head size "
                "must be even (the kernels load a head's columns as whole words)"
            )
        return shape

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        D = shape[-1]
        p = {"qkv.weight": ParamShape(shape=(D, 3 * D), fan_in=D, decay=True, matrix=True)}
        if self.bias:
            p["qkv.bias"] = ParamShape(shape=(3 * D,), fan_in=D)
        p["proj.weight"] = ParamShape(shape=(D, D), fan_in=D, decay=True, matrix=True)
        if self.bias:
            p["proj.bias"] = ParamShape(shape=(D,), fan_in=D)
        return p
