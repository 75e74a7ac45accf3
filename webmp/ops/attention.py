"""Causal self-attention's launchers (shaders/attention/): its six batched products, run by the matmul
variants with batch layouts, and the two row softmaxes."""

from __future__ import annotations

import struct

from ..engine.plan import PlanBuilder, h_bytes
from ..engine.tiles import DEFAULT_TILES, Tiles
from .common import MAX_WORKGROUPS_PER_DIM, cdiv
from .matmuls import H_OUT_VARIANTS, Layout, matmul
from .rows import ROWS_PER_WG, row_entry

# Causal self-attention of a GPT layer: for batch b < B and head h < H (head size d, D = H * d),
#   S = Q K^T,  P = softmax_causal(S / sqrt(d)),  O = P V;
#   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)) / sqrt(d),  dQ = dS K,  dK = dS^T Q.
# Every product is one dispatch of a matmul variant for all Z = B * H batch-heads (workgroup
# z = b * H + h, matmul_operands.wgsl's batch constants; attention_matmul); each softmax is one
# dispatch of a workgroup per row (grid [T, Z]: attn_softmax_fwd, attn_softmax_bwd) or, rows="thread",
# a thread per row (grid [ceil(T / 64), Z], the same bits). Order in a layer: forward
# scores, attn_softmax_fwd, values; backward dv, dp, attn_softmax_bwd, dq, dk. Buffers (h: the
# activation format, two values a word, rows padded to whole words):
#   qkv, dqkv  h [B*T, 3D]  rows b*T + t; columns [q | k | v], head h owning h*d .. h*d + d - 1 of
#                           each third (dqkv: dQ, dK, dV in the same places)
#   O, dO      h [B*T, D]   the same head columns
#   S, dP      f32 [Z*T, T] row z*T + i: query i of batch-head z; all T columns are computed
#                           (j > i is masked later, never used)
#   P, dS      h [Z*T, T]   the same rows, masked entries 0
# The head size d must be even, so that every head starts on a whole word (ValueError otherwise).
# Memory per layer (f16 paths, Z*T*T values): S 4 bytes each, transient (its buffer can be reused for
# dP in the backward pass); P 2 bytes each, kept for the backward pass; dS 2 bytes each.


def attention_scale(d: int) -> float:
    """The softmax's SCALE: 1/sqrt(d) rounded to the nearest f32 (the value the kernel holds)."""
    return struct.unpack("f", struct.pack("f", d**-0.5))[0]


def _attention_check(B: int, T: int, H: int, d: int) -> None:
    if d % 2:
        raise ValueError(
            f"attention needs an even head size d (got {d}): head h starts at column h*d of rows of "
            "packed f16 pairs, and the batched matmuls load and store whole words"
        )
    if min(B, T, H, d) < 1 or T > MAX_WORKGROUPS_PER_DIM or B * H > MAX_WORKGROUPS_PER_DIM:
        raise ValueError(f"attention shape B={B} T={T} H={H} d={d} out of range")


# product: (matmul variant, (A's buffer argument, layout), B's, C's, trans_a, trans_b). Layouts:
# "q", "k", "v": that third's head columns of qkv or dqkv; "o": the head columns of O or dO;
# "rows": batch-head z's [T, T] block of S, P, dP or dS. With C in "rows" the product is [T, T]
# with K = d (f32 out: matmul_wgrad), otherwise [T, d] with K = T (h out: matmul_plain).
ATTENTION_PRODUCTS: dict[str, tuple[str, tuple[str, str], tuple[str, str], tuple[str, str], int, int]] = {
    "scores": ("matmul_wgrad", ("qkv", "q"), ("qkv", "k"), ("S", "rows"), 0, 1),  # S = Q K^T
    "values": ("matmul_plain", ("P", "rows"), ("qkv", "v"), ("O", "o"), 0, 0),  # O = P V
    "dv": ("matmul_plain", ("P", "rows"), ("dO", "o"), ("dqkv", "v"), 1, 0),  # dV = P^T dO
    "dp": ("matmul_wgrad", ("dO", "o"), ("qkv", "v"), ("dP", "rows"), 0, 1),  # dP = dO V^T
    "dq": ("matmul_plain", ("dS", "rows"), ("qkv", "k"), ("dqkv", "q"), 0, 0),  # dQ = dS K
    "dk": ("matmul_plain", ("dS", "rows"), ("qkv", "q"), ("dqkv", "k"), 1, 0),  # dK = dS^T Q
}
HEAD_PARTS = {"q": 0, "k": 1, "v": 2}  # thirds of qkv / dqkv


def _attention_layout(kind: str, h: bool, T: int, H: int, d: int) -> Layout:
    """Batch-head z = b * H + h's block, in elements (see ATTENTION_PRODUCTS for the kinds)."""
    if kind == "rows":  # [Z*T, T]; h rows are padded to whole words
        per = T * (T + (T & 1) if h else T)
        return Layout(off=0, sb=H * per, sh=per, ld=0)
    parts, part = (1, 0) if kind == "o" else (3, HEAD_PARTS[kind])
    ld = parts * H * d
    return Layout(off=part * H * d, sb=T * ld, sh=d, ld=ld)


