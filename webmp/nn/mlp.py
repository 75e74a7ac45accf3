"""The built-in MLPs (models 'mlp' and 'mlp-ln') as networks of layers: per hidden width a linear
layer, its LayerNorm (mlp-ln) and the activation, then a linear layer over the classes, with
PyTorch's default initialisation (the model's init_gain scales it: webmp/models/mlp.py).

The models' plan (webmp/models/mlp.py) is this network's, its parameters under the MLP's names
(mlp_names: W0, b0, ln_g0, ..., as its checkpoints have them).
"""

from __future__ import annotations

from collections.abc import Sequence

from .layers import GELU, LayerNorm, Linear, ReLU
from .network import Network

ACTIVATIONS = {"gelu": GELU, "relu": ReLU}  # TrainConfig.act's choices


def mlp_network(features: int, hidden: Sequence[int], classes: int, act: str, layernorm: bool) -> Network:
    """The MLP (mlp, or mlp-ln with `layernorm`) of these widths as a network. Built as a preset,
    without the limits a network file has (MAX_LAYERS, MAX_PARAMS), as gpt_network is: a config far
    too large for a device is still sized (webmp.models.plan_buffers) to be refused by its memory.
    Trained as model net from the same weights, it gives the MLP's curve bit for bit."""
    layers: list = []
    for width in hidden:
        layers += [Linear(out=width), *([LayerNorm()] if layernorm else []), ACTIVATIONS[act]()]
    layers.append(Linear(out=classes))
    return Network.model_construct(input=[features], layers=layers, loss="softmax_xent", init="torch")


def mlp_names(n_hidden: int, layernorm: bool) -> dict[str, str]:
    """{the network's parameter path: the MLP's name}, in trace order (the MLP's parameter order):
    hidden layer l's linear layers.{k}.weight W{l} and .bias b{l} (k = l * (3 if layernorm else 2)),
    its LayerNorm's layers.{k + 1}.weight ln_g{l} and .bias ln_b{l}; the last layer's W{n_hidden},
    b{n_hidden}."""
    per = 3 if layernorm else 2
    names: dict[str, str] = {}
    for l in range(n_hidden + 1):
        k = l * per
        names |= {f"layers.{k}.weight": f"W{l}", f"layers.{k}.bias": f"b{l}"}
        if layernorm and l < n_hidden:
            names |= {f"layers.{k + 1}.weight": f"ln_g{l}", f"layers.{k + 1}.bias": f"ln_b{l}"}
    return names
