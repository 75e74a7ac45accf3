"""The row kernels (shaders/rows/): softmax cross-entropy, column sums, LayerNorm and RMSNorm
forward and backward and their weight gradients, and the two forms of the row kernels (ROW_FORMS, shared with
attention's softmaxes)."""

from __future__ import annotations

from ..engine.plan import PlanBuilder, h_bytes
from ..engine.tiles import ROW_FORMS  # the row kernels' forms (TileTable.row_kernels)
from .common import MAX_WORKGROUPS_PER_DIM, cdiv

ROWS_PER_WG = 64  # the thread form's rows a workgroup (the shaders' WG)
RMSNORM_EPS = 2.0**-23  # torch.finfo(torch.float32).eps: nn.RMSNorm's eps=None


def row_entry(entry: str, rows: str) -> str:
    """The entry point of a row kernel's form: `entry` (a workgroup a row, reductions with
    workgroup_reduce) or `entry`_thread (a thread a row, the same tree run serially: the same bits)."""
    if rows not in ROW_FORMS:
        raise ValueError(f"rows must be one of {ROW_FORMS}, got {rows!r}")
    return entry if rows == "workgroup" else f"{entry}_thread"


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


LAYERNORM_EPS = 1e-5  # nn.LayerNorm's default, layernorm_fwd.wgsl's EPS


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
    eps: float = LAYERNORM_EPS,
    add: str | None = None,
) -> None:
    """Y = LayerNorm(Z) * gamma + beta over rows of N, keeping (mean, rstd) per row; rows
    "workgroup": a workgroup a row, "thread": a thread a row (64 rows a workgroup), bit-identical.
    eps: the kernel's default (nn.LayerNorm's) unless given, so the built-in models' plans name none.
    add: first Z += add (add_h) in the same dispatch (add_layernorm_fwd.wgsl): the bits of add_h then
    this kernel."""
    if not eps > 0:
        raise ValueError(f"layernorm_fwd: eps {eps!r} must be positive")
    binds = {"Z": Z, "gamma": gamma, "beta": beta, "Y": Y, "stats": stats, "flags": flags}
    files = ["reduce.wgsl", "layernorm_fwd.wgsl"]
    if add is not None:
        binds["A"] = add
        files.append("add_layernorm_fwd.wgsl")
    pb.dispatch(
        program,
        files,
        row_entry("add_layernorm_fwd" if add is not None else "layernorm_fwd", rows),
        {"M": M, "N": N, **({} if eps == LAYERNORM_EPS else {"EPS": eps})},
        binds,
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
        row_entry("layernorm_bwd", rows),
        {"M": M, "N": N},
        {"dY": dY, "Z": Z, "stats": stats, "gamma": gamma, "dZ": dZ, "flags": flags},
        _row_grid(M, rows),
    )


def rmsnorm_fwd(
    pb: PlanBuilder,
    program: str,
    *,
    X: str,
    gamma: str,
    Y: str,
    rstd: str,
    M: int,
    N: int,
    eps: float | None = None,
    flags: str = "flags",
    rows: str = "workgroup",
) -> None:
    """Y = X * rstd * gamma over rows of N (PyTorch's nn.RMSNorm), rstd = 1 / sqrt(mean(X^2) + eps)
    kept per row in f32 [M]; the sum of squares in f32 in a fixed tree. eps=None is nn.RMSNorm's
    default, torch.finfo(float32).eps = 2^-23 (RMSNORM_EPS). rows as layernorm_fwd's."""
    eps = RMSNORM_EPS if eps is None else eps
    if not eps > 0:
        raise ValueError(f"rmsnorm_fwd: eps {eps!r} must be positive")
    _require_rows(pb, "rmsnorm_fwd", {"X": X, "Y": Y}, {"gamma": (gamma, N), "rstd": (rstd, M)}, M, N)
    pb.dispatch(
        program,
        ["reduce.wgsl", "rmsnorm_fwd.wgsl"],
        row_entry("rmsnorm_fwd", rows),
        {"M": M, "N": N, "EPS": float(eps)},
        {"X": X, "gamma": gamma, "Y": Y, "rstd": rstd, "flags": flags},
        _row_grid(M, rows),
    )


def rmsnorm_bwd(
    pb: PlanBuilder,
    program: str,
    *,
    dY: str,
    X: str,
    rstd: str,
    gamma: str,
    dX: str,
    M: int,
    N: int,
    flags: str = "flags",
    rows: str = "workgroup",
) -> None:
    """dX = rstd * (g - xhat * mean(g * xhat)), g = dY * gamma, xhat = X * rstd (rmsnorm_fwd's rstd)."""
    bufs = {"gamma": (gamma, N), "rstd": (rstd, M)}
    _require_rows(pb, "rmsnorm_bwd", {"dY": dY, "X": X, "dX": dX}, bufs, M, N)
    pb.dispatch(
        program,
        ["reduce.wgsl", "rmsnorm_bwd.wgsl"],
        row_entry("rmsnorm_bwd", rows),
        {"M": M, "N": N},
        {"dY": dY, "X": X, "rstd": rstd, "gamma": gamma, "dX": dX, "flags": flags},
        _row_grid(M, rows),
    )


def rmsnorm_wgrad(
    pb: PlanBuilder, program: str, *, dY: str, X: str, rstd: str, dgamma: str, M: int, N: int
) -> None:
    """dgamma [N] f32 = column sums over the M rows of dY * X * rstd, in row order; a thread a column."""
    _require_rows(pb, "rmsnorm_wgrad", {"dY": dY, "X": X}, {"rstd": (rstd, M), "dgamma": (dgamma, N)}, M, N)
    pb.dispatch(
        program,
        ["columns.wgsl", "rmsnorm_wgrad.wgsl"],
        "rmsnorm_wgrad",
        {"M": M, "N": N},
        {"dY": dY, "X": X, "rstd": rstd, "dgamma": dgamma},
        [cdiv(N, 64)],
    )


def _require_rows(
    pb: PlanBuilder, launcher: str, h: dict[str, str], f32: dict[str, tuple[str, int]], M: int, N: int
) -> None:
    """Checks the sizes and that the h matrices are [M, N] and the f32 vectors have their lengths."""
    if M < 1 or N < 1:
        raise ValueError(f"{launcher}: M {M} and N {N} must be positive")
    for role, name in h.items():
        pb.require_bytes(launcher, name, h_bytes(M, N, pb.path), f"{role}: an h matrix [{M}, {N}]")
    for role, (name, n) in f32.items():
        pb.require_bytes(launcher, name, 4 * n, f"{role}: {n} f32")


def _row_grid(M: int, rows: str) -> list[int]:
    """Workgroups of a LayerNorm or RMSNorm kernel over M rows in its form. The workgroup form
    takes a 2-D grid where M rows exceed one dimension (its shaders' grid_row, whole workgroups past
    M returning): x as even as the split allows, y = cdiv(M, x)."""
    if M < 1:
        raise ValueError(f"{M} rows: at least one")
    if rows != "workgroup":
        return [cdiv(M, ROWS_PER_WG)]
    x = cdiv(M, cdiv(M, MAX_WORKGROUPS_PER_DIM))
    return [x, cdiv(M, x)]
