"""The matmul launcher (shaders/matmuls/): its variants, cores and the operand layouts of batched
products, and the choices (c_quads, b_pairs, b_quads) that pick a variant's shader files and
constants."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..engine.plan import MatmulShape, PlanBuilder
from ..engine.subgroups import SG_CORE, shares_rows
from ..engine.tiles import DEFAULT_TILES, Tiles
from .common import MAX_WORKGROUPS_PER_DIM, cdiv
from .conv import implicit_patches

MATMUL_VARIANTS = ("matmul_fwd", "matmul_logits", "matmul_wgrad", "matmul_dgrad", "matmul_plain")
H_OUT_VARIANTS = ("matmul_fwd", "matmul_dgrad", "matmul_plain")  # C in the activation format


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
    variant: str,
    core: str = "tiled",
    c_quads: bool = False,
    b_quads: bool = False,
    a_act: bool = False,
    a_patches: bool = False,
) -> list[str]:
    """The shader files of a matmul variant after the prelude and common.wgsl: the operands, how A's
    values load (an activation applied: a_act) and where from (an image's implicit patches:
    a_patches), B's view for B_PAIRS loads (four words a load with b_quads: see `b_quads`), the
    core, the shared output stores (f16 for the variants that store h, else f32; with c_quads one
    store per 4-column group: see `c_quads`), the variant's own file. A product without an
    activation or patches compiles none of their code (a register core inlines A's loader once per
    row of its block: in Chromium that dead code was most of a matmul pipeline's compile time)."""
    if variant in H_OUT_VARIANTS:
        out = ["matmul_h_out.wgsl", "matmul_h_store4.wgsl" if c_quads else "matmul_h_store.wgsl"]
    else:
        out = ["matmul_f32_out4.wgsl" if c_quads else "matmul_f32_out.wgsl"]
    b2 = "matmul_b_quads.wgsl" if b_quads else "matmul_b_pairs.wgsl"
    a = ["matmul_a_act.wgsl" if a_act else "matmul_a_raw.wgsl"]
    a.append("matmul_a_patches.wgsl" if a_patches else "matmul_a_dense.wgsl")
    return ["matmul_operands.wgsl", *a, b2, *MATMUL_CORES[core][0], *out, f"{variant}.wgsl"]


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
    a_image: Mapping[str, int] | None = None,
) -> None:
    """C = act_in(op(A)) op(B) (+ bias, or times act'(Zprev)): one tiled dispatch with tile shape
    `tiles` (WG_X, WG_Y, TM, TN, BK). A is [M, K] ([K, M] with trans_a), B [K, N] ([N, K]).

    Batched: `batch` products in one dispatch (workgroup z = b * z_inner + h), each operand placed in
    its buffer by its Layout (default: the whole buffer, natural strides). Without these arguments
    the constants are exactly the unbatched kernel's.

    a_image: A is an image batch read as its patch matrix (a convolution's implicit im2col: the
    geometry B, C, H, W, KH, KW, SH, SW, PH, PW of webmp.ops.conv.implicit_patches), unbatched."""
    if variant not in MATMUL_VARIANTS:
        raise ValueError(f"unknown matmul variant {variant!r}; one of {MATMUL_VARIANTS}")
    core, shape = core_constants(tiles)
    consts: dict[str, Any] = {"TRANS_A": trans_a, "TRANS_B": trans_b}
    if a_act:
        consts["A_ACT"] = a_act  # matmul_a_act.wgsl's override (matmul_sources)
    consts.update(shape)
    if a_image is not None:
        if batch != 1 or a_layout is not None:
            raise ValueError(f"{variant}: an image read as its patches (a_image) is one unbatched operand")
        consts.update(implicit_patches(pb, variant, A, M=M, K=K, trans_a=trans_a, **a_image))
    quads = False
    if b_pairs(tiles, trans_b, N, b_layout):
        consts["B_PAIRS"] = 1
        quads = b_quads(tiles, N, b_layout, pb.path, pb.buffers[B]["bytes"] if B in pb.buffers else None)
    if not 1 <= batch <= MAX_WORKGROUPS_PER_DIM or z_inner < 1:
        raise ValueError(
            f"batch {batch} (z_inner {z_inner}): 1 .. {MAX_WORKGROUPS_PER_DIM} products a dispatch"
        )
    sizes = _sizes(variant, M, N, K, z_inner, a_layout, b_layout, c_layout)
    c_is_h = variant in H_OUT_VARIANTS
    if core == SG_CORE and shares_rows(pb.subgroup_width, shape):
        consts["SG_LAYOUT"] = 1  # one K loop (matmul_reg_a_sg.wgsl; the runtime checks the layout)
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
    sources = matmul_sources(variant, core, c_quads(N, c_layout), quads, bool(a_act), a_image is not None)
    pb.dispatch(program, sources, variant, consts, binds, workgroups)


def _sizes(
    variant: str,
    M: int,
    N: int,
    K: int,
    z_inner: int,
    a_layout: Layout | None,
    b_layout: Layout | None,
    c_layout: Layout | None,
) -> dict[str, int]:
    """A product's sizes and operand layouts, as the override constants that hold them (with
    RUNTIME_DIMS the args uniform's words instead); ValueError for a layout an h operand cannot have."""
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
    return sizes


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
    """The buffer a matmul binds as its `args` uniform (shaders/matmuls/matmul_operands.wgsl MatmulArgs:
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