def attention_shape(variant: str, T: int, d: int) -> tuple[int, int, int, int, int]:
    """(M, N, K, trans_a, trans_b) of one batch-head's product: what picks its tiles."""
    _, _, _, c, trans_a, trans_b = ATTENTION_PRODUCTS[variant]
    N, K = (T, d) if c[1] == "rows" else (d, T)
    return T, N, K, trans_a, trans_b


def attention_matmul(
    pb: PlanBuilder,
    program: str,
    variant: str,
    *,
    B: int,
    T: int,
    H: int,
    d: int,
    qkv: str | None = None,
    P: str | None = None,
    dO: str | None = None,
    dS: str | None = None,
    S: str | None = None,
    O: str | None = None,
    dP: str | None = None,
    dqkv: str | None = None,
    flags: str = "flags",
    tiles: Tiles = DEFAULT_TILES,
) -> None:
    """One attention product (`variant`, a key of ATTENTION_PRODUCTS) for all B * H batch-heads in
    one dispatch; pass exactly the buffers it reads and writes, e.g.
        attention_matmul(pb, prog, "scores", qkv="qkv", S="S", B=B, T=T, H=H, d=d)
    S and dP are f32 (dP feeds the softmax backward's f32 reduction and, under loss scaling, may
    exceed the f16 range); O and dqkv's thirds are stored h with the overflow flag."""
    if variant not in ATTENTION_PRODUCTS:
        raise ValueError(f"unknown attention product {variant!r}; one of {list(ATTENTION_PRODUCTS)}")
    _attention_check(B, T, H, d)
    mm_variant, a, b, c, trans_a, trans_b = ATTENTION_PRODUCTS[variant]
    given = {"qkv": qkv, "P": P, "dO": dO, "dS": dS, "S": S, "O": O, "dP": dP, "dqkv": dqkv}
    used = {a[0], b[0], c[0]}
    if any(given[n] is None for n in used) or any(given[n] is not None for n in set(given) - used):
        raise ValueError(f"attention product {variant!r} takes the buffers {sorted(used)}")
    c_h = mm_variant in H_OUT_VARIANTS
    _, N, K, _, _ = attention_shape(variant, T, d)
    matmul(
        pb,
        program,
        mm_variant,
        A=str(given[a[0]]),
        B=str(given[b[0]]),
        C=str(given[c[0]]),
        M=T,
        N=N,
        K=K,
        trans_a=trans_a,
        trans_b=trans_b,
        flags=flags,
        tiles=tiles,
        batch=B * H,
        z_inner=H,
        a_layout=_attention_layout(a[1], True, T, H, d),
        b_layout=_attention_layout(b[1], True, T, H, d),
        c_layout=_attention_layout(c[1], c_h, T, H, d),
    )


def _attn_softmax(
    pb: PlanBuilder, program: str, entry: str, binds: dict, B: int, T: int, H: int, d: int, rows: str
) -> None:
    _attention_check(B, T, H, d)
    sources = ["reduce.wgsl", "attn_softmax.wgsl", f"{entry}.wgsl"]
    wgs = [T, B * H] if rows == "workgroup" else [cdiv(T, ROWS_PER_WG), B * H]
    consts = {"T": T, "SCALE": attention_scale(d)}
    pb.dispatch(program, sources, row_entry(entry, rows), consts, binds, wgs)


def attn_softmax_fwd(
    pb: PlanBuilder,
    program: str,
    *,
    S: str,
    P: str,
    B: int,
    T: int,
    H: int,
    d: int,
    flags: str = "flags",
    rows: str = "workgroup",
) -> None:
    """P = causal softmax(S / sqrt(d)) row-wise in f32, stored h (masked entries 0, overflow
    flagged); rows "workgroup": a workgroup a row (grid [T, B * H]), "thread": a thread a row
    (grid [ceil(T / 64), B * H]), bit-identical."""
    _attn_softmax(pb, program, "attn_softmax_fwd", {"S": S, "P": P, "flags": flags}, B, T, H, d, rows)


def attn_softmax_bwd(
    pb: PlanBuilder,
    program: str,
    *,
    P: str,
    dP: str,
    dS: str,
    B: int,
    T: int,
    H: int,
    d: int,
    flags: str = "flags",
    rows: str = "workgroup",
) -> None:
    """dS = P * (dP - rowsum(dP * P)) / sqrt(d) in f32 (masked entries 0), stored h (overflow
    flagged); rows as attn_softmax_fwd's."""
    binds = {"P": P, "dP": dP, "dS": dS, "flags": flags}
    _attn_softmax(pb, program, "attn_softmax_bwd", binds, B, T, H, d, rows)


