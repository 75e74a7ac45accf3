"""One matmul on random data and its check, without wgpu: what the tuner and the page's tuning pass
both time and verify.

`CANDIDATES` are the tile choices the tuners try and `fits` filters them by a device's limits and
features. `MatmulSpec` lays one matmul dispatch into a `PlanBuilder` (operands uniform in [-1, 1],
rounded to f16, laid out as the variant reads them) and judges a result against a float64
reference: `error_ratio` is the worst error as a multiple of its tolerance (<= 1 passes).
webmp.tune.native.MatmulCase runs a spec through wgpu-py; webmp.tune.page builds the page's tuning plan
from specs and judges what the page sends back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from ..engine.formats import FORMATS, f32_bits_to_narrow
from ..engine.plan import PlanBuilder, pack_h, unpack_h
from ..engine.tiles import DEFAULT_TILES, Tiles
from ..ops import H_OUT_VARIANTS, Layout, matmul

# Tile shapes to try, most promising first (the tuner stops when its time is up): the default,
# then the register-blocked cores (no workgroup memory or barriers: what a CPU adapter runs best;
# with subgroups, op(A) loaded once per subgroup; 16-row blocks and B read two words a load, which
# cut the loads per fma, first, with their sizes read at run time: as fast on lavapipe, and one
# pipeline then serves every product of a variant with those tiles, so a tuned plan compiles
# fewer kernels before its first step), then tiled 64x64 and 128x128 tiles with 8x8 register
# blocks, smaller blocks and deeper K slices for small or skinny problems. Filtered by the
# device's limits and features.
CANDIDATES: list[Tiles] = [
    {"core": "reg_sg", "WG_X": 8, "WG_Y": 4, "TM": 16, "TN": 8, "B_PAIRS": 1, "RUNTIME_DIMS": 1},
    {"core": "reg_sg", "WG_X": 8, "WG_Y": 4, "TM": 16, "TN": 4, "B_PAIRS": 1, "RUNTIME_DIMS": 1},
    {"core": "reg_sg", "WG_X": 8, "WG_Y": 2, "TM": 16, "TN": 8, "B_PAIRS": 1, "RUNTIME_DIMS": 1},
    {"core": "reg_sg", "WG_X": 8, "WG_Y": 4, "TM": 8, "TN": 8, "B_PAIRS": 1, "RUNTIME_DIMS": 1},
    {"core": "reg", "WG_X": 8, "WG_Y": 4, "TM": 16, "TN": 4, "B_PAIRS": 1, "RUNTIME_DIMS": 1},
    {"core": "reg_sg", "WG_X": 8, "WG_Y": 4, "TM": 8, "TN": 8},
    {"core": "reg_sg", "WG_X": 8, "WG_Y": 4, "TM": 8, "TN": 4},
    {"core": "reg", "WG_X": 8, "WG_Y": 4, "TM": 8, "TN": 8},
    {"core": "reg_sg", "WG_X": 8, "WG_Y": 1, "TM": 8, "TN": 8},
    {"WG_X": 8, "WG_Y": 8, "TM": 8, "TN": 8, "BK": 8},
    {"WG_X": 16, "WG_Y": 16, "TM": 8, "TN": 8, "BK": 8},
    {"WG_X": 16, "WG_Y": 8, "TM": 8, "TN": 8, "BK": 8},
    {"WG_X": 8, "WG_Y": 8, "TM": 4, "TN": 4, "BK": 32},
    {"WG_X": 8, "WG_Y": 8, "TM": 4, "TN": 4, "BK": 16},
    {"core": "reg", "WG_X": 8, "WG_Y": 8, "TM": 4, "TN": 8},
    {"WG_X": 16, "WG_Y": 16, "TM": 4, "TN": 4, "BK": 16},
    {"WG_X": 16, "WG_Y": 16, "TM": 4, "TN": 4, "BK": 8},
    {"WG_X": 16, "WG_Y": 16, "TM": 8, "TN": 8, "BK": 16},
    {"WG_X": 16, "WG_Y": 8, "TM": 4, "TN": 4, "BK": 16},
    {"WG_X": 16, "WG_Y": 16, "TM": 8, "TN": 4, "BK": 8},
    {"WG_X": 32, "WG_Y": 8, "TM": 4, "TN": 4, "BK": 16},
    {"WG_X": 4, "WG_Y": 4, "TM": 4, "TN": 4, "BK": 32},
]

# the device limits `fits` reads, in wgpu-py's spelling (a browser's are camelCase: `kebab_limits`)
FIT_LIMITS = (
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-workgroup-storage-size",
)


def kebab_limits(limits: Mapping[str, float]) -> dict[str, float]:
    """WebGPU's JavaScript limit names (maxComputeWorkgroupSizeX) in wgpu-py's spelling."""
    return {re.sub(r"(?<=[a-z])(?=[A-Z])", "-", k).lower(): v for k, v in limits.items()}


def fits(tiles: Tiles, limits: Mapping[str, float], has_subgroups: bool = False) -> bool:
    """Whether the device allows this tile choice (limits: wgpu-py names, FIT_LIMITS; the subgroup
    core needs the `subgroups` feature)."""
    core = tiles.get("core", "tiled")
    threads = tiles["WG_X"] * tiles["WG_Y"]
    shared = 0
    if core == "tiled":  # f32 tiles of both operands in workgroup memory
        shared = 4 * tiles["BK"] * (tiles["WG_Y"] * tiles["TM"] + tiles["WG_X"] * tiles["TN"])
    return (
        (core != "reg_sg" or has_subgroups)
        and threads <= limits["max-compute-invocations-per-workgroup"]
        and tiles["WG_X"] <= limits["max-compute-workgroup-size-x"]
        and tiles["WG_Y"] <= limits["max-compute-workgroup-size-y"]
        and shared <= limits["max-compute-workgroup-storage-size"]
    )


def candidates(limits: Mapping[str, float], has_subgroups: bool = False) -> list[Tiles]:
    """The tile choices a tuner tries on a device, the default first, then CANDIDATES in order."""
    every = [DEFAULT_TILES] + [c for c in CANDIDATES if c != DEFAULT_TILES]
    return [c for c in every if fits(c, limits, has_subgroups)]


@lru_cache(maxsize=2)
def _operands(M, N, K, trans_a, trans_b, seed):
    """Uniform in [-1, 1] (random, never an all-zero buffer), rounded to f16 and then to bf16's 8
    significant bits (a value on f16's grid rounded to 8 bits stays on it: exact in both), so that
    every path, fp32 and bf16 included, reads exactly these values and one float64 reference serves
    them all."""
    rng = np.random.default_rng(seed)

    def f16(shape: tuple[int, int]) -> np.ndarray:
        x = rng.uniform(-1, 1, shape).astype(np.float16).astype(np.float32)
        bits = f32_bits_to_narrow(x.view(np.uint32), FORMATS["bf16"])
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)

    return (
        f16((K, M) if trans_a else (M, K)),
        f16((N, K) if trans_b else (K, N)),
        rng.uniform(-1, 1, N).astype(np.float32),
        f16((M, N)),
    )


@lru_cache(maxsize=2)
def _products(M, N, K, trans_a, trans_b, seed):
    """op(A) @ op(B) and |op(A)| @ |op(B)| in float64."""
    a, b, _, _ = _operands(M, N, K, trans_a, trans_b, seed)
    a, b = (a.T if trans_a else a), (b.T if trans_b else b)
    return a @ b, np.abs(a) @ np.abs(b)


def batch_layouts(
    M: int, N: int, K: int, trans_a: int, trans_b: int, batch: int, out_h: bool
) -> tuple[Layout | None, Layout | None, Layout | None]:
    """webmp.ops.matmul's a_layout, b_layout, c_layout for `batch` products one after another in
    their buffers: batch b of a [rows, cols] operand starts b whole matrices in (the rows of an h
    matrix rounded up to whole words). None each for one product."""

    def layout(rows: int, cols: int, h: bool) -> Layout | None:
        return None if batch == 1 else Layout(sb=rows * (cols + cols % 2 if h else cols))

    return (
        layout(*((K, M) if trans_a else (M, K)), h=True),
        layout(*((N, K) if trans_b else (K, N)), h=True),
        layout(M, N, h=out_h),
    )


class MatmulSpec:
    """A single matmul dispatch of one variant on random data (see _operands), laid out as the
    variant reads it (A [K, M] when trans_a, B [N, K] when trans_b), with its numpy reference.
    matmul_dgrad runs with OUT_ACT = relu. With `batch` > 1 the dispatch computes that many
    products (the grid's z, as attention's batch-heads), each on its own copy of the operands, one
    after another in their buffers: every batch's result must match the one reference."""

    def __init__(
        self,
        path: str,
        M: int,
        N: int,
        K: int,
        variant: str = "matmul_wgrad",
        trans_a: int = 0,
        trans_b: int = 0,
        tiles: Tiles | None = None,
        seed: int = 0,
        batch: int = 1,
    ):
        self.path, self.M, self.N, self.K, self.variant = path, M, N, K, variant
        self.trans_a, self.trans_b, self.seed, self.batch = trans_a, trans_b, seed, batch
        self.tiles = dict(tiles or DEFAULT_TILES)
        self.a, self.b, self.bias, self.z = _operands(M, N, K, trans_a, trans_b, seed)
        self.out_h = variant in H_OUT_VARIANTS
        self.flops = 2.0 * M * N * K * batch

    def add_buffers(self, pb: PlanBuilder, prefix: str = "") -> str:
        """Adds the operands and the output (`prefix` + A, B, bias, Zprev, C) to pb; returns the
        output's name."""
        p, path, (M, N), nb = prefix, self.path, (self.M, self.N), self.batch
        a, b, z = (np.tile(x, (nb, 1)) for x in (self.a, self.b, self.z))
        pb.h(p + "A", a.shape[0], a.shape[1], init=pack_h(a, path))
        pb.h(p + "B", b.shape[0], b.shape[1], init=pack_h(b, path))
        pb.f32(p + "bias", (N,), "other", self.bias)
        pb.h(p + "Zprev", nb * M, N, init=pack_h(z, path))
        if self.out_h:
            pb.h(p + "C", nb * M, N)
        else:
            pb.f32(p + "C", (nb * M, N), "activations")
        return p + "C"

    def dispatch(self, pb: PlanBuilder, program: str, prefix: str = "", flags: str = "flags") -> None:
        """The matmul with this spec's tiles as `program`, on the buffers add_buffers made with the
        same prefix (and `flags`, which must exist)."""
        p = prefix
        a_layout, b_layout, c_layout = batch_layouts(
            self.M, self.N, self.K, self.trans_a, self.trans_b, self.batch, self.out_h
        )
        matmul(
            pb,
            program,
            self.variant,
            A=p + "A",
            B=p + "B",
            C=p + "C",
            M=self.M,
            N=self.N,
            K=self.K,
            trans_a=self.trans_a,
            trans_b=self.trans_b,
            bias=p + "bias",
            Zprev=p + "Zprev",
            out_act=1,
            flags=flags,
            tiles=self.tiles,
            batch=self.batch,
            a_layout=a_layout,
            b_layout=b_layout,
            c_layout=c_layout,
        )

    def reference(self) -> np.ndarray:
        c = _products(self.M, self.N, self.K, self.trans_a, self.trans_b, self.seed)[0]
        if self.variant in ("matmul_fwd", "matmul_logits"):
            c = c + self.bias
        if self.variant == "matmul_dgrad":
            c = c * (self.z > 0)  # OUT_ACT = relu
        return c

    def decode(self, raw: bytes) -> np.ndarray:
        """The output buffer's bytes as an [M, N] float32 array ([batch, M, N] when batched)."""
        rows = self.batch * self.M
        if self.out_h:
            c = unpack_h(raw, rows, self.N, self.path)
        else:
            c = np.frombuffer(raw, np.float32)[: rows * self.N].reshape(rows, self.N)
        return c if self.batch == 1 else c.reshape(self.batch, self.M, self.N)

    def error_ratio(self, result: np.ndarray) -> float:
        """The worst error of `result` as a multiple of its tolerance (<= 1 passes).

        Tolerance per element: f32 accumulation of K exact products, K * 2^-24 * sum|a*b|
        (the standard gamma_K bound), plus one f16 ulp of the result when the output is stored
        in f16 (2^-10 |c|, and 2^-24 absolute: the spacing of f16 subnormals) or one bf16 ulp
        in bf16 (2^-7 |c|: 7 fraction bits), plus 2^-24 |c| for an f32 store and the bias addition."""
        ref = self.reference()
        abs_ab = _products(self.M, self.N, self.K, self.trans_a, self.trans_b, self.seed)[1]
        f16_store = self.out_h and self.path != "fp32"
        tol = (
            self.K * 2.0**-24 * abs_ab
            + ({"bf16": 2.0**-7}.get(self.path, 2.0**-10) if f16_store else 2.0**-24) * np.abs(ref)
            + 2.0**-24 * (np.abs(self.bias) + f16_store)
        )
        err = np.abs(np.asarray(result, np.float64) - ref)
        return float(np.nan_to_num(err / tol, nan=np.inf).max())
