"""One launcher per kernel family: its shader files, entry point, override constants, bindings and
workgroup counts, in one place.

A launcher adds one dispatch to a program of a `PlanBuilder`. Its buffer arguments are named like
the kernel's WGSL bindings (and take buffer names) — except attention_matmul's, named by their role
in attention (qkv, P, S, ...) because one buffer may be bound twice (qkv as A and B); its other
arguments are the sizes and constants the kernel needs. Models (webmp/models/), `webmp.testing.probe` and
the tests all dispatch through these functions, so a grid or a constant is computed in one place
only.
"""

from __future__ import annotations

import math
import struct
from typing import Any, NamedTuple

import numpy as np

from .engine.plan import MatmulShape, PlanBuilder, h_bytes
from .engine.tiles import DEFAULT_TILES, Tiles

MAX_WORKGROUPS = 4096  # for grid-stride kernels
GRAD_STATS_WG = 256  # grad_stats.wgsl's workgroup size
GRAD_STATS_MAX_WG = 16
ACT_CODES = {"none": 0, "relu": 1, "gelu": 2}  # common.wgsl's ACT_*


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def grid(n: int, per: int = 64) -> list[int]:
    """Workgroups for a grid-stride loop over n items, `per` a workgroup, capped at MAX_WORKGROUPS."""
    return [min(MAX_WORKGROUPS, max(1, cdiv(n, per)))]


# --- matmuls ---------------------------------------------------------------------------------------

MATMUL_VARIANTS = ("matmul_fwd", "matmul_logits", "matmul_wgrad", "matmul_dgrad", "matmul_plain")
H_OUT_VARIANTS = ("matmul_fwd", "matmul_dgrad", "matmul_plain")  # C in the activation format
MAX_WORKGROUPS_PER_DIM = 65535  # WebGPU's default maxComputeWorkgroupsPerDimension


class Layout(NamedTuple):
    """Where each batch of a batched matmul operand lives in its buffer, in elements
    (matmul_operands.wgsl's X_OFF, X_SB, X_SH, X_LD): batch z = b * z_inner + h starts at
    off + b * sb + h * sh, and its rows are ld apart (0: the natural stride, the column count
    rounded up to whole words, or N for an f32 C). For h matrices (two values a word) every field
    must be even."""

    off: int = 0
    sb: int = 0
    sh: int = 0
    ld: int = 0


# The matmul cores (tiles["core"], default "tiled"): their file and the tile-shape constants they take.
MATMUL_CORES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "tiled": (("matmul.wgsl",), ("WG_X", "WG_Y", "TM", "TN", "BK")),  # workgroup-memory tiles
    "reg": (("matmul_reg.wgsl", "matmul_reg_a.wgsl"), ("WG_X", "WG_Y", "TM", "TN")),  # no barriers
    # register blocks, op(A) loaded once per subgroup (the `subgroups` feature)
    "reg_sg": (("matmul_reg.wgsl", "matmul_reg_a_sg.wgsl"), ("WG_X", "WG_Y", "TM", "TN")),
}


def matmul_sources(
    variant: str, core: str = "tiled", c_quads: bool = False, b_quads: bool = False
) -> list[str]:
    """The shader files of a matmul variant after the prelude and common.wgsl: the operands, B's
    view for B_PAIRS loads (four words a load with b_quads: see `b_quads`), the core, the shared
    output stores (f16 for the variants that store h, else f32; with c_quads one store per 4-column
    group: see `c_quads`), the variant's own file."""
    if variant in H_OUT_VARIANTS:
        out = ["matmul_h_out.wgsl", "matmul_h_store4.wgsl" if c_quads else "matmul_h_store.wgsl"]
    else:
        out = ["matmul_f32_out4.wgsl" if c_quads else "matmul_f32_out.wgsl"]
    b2 = "matmul_b_quads.wgsl" if b_quads else "matmul_b_pairs.wgsl"
    return ["matmul_operands.wgsl", b2, *MATMUL_CORES[core][0], *out, f"{variant}.wgsl"]


def c_quads(N: int, c_layout: Layout | None) -> bool:
    """Whether every 4-column group of C (N columns, placed by c_layout) is one aligned 4-value
    element of its buffer: N, the offsets and the row stride all multiples of 4. Then the matmul
    stores a group at once (matmul_f32_out4.wgsl, matmul_h_store4.wgsl: the same values in the same
    places)."""
    return N % 4 == 0 and all(v % 4 == 0 for v in (c_layout or Layout()))


