"""What tests (and curious users) use to look at kernels: running one launcher on numpy data, float64
references.
"""
