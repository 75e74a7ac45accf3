"""The image kernels (shaders/conv/): im2col and its adjoint col2im, the constants with which a
matmul reads an image batch as its patch matrix (implicit_patches: a convolution is one ops.matmul
on its input, no patches stored), max and average pooling forward and backward, and repack_h (an h
matrix re-laid in another shape: Flatten).

An image batch [B, C, H, W] is stored NHWC as the h matrix of its pixels [B*H*W, C], row
(b*H + h)*W + w; convolution weights are [KH*KW*C, OC], row (kh*KW + kw)*C + c. The pools take a
square window (K, S, P) as PyTorch's MaxPool2d and AvgPool2d defaults do (floor mode; average
pooling counts padding in its divisor K*K). Every launcher checks its sizes and its buffers' byte
sizes; one thread per stored word in grid-stride loops (ops.common.grid)."""

from __future__ import annotations

from ..engine.plan import PlanBuilder, h_bytes
from .common import cdiv, grid

_U32_LIMIT = 2**32  # indices are u32 in the kernels


def conv_out(n: int, k: int, s: int, p: int) -> int:
    """Output positions of a window k, stride s, padding p over n inputs (floor mode)."""
    return (n + 2 * p - k) // s + 1


def _geometry(
    entry: str, *, B: int, C: int, H: int, W: int, KH: int, KW: int, SH: int, SW: int, PH: int, PW: int
) -> dict[str, int]:
    """The kernels' override constants (conv.wgsl), after checking the sizes (ValueError naming the
    launcher and the values)."""
    sizes = {"B": B, "C": C, "H": H, "W": W, "KH": KH, "KW": KW, "SH": SH, "SW": SW}
    bad = [f"{k}={v}" for k, v in sizes.items() if v < 1] + [
        f"{k}={v}" for k, v in (("PH", PH), ("PW", PW)) if v < 0
    ]
    if bad:
        raise ValueError(
            f"{entry}: sizes and strides must be positive and padding not negative, got {', '.join(bad)}"
        )
    for k, p, n, kn, pn, nn in ((KH, PH, H, "KH", "PH", "H"), (KW, PW, W, "KW", "PW", "W")):
        if p >= k:
            raise ValueError(f"{entry}: padding {pn}={p} must be smaller than the kernel {kn}={k}")
        if k > n + 2 * p:
            raise ValueError(
                f"{entry}: kernel {kn}={k} is larger than the padded input {nn} + 2*{pn} = {n + 2 * p}"
            )
    OH, OW = conv_out(H, KH, SH, PH), conv_out(W, KW, SW, PW)
    if B * max(H * W, OH * OW) * max(C, KH * KW * C) >= _U32_LIMIT:
        raise ValueError(
            f"{entry}: [B={B}, C={C}, H={H}, W={W}] with a {KH}x{KW} kernel is too large for u32 indices"
        )
    return {**sizes, "PH": PH, "PW": PW, "OH": OH, "OW": OW}


def _pool_geometry(entry: str, *, B: int, C: int, H: int, W: int, K: int, S: int, P: int) -> dict[str, int]:
    """A square pooling window as conv.wgsl's geometry; PyTorch's padding rule (P <= K // 2)."""
    if K >= 1 and 0 <= P and 2 * P > K:
        raise ValueError(f"{entry}: padding P={P} must be at most half the kernel K={K} (PyTorch's rule)")
    return _geometry(entry, B=B, C=C, H=H, W=W, KH=K, KW=K, SH=S, SW=S, PH=P, PW=P)


def _require_h(pb: PlanBuilder, entry: str, buffer: str, rows: int, cols: int, what: str) -> None:
    pb.require_bytes(entry, buffer, h_bytes(rows, cols, pb.path), f"{what}, an h matrix [{rows}, {cols}]")


def _require_images(
    pb: PlanBuilder, entry: str, g: dict[str, int], images: tuple[str, str], pooled: tuple[str, str]
) -> None:
    """A pool's two sides, each (what, buffer): the images [B*H*W, C] and the pooled [B*OH*OW, C]."""
    _require_h(pb, entry, images[1], g["B"] * g["H"] * g["W"], g["C"], images[0])
    _require_h(pb, entry, pooled[1], g["B"] * g["OH"] * g["OW"], g["C"], pooled[0])