def core_constants(tiles: Tiles) -> tuple[str, dict[str, int]]:
    """The core a tile choice names and the constants it takes (ValueError for an unknown core or
    a missing constant)."""
    core = str(tiles.get("core", "tiled"))
    if core not in MATMUL_CORES:
        raise ValueError(f"unknown matmul core {core!r}; one of {tuple(MATMUL_CORES)}")
    names = MATMUL_CORES[core][1]
    missing = [n for n in names if n not in tiles]
    if missing:
        raise ValueError(f"matmul core {core!r} needs the tile constants {missing} (got {dict(tiles)})")
    rows = (4, 8) if core == "tiled" else (4, 8, 16)  # the cores' register arrays (TM_MAX)
    if tiles["TM"] not in rows or tiles["TN"] not in (4, 8):
        raise ValueError(f"matmul core {core!r} takes TM in {rows} and TN in (4, 8) (got {dict(tiles)})")
    return core, {n: int(tiles[n]) for n in names}


def b_row_words(N: int, b_layout: Layout | None) -> int:
    """Words between the rows of a non-transposed B [K, N] (its X_LD, or whole words)."""
    lay = b_layout or Layout()
    return lay.ld // 2 if lay.ld else (N + 1) // 2


def b_pairs(tiles: Tiles, trans_b: int, N: int, b_layout: Layout | None) -> int:
    """The B_PAIRS constant of a product (matmul_reg.wgsl): 1 where the tiles ask for it (a register
    core's "B_PAIRS": 1) and every pair of op(B)'s words it reads starts on an even word: B not
    transposed, its rows an even count of words apart, every batch starting on an even word. Else 0,
    the single-word loads (the same values)."""
    if not tiles.get("B_PAIRS") or tiles.get("core", "tiled") == "tiled" or trans_b:
        return 0
    lay = b_layout or Layout()
    return int(b_row_words(N, lay) % 2 == 0 and all(v % 4 == 0 for v in (lay.off, lay.sb, lay.sh)))


def b_quads(tiles: Tiles, N: int, b_layout: Layout | None, path: str, b_bytes: int | None) -> bool:
    """Whether a product that reads B in pairs (b_pairs) reads it four words a load instead
    (matmul_b_quads.wgsl): the blocks 8 columns wide, an f16 path (a word is 4 bytes), the rows and
    batches starting on whole quads of words, and B's buffer whole quads: b_bytes a multiple of 16,
    or unknown (None: webmp.testing.probe's probe) with B laid out naturally (its rows, whole quads each,
    are the whole buffer)."""
    lay = b_layout or Layout()
    return (
        tiles["TN"] == 8
        and path != "fp32"
        and b_row_words(N, lay) % 4 == 0
        and all(v % 8 == 0 for v in (lay.off, lay.sb, lay.sh))
        and (b_bytes % 16 == 0 if b_bytes is not None else lay == Layout())
    )


def matmul(
    pb: PlanBuilder,
    program: str,
    variant: str,
    *,
    A: str,
    B: str,
    C: str,
    M: int,
    N: int,
    K: int,
    a_act: int = 0,
    trans_a: int = 0,
    trans_b: int = 0,
    bias: str | None = None,
    Zprev: str | None = None,
    out_act: int = 0,
    flags: str = "flags",
    tiles: Tiles = DEFAULT_TILES,
    batch: int = 1,
    z_inner: int = 1,
    a_layout: Layout | None = None,
    b_layout: Layout | None = None,
    c_layout: Layout | None = None,
) -> None:
    """C = act_in(op(A)) op(B) (+ bias, or times act'(Zprev)): one tiled dispatch with tile shape
    `tiles` (WG_X, WG_Y, TM, TN, BK). A is [M, K] ([K, M] with trans_a), B [K, N] ([N, K]).

    Batched: `batch` products in one dispatch (workgroup z = b * z_inner + h), each operand placed in
    its buffer by its Layout (default: the whole buffer, natural strides). Without these arguments
    the constants are exactly the unbatched kernel's."""
    if variant not in MATMUL_VARIANTS:
        raise ValueError(f"unknown matmul variant {variant!r}; one of {MATMUL_VARIANTS}")
    core, shape = core_constants(tiles)
    consts: dict[str, Any] = {"TRANS_A": trans_a, "TRANS_B": trans_b, "A_ACT": a_act}
    consts.update(shape)
    quads = False
    if b_pairs(tiles, trans_b, N, b_layout):
        consts["B_PAIRS"] = 1
        quads = b_quads(tiles, N, b_layout, pb.path, pb.buffers[B]["bytes"] if B in pb.buffers else None)
    if not 1 <= batch <= MAX_WORKGROUPS_PER_DIM or z_inner < 1:
        raise ValueError(
            f"batch {batch} (z_inner {z_inner}): 1 .. {MAX_WORKGROUPS_PER_DIM} products a dispatch"
        )
    # the sizes and layouts: override constants, or with RUNTIME_DIMS the args uniform's words
    sizes: dict[str, int] = {"SIZE_M": M, "SIZE_N": N, "SIZE_K": K}
    if z_inner != 1:
        sizes["Z_INNER"] = z_inner
    c_is_h = variant in H_OUT_VARIANTS
    for X, lay, is_h in (("A", a_layout, True), ("B", b_layout, True), ("C", c_layout, c_is_h)):
        if lay is None:
            continue
        if is_h and any(v % 2 for v in lay):
            raise ValueError(
                f"{variant}: operand {X}'s layout {lay} has an odd element offset or stride; h "
                "matrices hold two values a word and batched operands must start on whole words"
            )
        if X == "C" and is_h and lay.ld and N % 2:
            raise ValueError(
                f"{variant}: an h C with an odd N ({N}) and an explicit row stride would "
                "write the padding half of its last word, another operand's column"
            )
        sizes.update({f"{X}_OFF": lay.off, f"{X}_SB": lay.sb, f"{X}_SH": lay.sh, f"{X}_LD": lay.ld})
    if tiles.get("RUNTIME_DIMS"):
        consts["RUNTIME_DIMS"] = 1
    else:
        consts.update(sizes)
    product: MatmulShape = {"M": M, "N": N, "K": K, "trans_a": trans_a, "trans_b": trans_b, "batch": batch}
    if product not in pb.matmuls:
        pb.matmuls.append(product)
    args = matmul_args(pb, M, N, K, z_inner, a_layout, b_layout, c_layout)
    binds = {"A": A, "B": B, "B2": B, "C": C, "args": args}  # B2: B's pair view (B_PAIRS)
    if variant in ("matmul_fwd", "matmul_logits"):
        binds["bias"] = _given(bias, "bias", variant)
    if variant == "matmul_dgrad":
        binds["Zprev"] = _given(Zprev, "Zprev", variant)
        consts["OUT_ACT"] = out_act
    if c_is_h:
        binds["flags"] = flags
    workgroups = [cdiv(N, tiles["WG_X"] * tiles["TN"]), cdiv(M, tiles["WG_Y"] * tiles["TM"]), batch]
    sources = matmul_sources(variant, core, c_quads(N, c_layout), quads)
    pb.dispatch(program, sources, variant, consts, binds, workgroups)


