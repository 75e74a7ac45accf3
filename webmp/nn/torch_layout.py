"""A Network's parameters in webmp's layout and as the state_dict of the equivalent PyTorch model.

The equivalent model is an `nn.Sequential` of the layers in order (Linear, Conv2d, MaxPool2d,
AvgPool2d, Flatten, ReLU, GELU(approximate="tanh"), SiLU, Tanh, Dropout, LayerNorm, RMSNorm), a
residual block this Sequential subclass:

    class Residual(nn.Sequential):
        def forward(self, x):
            return x + super().forward(x)

so torch's names are webmp's without the "layers." segments (webmp `layers.3.layers.0.weight` is
torch's `3.0.weight`). A token network's embedding is a module with parameters `weight` [V, D] and
`positions` [T, D] (x = weight[idx] + positions[:T], as GPT-2's wte and wpe), its attention one
with `qkv = nn.Linear(D, 3D)` (columns q | k | v, head h owning columns h*d .. h*d + d - 1 of
each) and `proj = nn.Linear(D, D)` around scaled_dot_product_attention(is_causal=True); sequence
values [T, D] keep their feature order; a tied head (linear with tied) owns no tensor: the twin's
head shares the embedding's weight (`head.weight = embedding.weight`, as GPT-2's), and the
state_dict holds it under both names, as torch's state_dict() does (so load_state_dict(strict=True)
takes it); a state_dict given with one of the two (safetensors.torch.save_model keeps one of a
shared pair) is read from it, and one with two different tensors refused. The layouts differ in
three ways:
- Linear: webmp's weight is [in, out], torch's [out, in].
- Conv2d: webmp's weight is [kernel*kernel*C, out] with rows in (kh, kw, c) order, torch's
  [out, C, kh, kw].
- Flatten of an image: webmp's images are channels-last, so its features come in (h, w, c) order
  where torch's come in (c, h, w). That permutation follows the vector through the layers that keep
  the feature order (activations, dropout, the norms: their weights are permuted with it) until a
  Linear consumes it: that Linear's input rows are permuted. Inside a residual block over a
  permuted vector, x + f(x) needs f's output in x's order: the block's last Linear (the one that
  reaches the block's end through order-keeping layers) has its output columns (and bias) permuted.

An image input's data come as torch's ([N, C, H, W], or rows in (c, h, w) order); the engine moves
them channels-last on the GPU (webmp.models.net.channels_last). Numpy only: a torch
state_dict is given as arrays (`{k: v.numpy() for k, v in model.state_dict().items()}`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .layers import CausalSelfAttention, Conv2d, Embedding, Flatten, Layer, LayerNorm, Linear, RMSNorm, Shape
from .network import Network, Residual

Perm = np.ndarray | None  # a vector's features: webmp's i-th is torch's perm[i] (None: the same order)


@dataclass(frozen=True)
class Place:
    """One parameter in both layouts: its names, shapes, its layer (path and type), and the two
    conversions (webmp array -> torch array, and back)."""

    name: str
    torch_name: str
    shape: Shape
    torch_shape: Shape
    layer: str
    to_torch: Callable[[np.ndarray], np.ndarray]
    from_torch: Callable[[np.ndarray], np.ndarray]


def flatten_perm(C: int, H: int, W: int) -> np.ndarray:
    """The torch index, in (c, h, w) order, of each of webmp's (h, w, c) features."""
    return np.arange(C * H * W).reshape(C, H, W).transpose(1, 2, 0).reshape(-1)


def _inverse(p: Perm) -> Perm:
    return None if p is None else np.argsort(p)


def _take(a: np.ndarray, axis: int, p: Perm) -> np.ndarray:
    return a if p is None else np.take(a, p, axis=axis)


def _linear(rows: Perm, cols: Perm) -> tuple[Callable, Callable]:
    """webmp W[r, k] = torch T[cols[k], rows[r]]."""
    rows_inv, cols_inv = _inverse(rows), _inverse(cols)

    def to_torch(w: np.ndarray) -> np.ndarray:
        return _take(_take(w, 0, rows_inv), 1, cols_inv).T

    def from_torch(t: np.ndarray) -> np.ndarray:
        return _take(_take(t, 0, cols), 1, rows).T

    return to_torch, from_torch


