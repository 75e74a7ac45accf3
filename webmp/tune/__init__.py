"""Choosing matmul tiles and kernel forms per adapter: the cases (no wgpu), the native tuner and the page's
tuning pass.
"""
