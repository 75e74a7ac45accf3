"""The layers a network is built from, as what they are: their settings (pydantic models, so a JSON
file and Python give the same objects and the same errors), the shape each makes of its input and
the parameters it owns. How each runs on the GPU (its dispatches, forward and backward) is its
twin in webmp/models/net.py.

Shapes are per example: `(features,)` for vectors, `(C, H, W)` for images. On the GPU an image
batch is stored channels-last, one row a pixel ([B*H*W, C]); Flatten gives the (H, W, C) order,
whose Linear weights are PyTorch's (C, H, W) ones with their rows permuted.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

Shape = tuple[int, ...]
# Limits beyond any model this engine trains on one device, so a typo is caught before any work.
MAX_WIDTH = 1 << 16  # features, channels or classes of one layer
MAX_IMAGE_SIDE = 1 << 12
MAX_KERNEL = 64
Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]
Side = Annotated[int, Field(ge=1, le=MAX_KERNEL)]


class ShapeError(ValueError):
    """A layer that cannot take its input: the message names the layer (path and type) and both shapes."""


class ParamShape(BaseModel):
    """A parameter a layer owns: its shape (weights [in, out]), PyTorch's default init (uniform in
    +-1/sqrt(fan_in), or the constant `fill`), and whether AdamW's weight decay applies."""

    shape: tuple[int, ...]
    fan_in: int = 0
    fill: float | None = None
    decay: bool = False
    matrix: bool = False  # read by the matmuls: an f16 working copy is kept


class Layer(BaseModel):
    """What every layer has: a `type` (its JSON name), the shape it makes of its input (ShapeError
    naming both otherwise) and the parameters it owns for that input."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str  # each layer's Literal: its name in a JSON file
    takes: ClassVar[tuple[str, ...]] = ("vector", "image")  # the input kinds it accepts

    def where(self, path: str) -> str:
        return f"{path} ({self.type})"

    def check_input(self, path: str, shape: Shape) -> None:
        kind = "image" if len(shape) == 3 else "vector"
        if kind not in self.takes:
            want = "an image [C, H, W]" if self.takes == ("image",) else "a vector [features]"
            raise ShapeError(
                f"{self.where(path)}: takes {want}, got {list(shape)}"
                + (" (put a flatten layer before it)" if kind == "image" else "")
            )

    def out_shape(self, path: str, shape: Shape) -> Shape:
        self.check_input(path, shape)
        return shape

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        return {}


class Linear(Layer):
    """y = x W + b, W [in, out] (PyTorch's nn.Linear weight transposed)."""

    type: Literal["linear"] = "linear"
    out: Width
    bias: bool = True
    takes: ClassVar[tuple[str, ...]] = ("vector",)

    def out_shape(self, path: str, shape: Shape) -> Shape:
        self.check_input(path, shape)
        return (self.out,)

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        fan_in = shape[0]
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

    def out_shape(self, path: str, shape: Shape) -> Shape:
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
    """LayerNorm over a vector's features (PyTorch's nn.LayerNorm(features)): gamma 1, beta 0."""

    type: Literal["layernorm"] = "layernorm"
    eps: Annotated[float, Field(gt=0.0, le=1.0)] = 1e-5
    takes: ClassVar[tuple[str, ...]] = ("vector",)

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        return {"weight": ParamShape(shape=shape, fill=1.0), "bias": ParamShape(shape=shape, fill=0.0)}


class RMSNorm(Layer):
    """RMSNorm over a vector's features (PyTorch's nn.RMSNorm(features)): gamma 1; eps None is
    PyTorch's default, float32's machine epsilon."""

    type: Literal["rmsnorm"] = "rmsnorm"
    eps: Annotated[float | None, Field(gt=0.0, le=1.0)] = None
    takes: ClassVar[tuple[str, ...]] = ("vector",)

    def params(self, shape: Shape) -> dict[str, ParamShape]:
        return {"weight": ParamShape(shape=shape, fill=1.0)}
