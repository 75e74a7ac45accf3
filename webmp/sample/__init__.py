"""Text generation from a trained GPT: the sampling job (no wgpu) and its replay through wgpu-py."""