def matmul_args(
    pb: PlanBuilder,
    M: int,
    N: int,
    K: int,
    z_inner: int,
    a_layout: Layout | None,
    b_layout: Layout | None,
    c_layout: Layout | None,
) -> str:
    """The buffer a matmul binds as its `args` uniform (shaders/matmul_operands.wgsl MatmulArgs:
    M, N, K, Z_INNER, then each operand's offset and strides), shared by the dispatches with the
    same words."""
    words = [M, N, K, z_inner]
    for lay in (a_layout, b_layout, c_layout):
        words += list(lay or Layout())
    name = f"matmul_args_{M}x{N}x{K}"
    if words[3:] != [1] + [0] * 12:
        name += "_" + "_".join(map(str, words[3:]))
    if name not in pb.buffers:
        pb.u32(name, (len(words),), "other", init=words)  # a uniform: 4 vec4<u32> (64 bytes)
    return name


def _given(buffer: str | None, what: str, variant: str) -> str:
    if buffer is None:
        raise ValueError(f"{variant} needs a {what} buffer")
    return buffer


# --- attention -------------------------------------------------------------------------------------
#
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


ROW_FORMS = ("workgroup", "thread")  # the row kernels' forms (TileTable.row_kernels)
ROWS_PER_WG = 64  # the thread form's rows a workgroup (the shaders' WG)


def _row_entry(entry: str, rows: str) -> str:
    """The entry point of a row kernel's form: `entry` (a workgroup a row, reductions with
    workgroup_reduce) or `entry`_thread (a thread a row, the same tree run serially: the same bits)."""
    if rows not in ROW_FORMS:
        raise ValueError(f"rows must be one of {ROW_FORMS}, got {rows!r}")
    return entry if rows == "workgroup" else f"{entry}_thread"


def _attn_softmax(
    pb: PlanBuilder, program: str, entry: str, binds: dict, B: int, T: int, H: int, d: int, rows: str
) -> None:
    _attention_check(B, T, H, d)
    sources = ["reduce.wgsl", "attn_softmax.wgsl", f"{entry}.wgsl"]
    wgs = [T, B * H] if rows == "workgroup" else [cdiv(T, ROWS_PER_WG), B * H]
    consts = {"T": T, "SCALE": attention_scale(d)}
    pb.dispatch(program, sources, _row_entry(entry, rows), consts, binds, wgs)


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


# --- data ----------------------------------------------------------------------------------------


def gather_train(
    pb: PlanBuilder,
    program: str,
    *,
    xs: str,
    ys: str,
    X: str,
    y: str,
    n_rows: int,
    features: int,
    batch: int,
    seed: int,
    perm_bits: int,
    shard: int = 0,
    state: str = "state",
) -> None:
    """The next batch of the seeded per-epoch permutation (at state.data_pos) into X (h) and y;
    a data-parallel rank's `batch` rows start `shard` rows into the global batch (the constant is
    left out for 0, as before it existed)."""
    consts = {"N_ROWS": n_rows, "F": features, "B": batch, "SEED": seed, "PERM_BITS": perm_bits}
    if shard:
        consts["SHARD"] = shard
    pb.dispatch(
        program,
        ["gather.wgsl"],
        "gather_train",
        consts,
        {"xs": xs, "ys": ys, "state": state, "X": X, "y": y},
        grid(batch * cdiv(features, 2)),
    )


