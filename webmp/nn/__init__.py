"""Networks users define: layers (webmp.nn.layers) composed into a Network (webmp.nn.network), from
Python or a JSON file. What each layer is lives here; how it runs on the GPU is webmp/models/net.py."""

from __future__ import annotations

from .layers import (
    GELU,
    AvgPool2d,
    Conv2d,
    Dropout,
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
)
from .network import MAX_SPEC_BYTES, Network, Residual, Traced, network_schema

__all__ = [
    "GELU", "MAX_SPEC_BYTES", "AvgPool2d", "Conv2d", "Dropout", "Flatten", "Layer", "LayerNorm",
    "Linear", "MaxPool2d", "Network", "ParamShape", "ReLU", "RMSNorm", "Residual", "Shape", "ShapeError",
    "SiLU", "Tanh", "Traced", "network_schema",
]  # fmt: skip
