"""Adapter classes and the matmul tiles and forms shipped for each: what a run uses where the tune
cache holds nothing for a shape class.

Precedence, per shape class (webmp.engine.tiles.TileTable): the tune cache's entry for the adapter
(`webmp bench --tune`, `webmp train`'s first-use tuning, the page's pass) > the shipped entry of the
adapter's class (`shipped_tiles`, from `SHIPPED`) > `default_tiles`. The row kernels' and the
weights' forms likewise: the cache's > the class's > the defaults. Every choice gives the same bits
(each core adds a product's k terms in order, one fma each); only the speed differs.

The classes (`adapter_class`, from what wgpu-py or a browser reports about the adapter):

- "lavapipe": Mesa's llvmpipe Vulkan driver (a CPU). Measured: see LAVAPIPE_MEASURED.
- "swiftshader": Google's SwiftShader Vulkan driver (a CPU; what Chromium falls back to without a
  GPU). Measured natively through wgpu-py on Chromium's own libvk_swiftshader.so: SWIFTSHADER_MEASURED.
- "gpu/<vendor>": a real GPU, by vendor (PCI vendor id or name), with its subgroup size where the
  adapter reports one. Nothing here could measure a GPU, so this rule is a heuristic from documented
  facts (GPU_RULE), and says so wherever a run names its tiles; `webmp bench --tune` measures and
  overrides it.
- anything else (an unknown CPU driver, OpenGL): no shipped entry, the defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

Tiles = dict[str, Any]


@dataclass(frozen=True)
class AdapterInfo:
    """What the class rule reads about an adapter (wgpu-py's adapter.info and features, or a browser's
    GPUAdapterInfo); empty strings and 0 where nothing was reported."""

    vendor: str = ""
    architecture: str = ""
    device: str = ""
    description: str = ""
    adapter_type: str = ""  # wgpu-py: "CPU", "DiscreteGPU", "IntegratedGPU", ...
    vendor_id: int = 0
    subgroup_min_size: int = 0
    subgroup_max_size: int = 0
    subgroups: bool = False  # the `subgroups` feature (the reg_sg core needs it)

    @classmethod
    def from_wgpu(cls, info: Mapping[str, Any], features: Iterable[str]) -> AdapterInfo:
        """From wgpu-py 0.32's adapter.info (which spells the subgroup sizes "stackgroup_*_size") and
        adapter.features (wgpu-py names the feature "subgroup")."""

        def size(what: str) -> int:
            value = info.get(f"subgroup_{what}_size", info.get(f"stackgroup_{what}_size", 0))
            return int(value) if isinstance(value, int) else 0

        feats = set(features)
        return cls(
            vendor=str(info.get("vendor", "") or ""),
            architecture=str(info.get("architecture", "") or ""),
            device=str(info.get("device", "") or ""),
            description=str(info.get("description", "") or ""),
            adapter_type=str(info.get("adapter_type", "") or ""),
            vendor_id=int(info.get("vendor_id", 0) or 0),
            subgroup_min_size=size("min"),
            subgroup_max_size=size("max"),
            subgroups=bool({"subgroup", "subgroups"} & feats),
        )

    @classmethod
    def from_browser(cls, signature: Mapping[str, Any]) -> AdapterInfo:
        """From what a page reports (webmp.serve.messages.AdapterSignature: GPUAdapterInfo's strings,
        subgroup sizes, the feature names)."""
        return cls(
            vendor=str(signature.get("vendor") or ""),
            architecture=str(signature.get("architecture") or ""),
            device=str(signature.get("device") or ""),
            description=str(signature.get("description") or ""),
            subgroup_min_size=int(signature.get("subgroup_min_size") or 0),
            subgroup_max_size=int(signature.get("subgroup_max_size") or 0),
            subgroups="subgroups" in (signature.get("features") or []),
        )

    def entry(self) -> dict[str, int | str]:
        """As a tune cache entry (names to integers or strings): tiles.ADAPTER_KEY's."""
        return {k: int(v) if isinstance(v, bool) else v for k, v in asdict(self).items()}

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> AdapterInfo:
        known = {f.name: f.type for f in fields(cls)}
        kw = {k: v for k, v in entry.items() if k in known}
        if "subgroups" in kw:
            kw["subgroups"] = bool(kw["subgroups"])
        return cls(**kw)

    def text(self) -> str:
        return " ".join((self.vendor, self.architecture, self.device, self.description)).lower()


@dataclass(frozen=True)
class ShippedTiles:
    """One adapter class's entry: tiles for products up to tiles.SMALL_MACS multiply-adds and above,
    optional per-shape-class tiles, the two forms, and where and how it was measured (None: a
    heuristic, `why` says from what)."""

    adapter_class: str
    small: Tiles
    large: Tiles
    narrow: Tiles | None = None  # products of at most NARROW_N columns, where given (else small/large)
    rows: str = "workgroup"
    weights: str = "as_stored"
    by_class: Mapping[str, Tiles] = field(default_factory=dict)
    measured: str | None = None
    why: str = ""

    def tiles(self, M: int, N: int, K: int, small_macs: int) -> Tiles:
        """The entry's tiles for a product of a class it has no tiles of its own for."""
        if self.narrow is not None and N <= NARROW_N:
            return dict(self.narrow)
        return dict(self.small if M * N * K <= small_macs else self.large)

    def describe(self) -> str:
        how = "measured" if self.measured else "heuristic, not measured"
        return f"shipped {self.adapter_class} table ({how})"


