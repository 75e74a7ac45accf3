"""Matmul tile shapes: the defaults, the shape classes and the per-adapter cache on disk.

The matmul kernels take their core (tiles["core"]: "tiled", the default, shaders/matmuls/matmul.wgsl;
"reg" and "reg_sg", shaders/matmuls/matmul_reg.wgsl: see webmp.ops.MATMUL_CORES) and tile shape as
pipeline-overridable constants (WG_X, WG_Y, TM, TN, and BK for the tiled core); RUNTIME_DIMS: 1
makes them read the product's sizes and layouts from a uniform at run time instead of taking them
as constants (one pipeline for every size: SMALL_TILES below); B_PAIRS: 1 makes the register cores
read op(B) two words a load where its layout allows (webmp.ops.b_pairs; elsewhere the same tiles
read one word a load: the same values). Which a plan
uses is decided by the caller of `build_plan`, which passes a `TileTable`:
`TileTable.for_adapter(name)` reads what `webmp bench --tune` (webmp/tune/native.py) measured for that
adapter, `TileTable()` is the defaults. Nothing here is process-global.

The cache (webmp.engine.tune_cache: where it is, how processes share it) is
{adapter name: {shape class: tiles}}. The reserved key ROWS_KEY ("rows") of an adapter's entry holds
{"form": "workgroup" | "thread"}: which form the row kernels (attn_softmax_*, layernorm_fwd/bwd,
webmp.ops.ROW_FORMS; both give the same bits) take, `TileTable.row_kernels` ("workgroup" when absent);
WEIGHTS_KEY ("weights") {"form": "as_stored" | "transposed"}: how the GPT's backward pass reads its
weights, `TileTable.weights` ("as_stored" when absent).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from .tune_cache import TuneCacheWarning, cache_path, load_cache

# tile-shape constants (int), optionally "core" (webmp.ops.MATMUL_CORES), RUNTIME_DIMS, B_PAIRS
Tiles = dict[str, Any]

DEFAULT_TILES: Tiles = {"WG_X": 8, "WG_Y": 8, "TM": 8, "TN": 8, "BK": 16}  # 64 x 64 tiles, 64 threads
# Small products (at most SMALL_MACS multiply-adds: every matmul of the default GPT, whose largest
# is 1024 x 512 x 128 = 2^26) default to the register core's 4 x 4 blocks (32 x 32 per workgroup of
# 64 threads, no workgroup memory) with their sizes read at run time (RUNTIME_DIMS,
# shaders/matmuls/matmul_operands.wgsl), so one pipeline serves every such product of a variant, transposes
# and activation. Measured on lavapipe (docs/benchmarks.md "Cold start"): it compiles ~3x faster
# than the tiled core's written-out 8 x 8 blocks and runs faster at these sizes (the GPT's shapes
# 10 against 7 GFLOP/s), so a first step waits far less. On a GPU a product this size takes a
# fraction of a millisecond either way, and a tuned table (webmp bench --tune, the page's tuning
# pass) picks per class. The same bits on every core.
SMALL_TILES: Tiles = {"core": "reg", "WG_X": 8, "WG_Y": 8, "TM": 4, "TN": 4, "RUNTIME_DIMS": 1}
SMALL_MACS = 1 << 26
# The per-position products with a bias of one row (matmul_fwd with M = 1: text generation's
# one-position program, webmp/models/net_sample.py, whose other one-row products take the window's
# tiles and share its pipelines): the register core with a row of 8 threads, 4 x 8 blocks (64
# columns a workgroup, one SIMD row of lavapipe's), sizes read at run time. A 32 x 32 block
# (SMALL_TILES) computes 32 rows, 31 of them clamped copies that are never stored: here a workgroup
# computes 4 and reads each word of B once. Measured on lavapipe (the default gpt's one-position
# program, 2 vCPUs, every product on these tiles): 1.1-1.6 ms against 1.3-2.3 ms with 32 threads of
# 4 x 4 blocks. The same bits on every core.
ROW_TILES: Tiles = {"core": "reg", "WG_X": 8, "WG_Y": 1, "TM": 4, "TN": 8, "RUNTIME_DIMS": 1}
ROWS_KEY = "rows"  # reserved key of an adapter's cache entry: {"form": the row kernels' form}
ROW_FORMS = ("workgroup", "thread")  # a workgroup a row, a thread a row (webmp.ops.row_entry)
DEFAULT_ROWS = "workgroup"
# reserved key: {"form": how the GPT's backward pass reads the weights of its input-gradient
# products}: "as_stored" (A·Bᵀ on the working copy, the default) or "transposed" (each step it
# transposes the copy, transpose_h, and the products are A·B: faster where A·Bᵀ loads more, as on
# lavapipe). The same bits either way.
WEIGHTS_KEY = "weights"
WEIGHT_FORMS = ("as_stored", "transposed")
DEFAULT_WEIGHTS = "as_stored"
RESERVED_KEYS = (ROWS_KEY, WEIGHTS_KEY)


def _bucket(n: int) -> str:
    for edge in (16, 64, 256, 1024, 4096):
        if n <= edge:
            return str(edge)
    return "big"


def shape_class(path: str, M: int, N: int, K: int, trans_a: int = 0, trans_b: int = 0) -> str:
    """e.g. 'native/NT/64x256x256': precision path, transposes, each size rounded up to a power of 4."""
    t = ("T" if trans_a else "N") + ("T" if trans_b else "N")
    return f"{path}/{t}/{_bucket(M)}x{_bucket(N)}x{_bucket(K)}"


def default_tiles(M: int, N: int, K: int) -> Tiles:
    """The tiles of a shape nobody tuned: SMALL_TILES for small products, else DEFAULT_TILES."""
    return dict(SMALL_TILES if M * N * K <= SMALL_MACS else DEFAULT_TILES)


class TileTable:
    """Tile shapes by shape class; classes it lacks get default_tiles (by the shape's size)."""

    def __init__(self, by_class: Mapping[str, Tiles] | None = None, adapter: str | None = None):
        by_class = dict(by_class or {})
        rows = by_class.pop(ROWS_KEY, None) or {}
        weights = by_class.pop(WEIGHTS_KEY, None) or {}
        self.by_class = {cls: dict(t) for cls, t in by_class.items()}
        self.adapter = adapter
        # the row kernels' form (webmp.ops.ROW_FORMS): a workgroup or a thread a row, the same bits
        self.row_kernels: str = str(rows.get("form", DEFAULT_ROWS))
        # how the GPT's backward reads its weights (WEIGHT_FORMS), the same bits
        self.weights: str = str(weights.get("form", DEFAULT_WEIGHTS))
        for key, form, forms in (
            (ROWS_KEY, self.row_kernels, ROW_FORMS),
            (WEIGHTS_KEY, self.weights, WEIGHT_FORMS),
        ):
            if form not in forms:
                raise ValueError(f"tile table entry {key!r}: form {form!r} is not one of {forms}")

    @classmethod
    def for_adapter(cls, adapter: str | None) -> TileTable:
        """The cached choices for this adapter (none cached, or adapter None: the defaults). An entry
        this version cannot use (a form it does not know: perhaps a newer webmp's) is reported and
        the defaults are used; the file is left as it is."""
        entry = load_cache().get(adapter, {}) if adapter else {}
        try:
            return cls(entry, adapter)
        except ValueError as e:
            warnings.warn(
                f"webmp: the tune cache {cache_path()} for {adapter}: {e}; the defaults are used "
                "(`webmp bench --tune` writes the entry anew)",
                TuneCacheWarning,
                stacklevel=2,
            )
            return cls({}, adapter)

    def for_shape(self, path: str, M: int, N: int, K: int, trans_a: int = 0, trans_b: int = 0) -> Tiles:
        cls = shape_class(path, M, N, K, trans_a, trans_b)
        return dict(self.by_class[cls]) if cls in self.by_class else default_tiles(M, N, K)

    def describe(self) -> str:
        """For summaries: 'default', or how many shape classes are tuned."""
        n = len(self.by_class)
        rows = "" if self.row_kernels == DEFAULT_ROWS else f", {self.row_kernels}-per-row row kernels"
        weights = "" if self.weights == DEFAULT_WEIGHTS else ", weights transposed for the backward pass"
        return (f"tuned ({n} shape classes cached)" if n else "default") + rows + weights