# --- one query row per head (text generation's one-position program) -------------------------------
# The newest token's query against the T rows of a cache (the window's qkv buffer [T, 3D], a
# position's k and v written once, webmp/models/net_sample.py), for all H heads in one dispatch:
#   scores  S1 f32 [H, T] = q K^T   (matmul_wgrad; q: the third of qkv1 [1, 3D], K: the cache's)
#   values  O1 h [1, D]   = P1 V    (matmul_plain; P1 h [H, T], V: the cache's third)
# Each element is the same sum in the same order (the matmul cores' k order) as the window
# product's element of that query row, so equal operands give equal bits; the softmax between
# them is attn_softmax_row (its query i = min(n, T) - 1 read from seq_len on the GPU).
# variant: (matmul variant, trans_b, the cache's third it reads: k or v)
ROW_PRODUCTS = {
    "scores": ("matmul_wgrad", 1, HEAD_PARTS["k"]),
    "values": ("matmul_plain", 0, HEAD_PARTS["v"]),
}


def attention_row_matmul(
    pb: PlanBuilder,
    program: str,
    variant: str,
    *,
    T: int,
    H: int,
    d: int,
    cache: str,
    qkv: str | None = None,
    S: str | None = None,
    P: str | None = None,
    O: str | None = None,
    flags: str = "flags",
    tiles: Tiles = DEFAULT_TILES,
) -> None:
    """One product of a query row per head against the cache (above): "scores" takes qkv (the row)
    and S, "values" P and O."""
    if variant not in ROW_PRODUCTS:
        raise ValueError(f"unknown row product {variant!r}; one of {list(ROW_PRODUCTS)}")
    _attention_check(1, T, H, d)
    mm_variant, trans_b, part = ROW_PRODUCTS[variant]
    D = H * d
    cache_layout = Layout(off=part * D, sb=T * 3 * D, sh=d, ld=3 * D)
    if variant == "scores":
        if qkv is None or S is None or P is not None or O is not None:
            raise ValueError("the row product 'scores' takes qkv and S")
        A, C, N, K = qkv, S, T, d
        a_layout, c_layout = Layout(off=0, sb=3 * D, sh=d, ld=3 * D), Layout(off=0, sb=H * T, sh=T, ld=0)
    else:
        if P is None or O is None or qkv is not None or S is not None:
            raise ValueError("the row product 'values' takes P and O")
        per = T + (T & 1)  # P1's rows, padded to whole words
        A, C, N, K = P, O, d, T
        a_layout, c_layout = Layout(off=0, sb=H * per, sh=per, ld=0), Layout(off=0, sb=D, sh=d, ld=D)
    matmul(
        pb, program, mm_variant, A=A, B=cache, C=C, M=1, N=N, K=K, trans_b=trans_b, flags=flags,
        tiles=tiles, batch=H, z_inner=H, a_layout=a_layout, b_layout=cache_layout, c_layout=c_layout,
    )  # fmt: skip


def attn_softmax_row(
    pb: PlanBuilder,
    program: str,
    *,
    S: str,
    P: str,
    seq_len: str,
    T: int,
    H: int,
    d: int,
    flags: str = "flags",
) -> None:
    """P [H, T] (h) = the causal softmax of S [H, T] (f32) for query i = min(n, T) - 1, n = seq_len[0]:
    row h as attn_softmax_fwd computes query i of head h in a window (masked entries 0); a
    workgroup a head."""
    _attention_check(1, T, H, d)
    sources = ["reduce.wgsl", "attn_softmax.wgsl", "attn_softmax_fwd.wgsl", "attn_softmax_row.wgsl"]
    binds = {"S": S, "P": P, "flags": flags, "seq_len": seq_len}
    pb.dispatch(program, sources, "attn_softmax_row", {"T": T, "SCALE": attention_scale(d)}, binds, [H])


def attention_row(
    pb: PlanBuilder,
    program: str,
    *,
    qkv: str,
    cache: str,
    S: str,
    P: str,
    O: str,
    seq_len: str,
    T: int,
    H: int,
    d: int,
    flags: str = "flags",
) -> None:
    """The newest row's attention in one dispatch, a workgroup a head (attn_row.wgsl): qkv [1, 3D]
    (h) put into row min(n, T) - 1 of cache [T, 3D] (sample_row_put), its scores S [H, T] (f32,
    the visible keys), P [H, T] (h) and O [1, D] (h): the bits of sample_row_put, the row products
    and attn_softmax_row one after the other."""
    _attention_check(1, T, H, d)
    D = H * d
    pb.require_bytes("attn_row", qkv, h_bytes(1, 3 * D, pb.path), f"an h matrix [1, {3 * D}]")
    pb.require_bytes("attn_row", cache, h_bytes(T, 3 * D, pb.path), f"an h matrix [{T}, {3 * D}]")
    sources = [
        "reduce.wgsl", "attn_softmax.wgsl", "attn_softmax_fwd.wgsl", "attn_softmax_row.wgsl", "attn_row.wgsl"
    ]  # fmt: skip
    binds = {"S": S, "P": P, "flags": flags, "seq_len": seq_len, "qkv": qkv, "cache": cache, "O": O}
    consts = {"T": T, "SCALE": attention_scale(d), "HEADS": H, "HEAD": d}
    pb.dispatch(program, sources, "attn_row", consts, binds, [H])