# --- the entries ---------------------------------------------------------------------------------

NARROW_N = 32  # an 8 x 4 workgroup of 16 x 8 blocks spans 64 columns: at N <= 32 half its lanes idle

# The register cores' choices (webmp.tune.matmul_cases.CANDIDATES' first ones): 16-row blocks, B read
# in pairs (quads at 8 columns on an f16 path), sizes read at run time (one pipeline per variant
# for every product: a cold start compiles no more kernels than with tiles.SMALL_TILES).
REG_SG_16x8: Tiles = {
    "core": "reg_sg",
    "WG_X": 8,
    "WG_Y": 4,
    "TM": 16,
    "TN": 8,
    "B_PAIRS": 1,
    "RUNTIME_DIMS": 1,
}
REG_SG_16x4: Tiles = {
    "core": "reg_sg",
    "WG_X": 8,
    "WG_Y": 4,
    "TM": 16,
    "TN": 4,
    "B_PAIRS": 1,
    "RUNTIME_DIMS": 1,
}
REG_16x4: Tiles = {"core": "reg", "WG_X": 8, "WG_Y": 4, "TM": 16, "TN": 4, "B_PAIRS": 1, "RUNTIME_DIMS": 1}
# The defaults (tiles.SMALL_TILES, tiles.DEFAULT_TILES), spelled out: engine.tiles imports this module.
REG_4x4: Tiles = {"core": "reg", "WG_X": 8, "WG_Y": 8, "TM": 4, "TN": 4, "RUNTIME_DIMS": 1}
TILED_64: Tiles = {"WG_X": 8, "WG_Y": 8, "TM": 8, "TN": 8, "BK": 16}
TILED_128x64: Tiles = {"WG_X": 16, "WG_Y": 8, "TM": 8, "TN": 8, "BK": 8}  # 128 threads
REG_4x4_128: Tiles = {"core": "reg", "WG_X": 16, "WG_Y": 8, "TM": 4, "TN": 4, "RUNTIME_DIMS": 1}

LAVAPIPE_MEASURED = (
    "`webmp bench --models gpt --tune --tune-budget 300` on a 2-vCPU AMD EPYC (shared with other "
    "jobs), Mesa 25.0.7 lavapipe (LLVM 15.0.6, 256 bits), 2026-12-03 (the issue 28 pass): every one "
    "of the GPT's shape classes on the native f16 and fp32 paths chose the subgroup core with 16-row "
    "blocks, 8 or 4 columns wide (which of the two moved with the host's load, within a few %, but "
    "at N <= 32 the 4-wide blocks won by 1.6-3.9x: attention's P·V and its gradient); its row "
    "kernels a thread a row (10.5 ms against 109 ms a workgroup a row, the four kernels at the GPT's "
    "shapes) and its backward pass on transposed weights (6.05 against 7.72 ms). `webmp train "
    "--model gpt`: 327 ms a step on the old defaults (the register core's 4 x 4 blocks), 171.5 ms "
    "tuned (the same run of the issue)"
)

LAVAPIPE = ShippedTiles(
    "lavapipe",
    small=REG_SG_16x8,
    large=REG_SG_16x8,
    narrow=REG_SG_16x4,
    rows="thread",
    weights="transposed",
    measured=LAVAPIPE_MEASURED,
    why="the subgroup core's 16 x 8 blocks, 16 x 4 for products of at most 32 columns (attention's): "
    "what `webmp bench --tune` chose for nearly every shape class",
)
LAVAPIPE_NO_SUBGROUPS = ShippedTiles(
    "lavapipe",
    small=REG_16x4,
    large=REG_16x4,
    rows="thread",
    weights="transposed",
    measured=LAVAPIPE_MEASURED,
    why="without the subgroups feature, the register core's 16 x 4 blocks (the tuner's best without it)",
)
SWIFTSHADER_MEASURED = (
    "python3 scripts of webmp.tune.native (tune_shapes over the GPT's and the digits MLP's classes, "
    "240 s; then MatmulCase timings of the GPT's largest products) through wgpu-py 0.32 on "
    "Chromium's own libvk_swiftshader.so (VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json: "
    "no shader-f16, so the emulated f16 path and fp32), a 2-vCPU AMD EPYC shared with other jobs, "
    "2026-12-03: of the 18 classes where the register core's 16 x 4 blocks were timed, they won 11 "
    "(1.25-5.9x the subgroup core's 16 x 8), its 8 x 8 blocks 2, the subgroup core 5 by at most "
    "1.25x; at the GPT's four largest products 0.72-0.92 GFLOP/s against 0.34-0.49 for the subgroup "
    "core and 0.51-0.73 for the old default (4 x 4 blocks; SwiftShader's subgroup operations are "
    "slow); its row kernels a thread a row (101 against 836 ms); the "
    "weights as stored (178 against 180 ms transposed)"
)
SWIFTSHADER = ShippedTiles(
    "swiftshader",
    small=REG_16x4,
    large=REG_16x4,
    rows="thread",
    weights="as_stored",
    measured=SWIFTSHADER_MEASURED,
    why="the register core's 16 x 4 blocks, with or without the subgroups feature (its subgroup "
    "operations are slow)",
)
SWIFTSHADER_NO_SUBGROUPS = SWIFTSHADER

