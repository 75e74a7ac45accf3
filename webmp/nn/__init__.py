"""Networks users define: layers (webmp.nn.layers) composed into a Network (webmp.nn.network), from
Python or a JSON file; classifiers of images or vectors, and sequence models on text (a token input,
embedding and causal self-attention layers). What each layer is lives here; how it runs on the GPU
is webmp/models/net.py (and net_seq.py for the sequence layers)."""

from __future__ import annotations

from .layers import (
    GELU,
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
    kind_of,
)
from .mlp import mlp_network
from .network import MAX_SPEC_BYTES, Network, Residual, TokenInput, Traced, network_schema

__all__ = [
    "GELU", "MAX_SPEC_BYTES", "AvgPool2d", "CausalSelfAttention", "Conv2d", "Dropout", "Embedding",
    "Flatten", "Layer", "LayerNorm", "Linear", "MaxPool2d", "Network", "ParamShape", "ReLU", "RMSNorm",
    "Residual", "Shape", "ShapeError", "SiLU", "Tanh", "TokenInput", "Tokens", "Traced", "kind_of",
    "mlp_network",
    "network_schema",
]  # fmt: skip