def gather_eval(
    pb: PlanBuilder,
    program: str,
    *,
    xs: str,
    ys: str,
    X: str,
    y: str,
    n_rows: int,
    features: int,
    batch: int,
    offset: int,
    state: str = "state",
) -> None:
    """Rows offset .. offset + batch - 1 in order; rows past the end get the label NO_LABEL."""
    pb.dispatch(
        program,
        ["gather.wgsl"],
        "gather_eval",
        {"N_ROWS": n_rows, "F": features, "B": batch, "OFFSET": offset, "SEED": 0, "PERM_BITS": 1},
        {"xs": xs, "ys": ys, "state": state, "X": X, "y": y},
        grid(batch * cdiv(features, 2)),
    )


# --- loss, reductions, normalisation ---------------------------------------------------------------


def softmax_xent(
    pb: PlanBuilder,
    program: str,
    *,
    logits: str,
    labels: str,
    loss_rows: str,
    dlogits: str,
    B: int,
    C: int,
    counted: int | None = None,
    state: str = "state",
    flags: str = "flags",
) -> None:
    """Per-row loss and dlogits = (softmax - onehot) * scale / counted, fused, in f32; one thread a
    row. Rows labelled NO_LABEL (padding) get loss 0 and a zero gradient; `counted` is the number
    of the other rows (default: all B; the constant is left out then, as before it existed), or,
    for a data-parallel rank's shard, the global batch's rows (more than B: the ranks' summed
    gradients are then the global mean's)."""
    pb.require_bytes("softmax_xent", logits, 4 * B * C, f"[B, C] = [{B}, {C}] f32 logits")
    consts = {"B": B}
    if counted is not None:
        if counted <= 0:
            raise ValueError(f"counted rows {counted} must be positive")
        consts["COUNTED"] = counted
    pb.dispatch(
        program,
        ["softmax_xent.wgsl"],
        "softmax_xent",
        consts,
        {
            "logits": logits,
            "labels": labels,
            "state": state,
            "loss_rows": loss_rows,
            "dlogits": dlogits,
            "flags": flags,
        },
        [cdiv(B, 64)],
    )


def colsum(pb: PlanBuilder, program: str, *, G: str, out: str, M: int, N: int) -> None:
    """out[c] = sum over the M rows of G[:, c] (a bias gradient), in f32."""
    pb.dispatch(
        program,
        ["columns.wgsl", "colsum.wgsl"],
        "colsum",
        {"M": M, "N": N},
        {"G": G, "out": out},
        [cdiv(N, 64)],
    )


def layernorm_fwd(
    pb: PlanBuilder,
    program: str,
    *,
    Z: str,
    gamma: str,
    beta: str,
    Y: str,
    stats: str,
    M: int,
    N: int,
    flags: str = "flags",
    rows: str = "workgroup",
) -> None:
    """Y = LayerNorm(Z) * gamma + beta over rows of N, keeping (mean, rstd) per row; rows
    "workgroup": a workgroup a row, "thread": a thread a row (64 rows a workgroup), bit-identical."""
    pb.dispatch(
        program,
        ["reduce.wgsl", "layernorm_fwd.wgsl"],
        _row_entry("layernorm_fwd", rows),
        {"M": M, "N": N},
        {"Z": Z, "gamma": gamma, "beta": beta, "Y": Y, "stats": stats, "flags": flags},
        _row_grid(M, rows),
    )


def layernorm_wgrad(
    pb: PlanBuilder, program: str, *, dY: str, Z: str, stats: str, dgamma: str, dbeta: str, M: int, N: int
) -> None:
    """dgamma, dbeta: column sums over the M rows; a thread a column."""
    pb.dispatch(
        program,
        ["columns.wgsl", "layernorm_wgrad.wgsl"],
        "layernorm_wgrad",
        {"M": M, "N": N},
        {"dY": dY, "Z": Z, "stats": stats, "dgamma": dgamma, "dbeta": dbeta},
        [cdiv(N, 64)],
    )


def layernorm_bwd(
    pb: PlanBuilder,
    program: str,
    *,
    dY: str,
    Z: str,
    stats: str,
    gamma: str,
    dZ: str,
    M: int,
    N: int,
    flags: str = "flags",
    rows: str = "workgroup",
) -> None:
    """dZ from dY through the LayerNorm; rows as layernorm_fwd's."""
    pb.dispatch(
        program,
        ["reduce.wgsl", "layernorm_bwd.wgsl"],
        _row_entry("layernorm_bwd", rows),
        {"M": M, "N": N},
        {"dY": dY, "Z": Z, "stats": stats, "gamma": gamma, "dZ": dZ, "flags": flags},
        _row_grid(M, rows),
    )