# PCI vendor ids (and the names a browser reports) of the GPU vendors the rule knows, with the
# subgroup (warp, wave, SIMD) widths their documentation gives, for adapters that report none.
GPU_VENDORS: dict[str, tuple[tuple[int, ...], tuple[str, ...], int]] = {
    "nvidia": ((0x10DE,), ("nvidia",), 32),  # a warp is 32 threads (CUDA programming guide)
    "amd": ((0x1002, 0x1022), ("amd", "ati", "radeon"), 64),  # GCN wave64; RDNA also wave32
    "intel": ((0x8086,), ("intel",), 32),  # SIMD8/16/32 (Intel GPU optimization guides)
    "apple": ((0x106B,), ("apple",), 32),  # a SIMD-group is 32 threads (Metal feature set tables)
    "qualcomm": ((0x5143,), ("qualcomm", "adreno"), 128),  # Adreno waves of 64 or 128 fibers
    "arm": ((0x13B5,), ("arm", "mali"), 16),  # Mali Valhall warps of 16 threads
}
GPU_RULE = (
    "heuristic from documented GPU facts, not measured (no GPU here): the tiled core's "
    "workgroup-memory tiles, 64 x 64 for large products, the register core's 32 x 32 blocks (more "
    "workgroups to fill the GPU) for small ones; workgroups of 64 threads, a multiple of every "
    "documented subgroup width up to 64 (NVIDIA and Apple 32, AMD 32/64, Intel 8-32, Mali 16), 128 "
    "where the subgroups are wider (Adreno's 128); a workgroup a row for the row kernels (barriers "
    "are cheap on a GPU, a thread a row leaves lanes idle); the weights as stored. `webmp bench "
    "--tune` measures and overrides it"
)


def gpu_vendor(info: AdapterInfo) -> str:
    """The vendor a GPU adapter's id or name says ("other" when none of GPU_VENDORS')."""
    for vendor, (ids, _names, _) in GPU_VENDORS.items():
        if info.vendor_id in ids:
            return vendor
    words = f"{info.vendor} {info.device} {info.description}".lower()
    for vendor, (_, names, _) in GPU_VENDORS.items():
        if any(n in words.split() or n in info.vendor.lower() for n in names):
            return vendor
    return "other"


def gpu_entry(info: AdapterInfo) -> ShippedTiles:
    """GPU_RULE for one GPU: its subgroup width (reported, else its vendor's documented one) sets
    the workgroup size."""
    vendor = gpu_vendor(info)
    width = info.subgroup_max_size or (GPU_VENDORS[vendor][2] if vendor in GPU_VENDORS else 32)
    wide = width > 64
    arch = f"/{info.architecture}" if info.architecture else ""
    return ShippedTiles(
        f"gpu/{vendor}{arch}",
        small=REG_4x4_128 if wide else REG_4x4,
        large=TILED_128x64 if wide else TILED_64,
        why=f"{GPU_RULE}; subgroup width {width}"
        + ("" if info.subgroup_max_size else f" ({vendor}'s documented width: the adapter reported none)"),
    )


def adapter_class(info: AdapterInfo) -> str | None:
    """'lavapipe', 'swiftshader', 'gpu', or None (no shipped entry: the defaults)."""
    text = info.text()
    if "llvmpipe" in text or "lavapipe" in text:
        return "lavapipe"
    if "swiftshader" in text:
        return "swiftshader"
    if info.adapter_type.lower() in ("discretegpu", "integratedgpu", "discrete-gpu", "integrated-gpu"):
        return "gpu"
    if info.adapter_type.lower() in ("", "unknown") and gpu_vendor(info) != "other":
        return "gpu"  # a browser reports no type; a known GPU vendor's name is one
    return None


def shipped_tiles(info: AdapterInfo | None) -> ShippedTiles | None:
    """The shipped entry of the adapter's class, for its features; None where no class fits."""
    if info is None:
        return None
    cls = adapter_class(info)
    if cls == "lavapipe":
        return LAVAPIPE if info.subgroups else LAVAPIPE_NO_SUBGROUPS
    if cls == "swiftshader":
        return SWIFTSHADER if info.subgroups else SWIFTSHADER_NO_SUBGROUPS
    if cls == "gpu":
        return gpu_entry(info)
    return None
