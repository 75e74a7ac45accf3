"""The subgroup layout a plan may rely on, and the runtime's check of it.

The subgroup matmul core (shaders/matmuls/matmul_reg_a_sg.wgsl) shares op(A)'s words between the
threads of a subgroup that compute the same rows of C. Where a subgroup is not such a run of
threads it falls back to a second K loop, chosen at run time; that loop doubles the kernel's
compile time (lavapipe compiles a kernel at its first dispatch: the GPT's 10 subgroup matmuls
took 4.9 s of one core with both loops, 2.65 s with one, with no shader cache). WebGPU promises nothing
about subgroup sizes or layout, and wgpu-py reports lavapipe's range as 4 .. 128, but lavapipe's
subgroup is its SIMD width (the "256 bits" in its device name: 8 lanes of 32 bits) over
consecutive local invocation indices, x fastest. Where the plan's adapter says so
(`subgroup_width`), the matmuls of tiles for which that layout holds (`shares_rows`) take
SG_LAYOUT = 1 and compile k_loop alone; before the runtime makes any pipeline with it,
`check_layout` dispatches shaders/matmuls/sg_layout_probe.wgsl once per device and workgroup shape
and refuses the plan if a subgroup there is anything else.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .adapters import AdapterInfo, adapter_class

SG_CORE = "reg_sg"
_BITS = re.compile(r"\b(\d+) bits\b")


def subgroup_width(info: AdapterInfo | None) -> int:
    """The adapter's subgroup width where it is known to be fixed and laid out over consecutive
    invocations (lavapipe: its SIMD width, from its device name), else 0."""
    if info is None or not info.subgroups or adapter_class(info) != "lavapipe":
        return 0
    m = _BITS.search(info.device)
    return int(m.group(1)) // 32 if m else 0


def shares_rows(width: int, tiles: Mapping[str, Any]) -> bool:
    """Whether, with subgroups of `width` consecutive invocations, every subgroup of the subgroup
    core's workgroup (WG_X x WG_Y threads, TM rows each) is threads of one row of C, at least
    min(TM, 8) of them: k_loops' run-time verdict, known in advance."""
    return width > 0 and tiles["WG_X"] % width == 0 and width >= min(tiles["TM"], 8)


Found = dict[tuple[int, int], tuple[int, bool]]  # (WG_X, WG_Y) -> what its probe found
_checked: weakref.WeakKeyDictionary[Any, Found] = weakref.WeakKeyDictionary()  # per device


def _probe(device: Any, wg_x: int, wg_y: int) -> tuple[int, bool]:
    """The fewest active lanes of a subgroup in one WG_X x WG_Y workgroup, and whether every
    subgroup's threads share their local_invocation_id.y."""
    import wgpu

    from .wgsl import join_sources

    n = wg_x * wg_y
    out = device.create_buffer(size=8 * n, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    module = device.create_shader_module(code=join_sources(["sg_layout_probe.wgsl"]), label="sg_layout_probe")
    pipeline = device.create_compute_pipeline(
        layout="auto",
        compute={
            "module": module,
            "entry_point": "sg_layout_probe",
            "constants": {"WG_X": wg_x, "WG_Y": wg_y},
        },
    )
    group = device.create_bind_group(
        layout=pipeline.get_bind_group_layout(0), entries=[{"binding": 0, "resource": {"buffer": out}}]
    )
    enc = device.create_command_encoder()
    cpass = enc.begin_compute_pass()
    cpass.set_pipeline(pipeline)
    cpass.set_bind_group(0, group)
    cpass.dispatch_workgroups(1, 1, 1)
    cpass.end()
    device.queue.submit([enc.finish()])
    got = np.frombuffer(device.queue.read_buffer(out), np.uint32).reshape(n, 2)
    out.destroy()
    return int(got[:, 0].min()), bool(got[:, 1].all())


def check_layout(device: Any, kernels: Iterable[Mapping[str, Any]]) -> None:
    """RuntimeError unless every kernel that takes SG_LAYOUT = 1 runs where its subgroups are what
    the plan assumed (one probe dispatch per device and workgroup shape, remembered)."""
    for k in kernels:
        c = k["constants"]
        if not c.get("SG_LAYOUT"):
            continue
        key = (int(c["WG_X"]), int(c["WG_Y"]))
        found = _checked.setdefault(device, {})
        if key not in found:
            found[key] = _probe(device, *key)
        lanes, rows = found[key]
        if not (rows and lanes >= min(int(c["TM"]), 8)):
            raise RuntimeError(
                f"kernel {k['name']} was planned for subgroups of consecutive threads of one row of C, at "
                f"least {min(int(c['TM']), 8)} wide (SG_LAYOUT = 1), but on this device a "
                f"{key[0]} x {key[1]} workgroup's subgroups have {lanes}+ lanes"
                + ("" if rows else " spanning several rows")
                + ": build the plan for this adapter (its TileTable from this device's adapter info)"
            )
