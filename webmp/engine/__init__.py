"""What runs a plan and what a plan is: its format and builder, the GPU state words, WGSL sources, matmul
tiles, the wgpu-py runtime.
"""
