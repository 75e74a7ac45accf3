"""Matmul tile shapes: the defaults, the shape classes and the per-adapter cache on disk.

The matmul kernels take their core (tiles["core"]: "tiled", the default, shaders/matmuls/matmul.wgsl;
"reg" and "reg_sg", shaders/matmuls/matmul_reg.wgsl: see webmp.ops.MATMUL_CORES) and tile shape as
pipeline-overridable constants (WG_X, WG_Y, TM, TN, and BK for the tiled core); RUNTIME_DIMS: 1
makes them read the product's sizes and layouts from a uniform at run time instead of taking them
as constants (one pipeline for every size: SMALL_TILES below); B_PAIRS: 1 makes the register cores
read op(B) two words a load where its layout allows (webmp.ops.b_pairs; elsewhere the same tiles
read one word a load: the same values). Which a plan
uses is decided by the caller of `build_plan`, which passes a `TileTable`:
`TileTable.for_adapter(name, info)` reads what `webmp bench --tune` (webmp/tune/native.py), `webmp
train`'s first-use tuning or the page's pass measured for that adapter, and, for the shape classes
and forms it lacks, the shipped entry of the adapter's class (webmp.engine.adapters: lavapipe,
SwiftShader, a rule for GPUs); `TileTable()` is the defaults. The precedence, per shape class: the
cache's entry > the shipped class entry > default_tiles; `TileTable.source` says which a shape got
and `describe` counts them for a run's summary. Nothing here is process-global.

The cache (webmp.engine.tune_cache: where it is, how processes share it) is
{adapter name: {shape class: tiles}}. The reserved key ROWS_KEY ("rows") of an adapter's entry holds
{"form": "workgroup" | "thread"}: which form the row kernels (attn_softmax_*, layernorm_fwd/bwd,
webmp.ops.ROW_FORMS; both give the same bits) take, `TileTable.row_kernels` ("workgroup" when absent);
WEIGHTS_KEY ("weights") {"form": "as_stored" | "transposed"}: how the GPT's backward pass reads its
weights, `TileTable.weights` ("as_stored" when absent); ADAPTER_KEY ("adapter"): what a page reported
about its adapter (webmp.engine.adapters.AdapterInfo.entry), under the page's key, for its class's
shipped tiles.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from .adapters import AdapterInfo, ShippedTiles, shipped_tiles
from .subgroups import subgroup_width
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
# reserved key: what a page reported about its adapter (AdapterInfo.entry), stored by the server under
# the page's adapter key, so that the page's plans get its class's shipped tiles (a name alone says no class)
ADAPTER_KEY = "adapter"
# reserved key: {attention class (attention_class): "fused" | "unfused"}, which form of causal
# self-attention measured faster for that shape class (webmp.models.attention_form: the choice of
# TrainConfig.attention "auto"); the two forms' results differ by rounding (webmp/ops/flash.py)
ATTENTION_KEY = "attention"
ATTENTION_FORMS = ("fused", "unfused")
RESERVED_KEYS = (ROWS_KEY, WEIGHTS_KEY, ADAPTER_KEY, ATTENTION_KEY)
# WebGPU's default maxStorageBufferBindingSize (128 MiB): what a page's device gets, and the limit a
# plan is held to unless the table is told its adapter's (TileTable.buffer_limit)
WEBGPU_MAX_BINDING = 128 * 2**20


def attention_class(path: str, T: int, d: int) -> str:
    """The attention form's shape class: the path (f32 or f16 storage), the context rounded up to a
    power of two, the head size."""
    return f"attention/{'fp32' if path == 'fp32' else 'f16'}/T{1 << max(0, T - 1).bit_length()}/d{d}"


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


SOURCES = ("tune cache", "shipped", "default")  # where a shape class's tiles (or a form) came from


class TileTable:
    """Tile shapes by shape class; classes it lacks get the shipped entry's tiles (when given: an
    adapter class's, webmp.engine.adapters), else default_tiles (by the shape's size)."""

    def __init__(
        self,
        by_class: Mapping[str, Tiles] | None = None,
        adapter: str | None = None,
        shipped: ShippedTiles | None = None,
    ):
        by_class = dict(by_class or {})
        rows = by_class.pop(ROWS_KEY, None) or {}
        weights = by_class.pop(WEIGHTS_KEY, None) or {}
        by_class.pop(ADAPTER_KEY, None)
        attention = by_class.pop(ATTENTION_KEY, None) or {}
        # per attention class the faster form, as the tuner measured it (ATTENTION_KEY)
        self.attention: dict[str, str] = {c: str(f) for c, f in attention.items() if f in ATTENTION_FORMS}
        # the largest storage binding the plan's adapter allows (the Trainer sets its GPU's)
        self.buffer_limit = WEBGPU_MAX_BINDING
        # the adapter's fixed subgroup width where known (webmp.engine.subgroups; 0: unknown): the
        # subgroup core's matmuls of tiles it suits then compile one K loop (SG_LAYOUT)
        self.subgroup_width = 0
        # a resumed run's attention form, its checkpoint's (the Trainer sets it): auto keeps it
        self.kept_attention: str | None = None
        self.by_class = {cls: dict(t) for cls, t in by_class.items()}
        self.adapter = adapter
        self.shipped = shipped
        # where each form came from (SOURCES)
        self.form_sources = {
            ROWS_KEY: "tune cache" if "form" in rows else "shipped" if shipped else "default",
            WEIGHTS_KEY: "tune cache" if "form" in weights else "shipped" if shipped else "default",
        }
        # the row kernels' form (webmp.ops.ROW_FORMS): a workgroup or a thread a row, the same bits
        self.row_kernels: str = str(rows.get("form", shipped.rows if shipped else DEFAULT_ROWS))
        # how the GPT's backward reads its weights (WEIGHT_FORMS), the same bits
        self.weights: str = str(weights.get("form", shipped.weights if shipped else DEFAULT_WEIGHTS))
        for key, form, forms in (
            (ROWS_KEY, self.row_kernels, ROW_FORMS),
            (WEIGHTS_KEY, self.weights, WEIGHT_FORMS),
        ):
            if form not in forms:
                raise ValueError(f"tile table entry {key!r}: form {form!r} is not one of {forms}")

    @classmethod
    def for_adapter(cls, adapter: str | None, info: AdapterInfo | None = None) -> TileTable:
        """The cached choices for this adapter (none cached, or adapter None: none), over the shipped
        entry of its class when `info` is given (webmp.engine.adapters.shipped_tiles) or the cache
        holds what a page reported about it (ADAPTER_KEY), else over the defaults. An entry this
        version cannot use (a form it does not know: perhaps a newer webmp's) is reported and left
        out; the file is left as it is."""
        entry = load_cache().get(adapter, {}) if adapter else {}
        device = info  # a runtime's own adapter: only its plans may rely on its subgroup layout
        if info is None and isinstance(entry.get(ADAPTER_KEY), dict):  # a page's adapter (its report)
            info = AdapterInfo.from_entry(entry[ADAPTER_KEY])
        shipped = shipped_tiles(info)
        try:
            table = cls(entry, adapter, shipped)
        except ValueError as e:
            warnings.warn(
                f"webmp: the tune cache {cache_path()} for {adapter}: {e}; it is not used "
                "(`webmp bench --tune` writes the entry anew)",
                TuneCacheWarning,
                stacklevel=2,
            )
            table = cls({}, adapter, shipped)
        table.subgroup_width = subgroup_width(device)
        return table

    def source(self, path: str, M: int, N: int, K: int, trans_a: int = 0, trans_b: int = 0) -> str:
        """Where for_shape's tiles of this shape come from: one of SOURCES."""
        cls = shape_class(path, M, N, K, trans_a, trans_b)
        return "tune cache" if cls in self.by_class else "shipped" if self.shipped else "default"

    def for_shape(self, path: str, M: int, N: int, K: int, trans_a: int = 0, trans_b: int = 0) -> Tiles:
        cls = shape_class(path, M, N, K, trans_a, trans_b)
        if cls in self.by_class:
            return dict(self.by_class[cls])
        if self.shipped is not None:
            if cls in self.shipped.by_class:
                return dict(self.shipped.by_class[cls])
            return self.shipped.tiles(M, N, K, SMALL_MACS)
        return default_tiles(M, N, K)

    def describe(self, classes: Iterable[str] | None = None) -> str:
        """For summaries: where the tiles came from. With `classes` (a plan's shape classes:
        plan_classes), how many of them each source gave; without, how many classes are cached.
        Then the forms, where not the defaults, with their source."""
        shipped = self.shipped.describe() if self.shipped else None
        if classes is None:
            n = len(self.by_class)
            what = f"tuned ({n} shape classes cached)" if n else shipped or "default"
            if n and shipped:
                what += f", else the {shipped}"
        else:
            wanted = set(classes)
            cached = sum(c in self.by_class for c in wanted)
            rest = len(wanted) - cached
            if not cached:
                what = shipped or "default"
            else:
                what = f"tuned ({cached} of the {len(wanted)} shape classes from the tune cache"
                what += f"; {rest} from the {shipped or 'defaults'})" if rest else ")"
        forms = []
        if self.row_kernels != DEFAULT_ROWS:
            forms.append(f"{self.row_kernels}-per-row row kernels{self._form_source(ROWS_KEY)}")
        if self.weights != DEFAULT_WEIGHTS:
            forms.append(f"weights transposed for the backward pass{self._form_source(WEIGHTS_KEY)}")
        return ", ".join([what, *forms])

    def _form_source(self, key: str) -> str:
        src = self.form_sources[key]
        return "" if src == "tune cache" and self.shipped is None else f" ({src})"


def plan_classes(plan: Mapping[str, Any]) -> list[str]:
    """The shape classes of a plan's matmuls (plan["matmuls"]), in order, each once."""
    path = plan["f16_path"] or "fp32"
    out: dict[str, None] = {}
    for m in plan["matmuls"]:
        out[shape_class(path, m["M"], m["N"], m["K"], m["trans_a"], m["trans_b"])] = None
    return list(out)
