"""WGSL sources: where they live, how a kernel's sources are joined, and its binding layout.

A kernel is a list of files from shaders/ joined in order (a precision prelude, common.wgsl, the
family's file(s)). Bindings are read from the `@group(0) @binding(i) var<...>` declarations, so the
plan can carry explicit bind group layouts that both runtimes create without further logic.
"""
from __future__ import annotations

import re
from functools import lru_cache

from .resources import SHADER_DIR

PRELUDES = {"native": "prelude_native.wgsl", "emulated": "prelude_emulated.wgsl", "fp32": "prelude_f32.wgsl"}

_BINDING = re.compile(
    r"@group\(0\)\s*@binding\((\d+)\)\s*var<storage,\s*(read|read_write)>\s*(\w+)\s*:\s*([^;]+);")


@lru_cache(maxsize=None)
def read_shader(name: str) -> str:
    path = (SHADER_DIR / name).resolve()
    if path.parent != SHADER_DIR or not path.is_file():
        raise FileNotFoundError(f"no shader {name!r} in {SHADER_DIR}")
    return path.read_text()


def join_sources(sources: list[str] | tuple[str, ...]) -> str:
    return "\n".join(read_shader(s) for s in sources)


def element_kind(wgsl_type: str) -> str:
    """'h' for activation-format words, else the scalar type ('f32', 'u32', 'atomic', 'State')."""
    t = wgsl_type.replace(" ", "")
    if t == "array<HW>":
        return "h"
    if t.startswith("array<atomic<"):
        return "atomic"
    m = re.fullmatch(r"array<(\w+)>", t)
    return m.group(1) if m else t


@lru_cache(maxsize=None)
def parse_bindings(sources: tuple[str, ...]) -> tuple[dict, ...]:
    found = {}
    for name in sources:
        for m in _BINDING.finditer(read_shader(name)):
            idx = int(m.group(1))
            if idx in found:
                raise ValueError(f"binding {idx} declared twice in {sources}")
            found[idx] = {
                "binding": idx,
                "name": m.group(3),
                "type": "read-only-storage" if m.group(2) == "read" else "storage",
                "element": element_kind(m.group(4)),
            }
    if sorted(found) != list(range(len(found))):
        raise ValueError(f"bindings of {sources} are not 0..n-1: {sorted(found)}")
    return tuple(found[i] for i in range(len(found)))
