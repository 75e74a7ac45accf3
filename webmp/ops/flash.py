"""Fused (flash-style) causal self-attention's launchers (shaders/attention/flash*.wgsl): the
forward with an online softmax, and the backward that recomputes P from the saved row log-sum-exp.

The same attention as webmp/ops/attention.py's three-kernel form (its header comment: Q, K, V are
head h's columns of qkv [B*T, 3D], O and dO [B*T, D], dqkv dQ | dK | dV in qkv's places), but no
[B*H*T, T] buffer: per layer only lse and Dsum, f32 [B*H*T] (row z*T + i, z = b*H + h). Kernels
(a workgroup of 64 threads, a row a thread; tiles of flash_tile(d) rows in workgroup memory):
  flash_fwd      O, lse                        grid [ceil(T / 64), B*H], a query a thread
  flash_bwd_dot  Dsum = rowsum(dO * O)         grid [ceil(T / 64), B*H]
  flash_bwd_dkv  dK, dV (dqkv's k, v thirds)   grid [ceil(T / 64), B*H], a key a thread
  flash_bwd_dq   dQ (dqkv's q third)           grid [ceil(T / 64), B*H], a query a thread
(WGSL has no float atomics: dK, dV and dQ are each summed by the one thread that owns the row.)
Rounding points against the three-kernel form: that form stores P and dS in the activation format
(h) before the products that read them; this one keeps every weight exp((s - m) * SCALE), P and
dS in f32 and rounds only O and dqkv to h (and Dsum reads O as stored, where the three-kernel form
sums P * dP in f32). On the fp32 path both differ by f32 reassociation (and exp's ulps) only.
"""

from __future__ import annotations

from ..engine.plan import PlanBuilder
from .attention import attention_scale
from .common import MAX_WORKGROUPS_PER_DIM, cdiv

FLASH_WG = 64  # flash.wgsl's WG: rows a workgroup
FLASH_MAX_HEAD = 128  # flash.wgsl's DMAX: a row's private vectors
FLASH_TILE_FLOATS = 1024  # per tile array: BC rows of ceil(d / 4) vec4<f32>: tile_x, tile_y 8 KiB
SOURCES = ["flash.wgsl"]


def flash_tile(d: int) -> int:
    """Rows a tile (BC) for head size d: 8 KiB of workgroup memory for the two tiles, at most 64."""
    return max(1, min(64, FLASH_TILE_FLOATS // (4 * -(-d // 4))))


def flash_supported(T: int, H: int, d: int, B: int = 1) -> str | None:
    """Why the fused form cannot run this shape, or None."""
    if d % 2:
        return f"the head size d must be even (got {d})"
    if d > FLASH_MAX_HEAD:
        return f"the head size {d} exceeds the fused kernels' {FLASH_MAX_HEAD} (their rows' private vectors)"
    if min(B, T, H, d) < 1 or cdiv(T, FLASH_WG) > MAX_WORKGROUPS_PER_DIM or B * H > MAX_WORKGROUPS_PER_DIM:
        return f"shape B={B} T={T} H={H} d={d} out of range"
    return None


def _check(B: int, T: int, H: int, d: int) -> None:
    why = flash_supported(T, H, d, B)
    if why:
        raise ValueError(f"fused attention: {why}")


def _dispatch(pb: PlanBuilder, program: str, entry: str, binds: dict, B: int, T: int, H: int, d: int) -> None:
    _check(B, T, H, d)
    consts = {"T": T, "H": H, "DH": d, "BC": flash_tile(d), "SCALE": attention_scale(d)}
    files = [*SOURCES, *([] if entry == "flash_bwd_dot" else ["flash_qkv.wgsl"]), f"{entry}.wgsl"]
    pb.dispatch(program, files, entry, consts, binds, [cdiv(T, FLASH_WG), B * H])


def flash_attention_fwd(
    pb: PlanBuilder,
    program: str,
    *,
    qkv: str,
    O: str,
    lse: str,
    B: int,
    T: int,
    H: int,
    d: int,
    flags: str = "flags",
) -> None:
    """O (h, overflow flagged) = causal softmax(Q K^T / sqrt(d)) V and lse (f32 [B*H*T]: the row's
    log-sum-exp in units of raw scores, m + log(l) / SCALE) from qkv, one dispatch."""
    _dispatch(pb, program, "flash_fwd", {"qkv": qkv, "O": O, "lse": lse, "flags": flags}, B, T, H, d)


def flash_bwd_dot(
    pb: PlanBuilder, program: str, *, O: str, dO: str, Dsum: str, B: int, T: int, H: int, d: int
) -> None:
    """Dsum (f32 [B*H*T]) = rowsum(dO * O) per head, O as stored: the backward's first dispatch."""
    _dispatch(pb, program, "flash_bwd_dot", {"O": O, "dO": dO, "Dsum": Dsum}, B, T, H, d)


def flash_bwd_grads(
    pb: PlanBuilder,
    program: str,
    entry: str,
    *,
    qkv: str,
    dO: str,
    lse: str,
    Dsum: str,
    dqkv: str,
    B: int,
    T: int,
    H: int,
    d: int,
    flags: str = "flags",
) -> None:
    """entry "flash_bwd_dkv": dqkv's k and v thirds; "flash_bwd_dq": its q third (h, overflow
    flagged), P recomputed from lse, with Dsum from flash_bwd_dot."""
    if entry not in ("flash_bwd_dkv", "flash_bwd_dq"):
        raise ValueError(f"unknown fused backward kernel {entry!r}")
    grads = {"qkv": qkv, "dO": dO, "lse": lse, "Dsum": Dsum, "dqkv": dqkv, "flags": flags}
    _dispatch(pb, program, entry, grads, B, T, H, d)


def flash_attention_bwd(
    pb: PlanBuilder,
    program: str,
    *,
    qkv: str,
    O: str,
    dO: str,
    lse: str,
    Dsum: str,
    dqkv: str,
    B: int,
    T: int,
    H: int,
    d: int,
    flags: str = "flags",
) -> None:
    """dqkv (h, overflow flagged) from qkv, the forward's O and lse, and dO: three dispatches
    (flash_bwd_dot into Dsum, f32 [B*H*T]; flash_bwd_dkv; flash_bwd_dq)."""
    flash_bwd_dot(pb, program, O=O, dO=dO, Dsum=Dsum, B=B, T=T, H=H, d=d)
    for entry in ("flash_bwd_dkv", "flash_bwd_dq"):
        flash_bwd_grads(
            pb, program, entry, qkv=qkv, dO=dO, lse=lse, Dsum=Dsum, dqkv=dqkv, B=B, T=T, H=H, d=d, flags=flags
        )