def _row_grid(M: int, rows: str) -> list[int]:
    """Workgroups of a LayerNorm kernel over M rows in its form."""
    n = M if rows == "workgroup" else cdiv(M, ROWS_PER_WG)
    if not 1 <= n <= MAX_WORKGROUPS_PER_DIM:
        raise ValueError(f"{M} rows: {n} workgroups in form {rows!r}, 1 .. {MAX_WORKGROUPS_PER_DIM} allowed")
    return [n]


# --- the overflow check, the loss scaler, the optimizer ---------------------------------------------


def grad_stats_workgroups(n: int) -> int:
    """Workgroups (and so norm partial sums) grad_stats uses for a tensor of n values."""
    return min(GRAD_STATS_MAX_WG, cdiv(n, GRAD_STATS_WG))


def grad_stats(
    pb: PlanBuilder,
    program: str,
    *,
    G: str,
    partials: str,
    N: int,
    BASE: int,
    state: str = "state",
    flags: str = "flags",
) -> None:
    """Overflow bits of G and its unscaled sum of squares into partials[BASE : BASE + workgroups].

    The kernel has no size constants (one pipeline for every tensor): it reads N as G's length,
    so G must hold exactly N values, and BASE from a one-word u32 buffer this launcher adds to
    the plan (grad_stats_base_<BASE>, shared by the dispatches with that BASE)."""
    nwg = grad_stats_workgroups(N)
    base = f"grad_stats_base_{BASE}"
    if base not in pb.buffers:
        pb.u32(base, (1,), "other", [BASE])
    pb.require_bytes("grad_stats", G, 4 * N, f"N = {N} f32 values")
    pb.dispatch(
        program,
        ["reduce.wgsl", "grad_stats.wgsl"],
        "grad_stats",
        {},
        {"G": G, "state": state, "partials": partials, "flags": flags, "base": base},
        [nwg],
    )


# The gradient-range lens (grad_hist.wgsl): floor(log2 |x|) of stored activation gradients in
# buckets of their own from 2^E_MIN to 2^E_MAX (f16 values lie in 2^-24 .. 2^15; fp32 ones anywhere),
# plus zero, below, above and overflow (webmp.engine.plan.HistogramSpec).
GRAD_HIST_E_MIN, GRAD_HIST_E_MAX = -48, 20
GRAD_HIST_WG = 256  # grad_hist.wgsl's workgroup size
GRAD_HIST_MAX_WG = 64
GRAD_HIST_MAX_BUCKETS = 128  # grad_hist.wgsl's MAX_BUCKETS


def grad_hist_buckets(e_min: int = GRAD_HIST_E_MIN, e_max: int = GRAD_HIST_E_MAX) -> int:
    """Counters per matrix: zero, below, one per exponent e_min..e_max, above, overflow."""
    return e_max - e_min + 5


def grad_hist_clear(pb: PlanBuilder, program: str, *, counts: str, N: int) -> None:
    """counts[0 : N] = 0 (u32): the lens program's first dispatch."""
    pb.dispatch(program, ["grad_hist_clear.wgsl"], "grad_hist_clear", {"N": N}, {"counts": counts}, grid(N))