def im2col(
    pb: PlanBuilder,
    program: str,
    *,
    X: str,
    P: str,
    B: int,
    C: int,
    H: int,
    W: int,
    KH: int,
    KW: int,
    SH: int,
    SW: int,
    PH: int,
    PW: int,
    flags: str = "flags",
) -> None:
    """P [B*OH*OW, KH*KW*C] = the patches of X [B*H*W, C]: P[(b*OH + oh)*OW + ow, (kh*KW + kw)*C + c]
    = X[(b*H + ih)*W + iw, c], ih = oh*SH - PH + kh, iw = ow*SW - PW + kw, zero outside the image;
    the bits move unchanged. `flags` is not bound (nothing is rounded, so nothing can overflow); it
    is taken so that every image launcher is called alike."""
    g = _geometry("im2col", B=B, C=C, H=H, W=W, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW)
    rows, cols = B * g["OH"] * g["OW"], KH * KW * C
    _require_h(pb, "im2col", X, B * H * W, C, "the images X")
    _require_h(pb, "im2col", P, rows, cols, "the patches P")
    files = ["h_halves.wgsl", "conv.wgsl", "im2col.wgsl"]
    pb.dispatch(program, files, "im2col", g, {"X": X, "P": P}, grid(rows * cdiv(cols, 2)))


def implicit_patches(
    pb: PlanBuilder,
    entry: str,
    X: str,
    *,
    M: int,
    K: int,
    trans_a: int,
    B: int,
    C: int,
    H: int,
    W: int,
    KH: int,
    KW: int,
    SH: int,
    SW: int,
    PH: int,
    PW: int,
) -> dict[str, int]:
    """The constants with which a matmul (webmp.ops.matmul's `a_image`) reads its A operand, bound to
    the images X [B*H*W, C], as their patch matrix P [B*OH*OW, KH*KW*C] (im2col's, never stored:
    shaders/matmuls/matmul_a_patches.wgsl, which the matmul then includes): op(A) = P for a
    convolution's forward product (M, K = B*OH*OW, KH*KW*C), P^T with trans_a for its weight
    gradient (M, K = KH*KW*C, B*OH*OW). The matmul reads the values im2col would have stored, in
    the same places: the same bits."""
    g = _geometry(entry, B=B, C=C, H=H, W=W, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW)
    rows, cols = B * g["OH"] * g["OW"], KH * KW * C
    want = (cols, rows) if trans_a else (rows, cols)
    if (M, K) != want:
        raise ValueError(
            f"{entry}: the patch matrix of these images is [{rows}, {cols}], so op(A) is "
            f"[{want[0]}, {want[1]}] (trans_a={trans_a}), got M={M}, K={K}"
        )
    _require_h(pb, entry, X, B * H * W, C, "the images X")
    names = ("C", "H", "W", "KH", "KW", "SH", "SW", "PH", "PW", "OH", "OW")
    return {f"CONV_{n}": g[n] for n in names}


def col2im(
    pb: PlanBuilder,
    program: str,
    *,
    dP: str,
    dX: str,
    B: int,
    C: int,
    H: int,
    W: int,
    KH: int,
    KW: int,
    SH: int,
    SW: int,
    PH: int,
    PW: int,
    flags: str = "flags",
) -> None:
    """im2col's adjoint: dX [B*H*W, C] = for each input element the f32 sum of the entries of dP
    [B*OH*OW, KH*KW*C] im2col copied it to (gathered in the tap order kh, kw: deterministic),
    stored once in the activation format, overflow flagged (FLAG_H_STORE)."""
    g = _geometry("col2im", B=B, C=C, H=H, W=W, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW)
    _require_h(pb, "col2im", dP, B * g["OH"] * g["OW"], KH * KW * C, "the patch gradient dP")
    _require_h(pb, "col2im", dX, B * H * W, C, "the image gradient dX")
    binds = {"dP": dP, "dX": dX, "flags": flags}
    pb.dispatch(program, ["conv.wgsl", "col2im.wgsl"], "col2im", g, binds, grid(B * H * W * cdiv(C, 2)))


def maxpool_fwd(
    pb: PlanBuilder,
    program: str,
    *,
    X: str,
    Y: str,
    argmax: str,
    B: int,
    C: int,
    H: int,
    W: int,
    K: int,
    S: int,
    P: int,
    flags: str = "flags",
) -> None:
    """Y [B*OH*OW, C] = the maximum of each K x K window of X [B*H*W, C] (stride S, padding P with
    -inf: a padded position never wins), copied as bits; argmax u32 [B*OH*OW*C] the winner's pixel
    row (b*H + ih)*W + iw, the first in row-major window order on ties (PyTorch's rule). `flags` is
    not bound (values are copied, nothing can overflow); taken so that the pools are called alike."""
    g = _pool_geometry("maxpool_fwd", B=B, C=C, H=H, W=W, K=K, S=S, P=P)
    _require_images(pb, "maxpool_fwd", g, ("the images X", X), ("the pooled Y", Y))
    out = B * g["OH"] * g["OW"]
    pb.require_bytes("maxpool_fwd", argmax, 4 * out * C, f"u32 argmax [{out * C}]")
    files = ["h_halves.wgsl", "conv.wgsl", "maxpool_fwd.wgsl"]
    binds = {"X": X, "Y": Y, "argmax": argmax}
    pb.dispatch(program, files, "maxpool_fwd", g, binds, grid(out * cdiv(C, 2)))