def _vector(p: Perm) -> tuple[Callable, Callable]:
    """webmp v[i] = torch v[p[i]]."""
    p_inv = _inverse(p)
    return (lambda v: _take(v, 0, p_inv)), (lambda t: _take(t, 0, p))


def _conv(k: int, C: int, out: int) -> tuple[Callable, Callable]:
    """webmp [(kh, kw, c), out] <-> torch [out, c, kh, kw]."""

    def to_torch(w: np.ndarray) -> np.ndarray:
        return w.reshape(k, k, C, out).transpose(3, 2, 0, 1)

    def from_torch(t: np.ndarray) -> np.ndarray:
        return t.transpose(2, 3, 1, 0).reshape(k * k * C, out)

    return to_torch, from_torch


def places(net: Network) -> list[Place]:
    """Every parameter of `net` in trace order, with its torch name, shape and conversions."""
    out: list[Place] = []
    _walk(net.layers, "", "", net.in_shape, None, None, out)
    return out


def _placer(out: list[Place], path: str, tpath: str, where: str) -> Callable[..., None]:
    """put(name, webmp shape, torch shape, conversions): one parameter of the layer at `path`."""

    def put(name: str, shape: Shape, torch_shape: Shape, convert: tuple[Callable, Callable]) -> None:
        out.append(Place(f"{path}.{name}", f"{tpath}.{name}", shape, torch_shape, where, *convert))

    return put


def _walk(
    layers: Sequence[Layer], prefix: str, tprefix: str, shape: Shape, perm: Perm, end: Perm, out: list[Place]
) -> Perm:
    """The places of `layers` taking `shape` whose features come in order `perm`; `end`: the order
    their output must come out in (a residual block's input's). Returns their output's order."""
    last_linear = max((i for i, lay in enumerate(layers) if isinstance(lay, Linear)), default=-1)
    for i, layer in enumerate(layers):
        path, tpath = f"{prefix}layers.{i}", f"{tprefix}{i}"
        after, where = layer.out_shape(path, shape), layer.where(path)
        put = _placer(out, path, tpath, where)
        if isinstance(layer, Embedding):
            for name, p in layer.params(shape).items():
                put(name, p.shape, p.shape, (lambda a: a, lambda a: a))
        elif isinstance(layer, CausalSelfAttention):
            for name, p in layer.params(shape).items():
                convert = _linear(None, None) if len(p.shape) == 2 else _vector(None)
                put(name, p.shape, p.shape[::-1], convert)
        elif isinstance(layer, Linear) and not layer.tied:  # a tied one owns none (the embedding's)
            n_in, n_out = shape[-1], layer.out
            cols = end if i == last_linear else None
            put("weight", (n_in, n_out), (n_out, n_in), _linear(perm, cols))
            if layer.bias:
                put("bias", (n_out,), (n_out,), _vector(cols))
            perm = cols
        elif isinstance(layer, Conv2d):
            C, k = shape[0], layer.kernel
            put("weight", (k * k * C, layer.out), (layer.out, C, k, k), _conv(k, C, layer.out))
            if layer.bias:
                put("bias", (layer.out,), (layer.out,), _vector(None))
        elif isinstance(layer, Flatten) and len(shape) == 3:
            perm = flatten_perm(*shape)
        elif isinstance(layer, (LayerNorm, RMSNorm)):
            for name, p in layer.params(shape).items():
                put(name, p.shape, p.shape, _vector(perm))
        elif isinstance(layer, Residual):
            _walk(layer.layers, f"{path}.", f"{tpath}.", shape, perm, perm, out)
        # the others keep the feature order and own no parameters (pools take images: no order)
        shape = after
    return perm


