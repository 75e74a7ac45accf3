"""webmp: a WebGPU training engine with f16 matmuls, fp32 master weights and dynamic loss scaling."""

__version__ = "0.1.0"