def grad_hist(
    pb: PlanBuilder,
    program: str,
    *,
    X: str,
    counts: str,
    ROWS: int,
    COLS: int,
    BASE: int,
    E_MIN: int = GRAD_HIST_E_MIN,
    E_MAX: int = GRAD_HIST_E_MAX,
) -> None:
    """Adds the log2 histogram of |X| (an h matrix [ROWS, COLS]) to counts[BASE : BASE + buckets]
    (u32, grad_hist_buckets(E_MIN, E_MAX) counters; see grad_hist.wgsl)."""
    if not E_MIN <= E_MAX or grad_hist_buckets(E_MIN, E_MAX) > GRAD_HIST_MAX_BUCKETS:
        raise ValueError(f"grad_hist: exponents {E_MIN}..{E_MAX} need 1..{GRAD_HIST_MAX_BUCKETS - 4} buckets")
    nwg = min(GRAD_HIST_MAX_WG, cdiv(ROWS * ((COLS + 1) // 2), GRAD_HIST_WG))
    pb.dispatch(
        program,
        ["grad_hist.wgsl"],
        "grad_hist",
        {"ROWS": ROWS, "COLS": COLS, "BASE": BASE, "NWG": nwg, "E_MIN": E_MIN, "E_MAX": E_MAX},
        {"X": X, "counts": counts},
        [nwg],
    )


ADAM_LOG_BETA_ZERO = -128.0  # adam_log_beta(0): any x = t * this is below scaler.wgsl's cutoff (-18)


def adam_log_beta(beta: float) -> float:
    """scaler.wgsl's LOG_BETA1 / LOG_BETA2: ln of the f32 beta (the value adamw.wgsl's BETA holds),
    computed in float64 and rounded to f32; ADAM_LOG_BETA_ZERO for beta 0. The kernel's bias
    correction 1 - beta^t is then consistent with the moments it divides."""
    b32 = float(np.float32(beta))
    if not 0.0 <= b32 < 1.0:
        raise ValueError(f"Adam's beta must round to an f32 in [0, 1), got {beta} (f32 {b32})")
    if b32 == 0.0:
        return ADAM_LOG_BETA_ZERO
    return float(np.float32(math.log(b32)))


def scaler_step(
    pb: PlanBuilder,
    program: str,
    constants: dict[str, Any],
    *,
    partials: str,
    loss_rows: str,
    metrics: str,
    state: str = "state",
    flags: str = "flags",
) -> None:
    """The step's verdict, loss scale update, Adam's bias corrections and metrics record (one
    workgroup); `constants` are scaler.wgsl's overrides (NUM_PARTIALS, B, SCALING, GROWTH, ...,
    LOG_BETA1, LOG_BETA2 from adam_log_beta, RING)."""
    pb.dispatch(
        program,
        ["reduce.wgsl", "scaler.wgsl"],
        "scaler_step",
        constants,
        {"state": state, "flags": flags, "partials": partials, "loss_rows": loss_rows, "metrics": metrics},
        [1],
    )


def adamw(
    pb: PlanBuilder,
    program: str,
    *,
    P: str,
    G: str,
    Mo: str,
    V: str,
    N: int,
    WD: float,
    BETA1: float,
    BETA2: float,
    EPS: float,
    state: str = "state",
) -> None:
    """AdamW on N f32 master values (skipped when state.apply is 0). The kernel reads N as P's
    length, so P, G, Mo and V must each hold exactly N values."""
    for buf in (P, G, Mo, V):
        pb.require_bytes("adamw", buf, 4 * N, f"N = {N} f32 values")
    pb.dispatch(
        program,
        ["adamw.wgsl"],
        "adamw",
        {"WD": WD, "BETA1": BETA1, "BETA2": BETA2, "EPS": EPS},
        {"state": state, "P": P, "G": G, "Mo": Mo, "V": V},
        grid(N),
    )


def adamw_copy(
    pb: PlanBuilder,
    program: str,
    *,
    P: str,
    G: str,
    Mo: str,
    V: str,
    Wh: str,
    ROWS: int,
    COLS: int,
    WD: float,
    BETA1: float,
    BETA2: float,
    EPS: float,
    state: str = "state",
) -> None:
    """AdamW on a [ROWS, COLS] weight matrix that also writes its working copy Wh (h format).

    The kernel reads the size as Wh's length (P, G, Mo, V must hold exactly ROWS * COLS values, Wh
    exactly the matrix): an even COLS needs no size constant, so all such matrices share one
    pipeline; an odd COLS (a padding half at the end of each row) is the override COLS."""
    for buf in (P, G, Mo, V):
        pb.require_bytes("adamw_copy", buf, 4 * ROWS * COLS, f"ROWS * COLS = {ROWS * COLS} f32 values")
    pb.require_bytes("adamw_copy", Wh, h_bytes(ROWS, COLS, pb.path), f"an h matrix [{ROWS}, {COLS}]")
    odd_cols = {"COLS": COLS} if COLS % 2 else {}
    pb.dispatch(
        program,
        ["adamw.wgsl", "adamw_copy.wgsl"],
        "adamw_copy",
        {"WD": WD, "BETA1": BETA1, "BETA2": BETA2, "EPS": EPS, **odd_cols},
        {"state": state, "P": P, "G": G, "Mo": Mo, "V": V, "Wh": Wh},
        grid(ROWS * cdiv(COLS, 2)),
    )


# --- evaluation ------------------------------------------------------------------------------------


def eval_reset(
    pb: PlanBuilder, program: str, *, logits: str, labels: str, result: str, B: int, C: int
) -> None:
    """Zero the (correct, counted) counters."""
    pb.dispatch(
        program,
        ["eval.wgsl"],
        "eval_reset",
        {"B": B, "C": C},
        {"logits": logits, "labels": labels, "result": result},
        [1],
    )


def eval_count(
    pb: PlanBuilder, program: str, *, logits: str, labels: str, result: str, B: int, C: int
) -> None:
    """Count the rows whose argmax is the label (rows labelled NO_LABEL are not counted)."""
    pb.dispatch(
        program,
        ["eval.wgsl"],
        "eval_count",
        {"B": B, "C": C},
        {"logits": logits, "labels": labels, "result": result},
        [cdiv(B, 64)],
    )


def eval_loss_chunk(
    pb: PlanBuilder,
    program: str,
    *,
    logits: str,
    labels: str,
    partial: str,
    total: str,
    B: int,
    C: int,
    chunk: int,
    chunks: int,
) -> None:
    """partial[chunk] = the sum of the B rows' cross-entropy losses in f32 (NO_LABEL rows add 0),
    by one workgroup in a fixed order."""
    if not 0 <= chunk < chunks:
        raise ValueError(f"chunk {chunk} not in 0 .. {chunks - 1}")
    pb.dispatch(
        program,
        ["reduce.wgsl", "eval_loss.wgsl"],
        "eval_loss_chunk",
        {"B": B, "C": C, "CHUNK": chunk, "CHUNKS": chunks},
        {"logits": logits, "labels": labels, "partial": partial, "total": total},
        [1],
    )


def eval_loss_total(
    pb: PlanBuilder, program: str, *, logits: str, labels: str, partial: str, total: str, B: int, C: int,
    chunks: int,
) -> None:  # fmt: skip
    """total[0] = partial[0] + ... + partial[chunks - 1], in that order."""
    pb.dispatch(
        program,
        ["reduce.wgsl", "eval_loss.wgsl"],
        "eval_loss_total",
        {"B": B, "C": C, "CHUNKS": chunks},
        {"logits": logits, "labels": labels, "partial": partial, "total": total},
        [1],
    )


# --- inspection ------------------------------------------------------------------------------------


def round_h(pb: PlanBuilder, program: str, *, x: str, out: str, N: int) -> None:
    """out = h_round(x) for N f32 values: the prelude's rounding to the activation format (f16,
    ties to even, via common.wgsl's f16_round on both f16 paths; none in fp32), as matmul
    operands get it with A_ACT. For tests and webmp.testing.probe; no model dispatches it."""
    pb.dispatch(program, ["round_h.wgsl"], "round_h", {"N": N}, {"x": x, "out": out}, grid(N))


# --- token models ----------------------------------------------------------------------------------


def gather_windows(
    pb: PlanBuilder,
    program: str,
    *,
    tokens: str,
    idx: str,
    targets: str,
    n_tokens: int,
    T: int,
    batch: int,
    seed: int,
    perm_bits: int,
    pos_per_window: int,
    shard: int = 0,
    state: str = "state",
) -> None:
    """The next `batch` training windows of T tokens: idx [batch * T] the inputs, targets the next
    tokens. Window b starts at window_starts' position (webmp.data.tables) for window number
    state.data_pos / pos_per_window + b, in the seeded per-epoch order over the n_tokens - T start
    positions (perm_bits = webmp.data.tables.perm_bits(n_tokens - T)). The scaler advances data_pos by
    its B, the number of loss rows: with batch * T loss rows, pass pos_per_window = T. A
    data-parallel rank's `batch` windows start `shard` windows into the global batch."""
    if n_tokens <= T:
        raise ValueError(f"a stream of {n_tokens} tokens has no window of {T} tokens plus a target")
    consts = {
        "N_TOKENS": n_tokens,
        "T": T,
        "B": batch,
        "SEED": seed,
        "PERM_BITS": perm_bits,
        "POS_PER_WINDOW": pos_per_window,
    }
    if shard:
        consts["SHARD"] = shard
    pb.dispatch(
        program,
        ["windows.wgsl"],
        "gather_windows",
        consts,
        {"tokens": tokens, "state": state, "idx": idx, "targets": targets},
        grid(batch * T),
    )


def gather_windows_eval(
    pb: PlanBuilder,
    program: str,
    *,
    tokens: str,
    idx: str,
    targets: str,
    n_tokens: int,
    T: int,
    batch: int,
    offset: int,
    state: str = "state",
) -> None:
    """Windows offset .. offset + batch - 1 of the consecutive, non-overlapping windows (window w
    starts at token w * T); rows without a next token get token 0 and the label NO_LABEL
    (webmp.data.tables.eval_windows counts the windows)."""
    pb.dispatch(
        program,
        ["windows.wgsl"],
        "gather_windows_eval",
        {"N_TOKENS": n_tokens, "T": T, "B": batch, "OFFSET": offset},
        {"tokens": tokens, "state": state, "idx": idx, "targets": targets},
        grid(batch * T),
    )


def embed_fwd(
    pb: PlanBuilder,
    program: str,
    *,
    idx: str,
    wte: str,
    wpe: str,
    X: str,
    R: int,
    T: int,
    D: int,
    flags: str = "flags",
) -> None:
    """X [R, D] (h) = wte[idx] + wpe[row % T], in f32 from the f32 tables; a thread a stored word."""
    pb.dispatch(
        program,
        ["embed.wgsl"],
        "embed_fwd",
        {"R": R, "T": T, "D": D},
        {"idx": idx, "wte": wte, "wpe": wpe, "X": X, "flags": flags},
        grid(R * cdiv(D, 2)),
    )


def token_rows(pb: PlanBuilder, program: str, *, idx: str, spans: str, order: str, R: int, V: int) -> None:
    """Each token's rows in row order (a stable counting sort of idx [R]): order [R] lists them
    token by token, spans [V, 2] gives each token's (start, count); a workgroup a token."""
    pb.dispatch(
        program,
        ["token_rows.wgsl"],
        "token_rows",
        {"R": R, "V": V},
        {"idx": idx, "spans": spans, "order": order},
        [V],
    )


def embed_wgrad(
    pb: PlanBuilder,
    program: str,
    *,
    spans: str,
    order: str,
    dX: str,
    dwte: str,
    dwpe: str,
    R: int,
    T: int,
    V: int,
    D: int,
    accumulate: bool = False,
) -> None:
    """dwte [V, D] and dwpe [T, D] (f32) from dX [R, D] (h), summed in row order (after token_rows
    on the same idx); accumulate=True adds into dwte (a tied head's gradient) instead of writing."""
    if R % T:
        raise ValueError(f"rows {R} are not whole windows of {T}")
    pb.dispatch(
        program,
        ["embed_wgrad.wgsl"],
        "embed_wgrad",
        {"R": R, "T": T, "V": V, "D": D, "ACCUMULATE": int(accumulate)},
        {"spans": spans, "order": order, "dX": dX, "dwte": dwte, "dwpe": dwpe},
        grid((V + T) * cdiv(D, 2)),
    )


def add_h(pb: PlanBuilder, program: str, *, A: str, Y: str, M: int, N: int, flags: str = "flags") -> None:
    """Y += A on [M, N] matrices in the activation format (residual connections, both directions)."""
    words = M * cdiv(N, 2)
    pb.dispatch(
        program, ["add.wgsl"], "add_h", {"WORDS": words}, {"A": A, "Y": Y, "flags": flags}, grid(words)
    )


def transpose_h(pb: PlanBuilder, program: str, *, X: str, Y: str, rows: int, cols: int) -> None:
    """Y = X^T: X an h matrix [rows, cols], Y [cols, rows], the bits moved unchanged (a weight's
    working copy laid out for the products that read it transposed: GPT's backward pass)."""
    pb.require_bytes("transpose_h", X, h_bytes(rows, cols, pb.path), f"an h matrix [{rows}, {cols}]")
    pb.require_bytes("transpose_h", Y, h_bytes(cols, rows, pb.path), f"an h matrix [{cols}, {rows}]")
    blocks = cdiv(rows, 2) * cdiv(cols, 2)
    sizes = {"ROWS": rows, "COLS": cols}
    pb.dispatch(program, ["transpose_h.wgsl"], "transpose_h", sizes, {"X": X, "Y": Y}, grid(blocks))


# --- text generation (webmp sample) ----------------------------------------------------------------

SAMPLE_CUTOFF = 87.0  # sample_next's weights are 0 where (max - logit) / temperature >= this
F32_TINY = 2.0**-126  # the smallest normal f32


def sample_temperature(temperature: float) -> tuple[float, float]:
    """(TEMPERATURE, CUTOFF) of sample_next.wgsl for a temperature >= 0, both rounded to f32.
    A temperature whose f32 is below the smallest normal f32 (as 0 then on GPUs that flush
    subnormals) is 0: the argmax. CUTOFF = 87 * TEMPERATURE, at most f32's largest finite value."""
    if not 0 <= temperature < float("inf"):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    t32 = float(struct.unpack("f", struct.pack("f", min(temperature, 3.0e38)))[0])
    if t32 < F32_TINY:
        return 0.0, 0.0
    cutoff = float(struct.unpack("f", struct.pack("f", min(SAMPLE_CUTOFF * t32, 3.0e38)))[0])
    return t32, cutoff


def sample_window(
    pb: PlanBuilder, program: str, *, seq: str, seq_len: str, idx: str, T: int, capacity: int
) -> None:
    """idx [T] = the last min(n, T) tokens of seq [capacity] (n = seq_len[0]), then token 0."""
    if capacity < 1 or T < 1:
        raise ValueError(f"sample_window: T {T} and capacity {capacity} must be positive")
    pb.dispatch(
        program,
        ["sample_window.wgsl"],
        "sample_window",
        {"T": T, "CAPACITY": capacity},
        {"seq": seq, "seq_len": seq_len, "idx": idx},
        grid(T),
    )


def sample_next(
    pb: PlanBuilder,
    program: str,
    *,
    logits: str,
    seq: str,
    seq_len: str,
    V: int,
    T: int,
    capacity: int,
    temperature: float,
    seed: int,
) -> None:
    """The next token from row min(n, T) - 1 of logits [T, V] (n = seq_len[0]) appended to seq
    [capacity], seq_len incremented: the argmax at temperature 0 (ties to the lowest id), else a
    draw from softmax(logits / temperature) with the counter-based RNG of SEED and the position n
    (sample_next.wgsl); one workgroup."""
    t32, cutoff = sample_temperature(temperature)
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must fit in 32 bits, got {seed}")
    if min(V, T, capacity) < 1:
        raise ValueError(f"sample_next: V {V}, T {T} and capacity {capacity} must be positive")
    pb.dispatch(
        program,
        ["sample_next.wgsl"],
        "sample_next",
        {"V": V, "T": T, "CAPACITY": capacity, "TEMPERATURE": t32, "CUTOFF": cutoff, "SEED": seed},
        {"logits": logits, "seq": seq, "seq_len": seq_len},
        [1],
    )