def torch_shapes(net: Network) -> dict[str, Shape]:
    """The state_dict names and shapes of `net`'s equivalent Sequential."""
    return {p.torch_name: p.torch_shape for p in places(net)}


def _checked(
    tensors: Mapping[str, object], want: dict[str, tuple[Shape, str]], what: str, layout: str
) -> dict[str, np.ndarray]:
    """`tensors` as arrays, each present and of its shape in `want` (name -> shape, layer); a
    missing, extra or misshapen one a ValueError in one line naming it and the shape expected."""
    missing = [n for n in want if n not in tensors]
    if missing:
        listed = ", ".join(f"{n} {list(want[n][0])} ({want[n][1]})" for n in missing)
        raise ValueError(f"{what}: lacks {listed} ({layout} layout)")
    extra = [n for n in tensors if n not in want]
    if extra:
        raise ValueError(
            f"{what}: {', '.join(extra)} is no parameter of this network; its {len(want)} are: "
            + ", ".join(f"{n} {list(s)}" for n, (s, _) in want.items())
        )
    arrays = {}
    for name, (shape, layer) in want.items():
        try:
            a = np.asarray(tensors[name])
        except (TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"{what}: {name} is not an array ({' '.join(str(e).split())})") from None
        if a.shape != shape:
            raise ValueError(
                f"{what}: {name} has shape {list(a.shape)}; {layer} expects {list(shape)} ({layout} layout)"
            )
        arrays[name] = a
    return arrays


def tied_names(net: Network) -> tuple[str, str] | None:
    """(the tied head's weight, the embedding's weight) in the twin's state_dict; None: no tied head."""
    if not net.tied_head:
        return None
    return f"{len(net.layers) - 1}.weight", "0.weight"


def to_torch(
    net: Network, weights: Mapping[str, object], what: str = "webmp weights"
) -> dict[str, np.ndarray]:
    """The state_dict (torch names and layouts) of `net`'s parameters `weights` (webmp's names and
    layouts); ValueError naming a missing, extra or misshapen tensor and its shape in webmp's layout."""
    ps = places(net)
    arrays = _checked(weights, {p.name: (p.shape, p.layer) for p in ps}, what, "webmp's")
    out = {p.torch_name: np.ascontiguousarray(p.to_torch(arrays[p.name])) for p in ps}
    tied = tied_names(net)
    if tied:
        head, embedding = tied
        out[head] = out[embedding].copy()
    return out


def from_torch(
    net: Network, state_dict: Mapping[str, object], what: str = "torch state_dict"
) -> dict[str, np.ndarray]:
    """webmp's parameters (names and layouts) of the state_dict of `net`'s equivalent Sequential;
    ValueError naming a missing, extra or misshapen tensor and its shape in torch's layout."""
    ps = places(net)
    tied = tied_names(net)
    if tied:
        state_dict = _untied(dict(state_dict), *tied, what)
    arrays = _checked(state_dict, {p.torch_name: (p.torch_shape, p.layer) for p in ps}, what, "torch's")
    return {p.name: np.ascontiguousarray(p.from_torch(arrays[p.torch_name])) for p in ps}


def _untied(state_dict: dict[str, object], head: str, embedding: str, what: str) -> dict[str, object]:
    """`state_dict` with the embedding's weight under its own name only: taken from the tied head's
    name when only that one is there; with both, they must be the same tensor."""
    if head not in state_dict:
        return state_dict
    tensor = state_dict.pop(head)
    if embedding not in state_dict:
        state_dict[embedding] = tensor
    elif not np.array_equal(np.asarray(tensor), np.asarray(state_dict[embedding])):
        raise ValueError(
            f"{what}: {head} (the tied head's weight) differs from {embedding} (the embedding's); a tied "
            "head shares the embedding's weight"
        )
    return state_dict


def looks_like_torch(names: Sequence[str]) -> bool:
    """Whether tensor names are a torch Sequential's (each starts with a layer index, as `3.0.weight`)
    rather than webmp's (each starts with `layers.`)."""
    return bool(names) and all(n.split(".", 1)[0].isdigit() for n in names)
