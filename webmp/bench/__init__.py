"""`webmp bench`: matmul kernels, step overhead, memory, cold start."""