def maxpool_bwd(
    pb: PlanBuilder,
    program: str,
    *,
    dY: str,
    argmax: str,
    dX: str,
    B: int,
    C: int,
    H: int,
    W: int,
    K: int,
    S: int,
    P: int,
    flags: str = "flags",
) -> None:
    """dX [B*H*W, C] = the f32 sum of dY [B*OH*OW, C] over the windows whose argmax (maxpool_fwd's)
    is this pixel, gathered over the at most ceil(K/S)^2 windows covering it, stored once in the
    activation format, overflow flagged."""
    g = _pool_geometry("maxpool_bwd", B=B, C=C, H=H, W=W, K=K, S=S, P=P)
    _require_images(pb, "maxpool_bwd", g, ("the image gradient dX", dX), ("the pooled gradient dY", dY))
    out = B * g["OH"] * g["OW"]
    pb.require_bytes("maxpool_bwd", argmax, 4 * out * C, f"u32 argmax [{out * C}]")
    binds = {"dY": dY, "argmax": argmax, "dX": dX, "flags": flags}
    files = ["conv.wgsl", "maxpool_bwd.wgsl"]
    pb.dispatch(program, files, "maxpool_bwd", g, binds, grid(B * H * W * cdiv(C, 2)))


def avgpool_fwd(
    pb: PlanBuilder,
    program: str,
    *,
    X: str,
    Y: str,
    B: int,
    C: int,
    H: int,
    W: int,
    K: int,
    S: int,
    P: int,
    flags: str = "flags",
) -> None:
    """Y [B*OH*OW, C] = the f32 sum of each K x K window of X [B*H*W, C] / (K*K), padding counted as
    zeros (PyTorch's count_include_pad), stored once in the activation format, overflow flagged."""
    g = _pool_geometry("avgpool_fwd", B=B, C=C, H=H, W=W, K=K, S=S, P=P)
    _require_images(pb, "avgpool_fwd", g, ("the images X", X), ("the pooled Y", Y))
    binds = {"X": X, "Y": Y, "flags": flags}
    out_words = B * g["OH"] * g["OW"] * cdiv(C, 2)
    pb.dispatch(program, ["conv.wgsl", "avgpool_fwd.wgsl"], "avgpool_fwd", g, binds, grid(out_words))


def avgpool_bwd(
    pb: PlanBuilder,
    program: str,
    *,
    dY: str,
    dX: str,
    B: int,
    C: int,
    H: int,
    W: int,
    K: int,
    S: int,
    P: int,
    flags: str = "flags",
) -> None:
    """dX [B*H*W, C] = the f32 sum of dY [B*OH*OW, C] over the windows covering each pixel / (K*K),
    stored once in the activation format, overflow flagged."""
    g = _pool_geometry("avgpool_bwd", B=B, C=C, H=H, W=W, K=K, S=S, P=P)
    _require_images(pb, "avgpool_bwd", g, ("the image gradient dX", dX), ("the pooled gradient dY", dY))
    binds = {"dY": dY, "dX": dX, "flags": flags}
    files = ["conv.wgsl", "avgpool_bwd.wgsl"]
    pb.dispatch(program, files, "avgpool_bwd", g, binds, grid(B * H * W * cdiv(C, 2)))


def repack_h(
    pb: PlanBuilder, program: str, *, X: str, Y: str, rows_in: int, cols_in: int, rows_out: int, cols_out: int
) -> None:
    """Y [rows_out, cols_out] = the elements of X [rows_in, cols_in] in row-major order, both h
    matrices, bits unchanged (Flatten of an odd-C image batch, and back; for even widths the two
    layouts are the same bytes and no copy is needed)."""
    sizes = {"rows_in": rows_in, "cols_in": cols_in, "rows_out": rows_out, "cols_out": cols_out}
    if min(sizes.values()) < 1 or rows_in * cols_in != rows_out * cols_out:
        raise ValueError(
            "repack_h: sizes must be positive with rows_in*cols_in == rows_out*cols_out, got "
            + ", ".join(f"{k}={v}" for k, v in sizes.items())
        )
    if rows_in * cols_in >= _U32_LIMIT:
        raise ValueError(f"repack_h: {rows_in * cols_in} elements are too many for u32 indices")
    _require_h(pb, "repack_h", X, rows_in, cols_in, "X")
    _require_h(pb, "repack_h", Y, rows_out, cols_out, "Y")
    consts = {k.upper(): v for k, v in sizes.items()}
    files = ["h_halves.wgsl", "repack_h.wgsl"]
    pb.dispatch(program, files, "repack_h", consts, {"X": X, "Y": Y}, grid(rows_out * cdiv(cols_out, 2)))
