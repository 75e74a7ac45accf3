"""What every launcher shares: workgroup counts for grid-stride loops and the activation codes."""

from __future__ import annotations

from ..engine.plan import MAX_WORKGROUPS_PER_DIM  # noqa: F401 (the launchers' import)

MAX_WORKGROUPS = 4096  # for grid-stride kernels
ACT_CODES = {"none": 0, "relu": 1, "gelu": 2, "silu": 3, "tanh": 4}  # common.wgsl's ACT_*


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def grid(n: int, per: int = 64) -> list[int]:
    """Workgroups for a grid-stride loop over n items, `per` a workgroup, capped at MAX_WORKGROUPS."""
    return [min(MAX_WORKGROUPS, max(1, cdiv(n, per)))]
