"""wgpu-py runtime: creates what a plan lists and replays its programs. It decides nothing.

The twin of web/runner.js: a device (`GPU`, with the adapter's real limits), the plan's check
(its required_features and required_limits), the replay of its programs and the reads of its
buffers (`Runtime`; the state words by the plan's state.fields). The loops over a runtime are
webmp/train/loop.py's (training, on plan.schedule) and webmp/sample/replay.py's (sampling).

A training step is one command encoder with one compute pass holding the plan's dispatch list,
submitted once. Metrics stay in a GPU ring buffer; `run` copies it to a reused staging buffer and
maps it only when asked to (every log_every steps).
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, cast

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # silences the Vulkan loader in headless shells

import wgpu

from .adapters import AdapterInfo
from .plan import HistogramSpec, KernelPlan
from .state import decode_state
from .subgroups import check_layout

NO_ADAPTER = (
    "No WebGPU adapter was found. On a machine without a GPU install a Vulkan driver "
    "(Debian: apt-get install -y mesa-vulkan-drivers, which provides lavapipe with "
    "shader-f16), or run `make setup`."
)

NATIVE_BACKENDS = ("Vulkan", "Metal", "D3D12")  # wgpu's OpenGL backend lacks shader-f16, among others


def old_lavapipe_note(info: dict) -> str | None:
    """A note for the run's log when the adapter is Mesa's lavapipe before Mesa 25 (Debian 12's own
    Mesa is 22.3), which runs webmp's kernels several times slower than Mesa 25's; None otherwise."""
    found = re.match(r"Mesa (\d+)\.(\d+)", str(info.get("description", "")))
    if "llvmpipe" not in str(info.get("device", "")) or not found or int(found[1]) >= 25:
        return None
    return (
        f"this lavapipe is Mesa {found[1]}.{found[2]}; Mesa 25 runs webmp several times faster "
        "(Debian 12: from bookworm-backports, which scripts/setup.sh installs)"
    )


def _webgpu_limit_name(name: str) -> str:
    """wgpu-py's name of a limit (max-buffer-size) in WebGPU's JavaScript spelling (maxBufferSize),
    the one plans' required_limits use."""
    first, *rest = name.split("-")
    return first + "".join(w.upper() if w[0].isdigit() else w.capitalize() for w in rest)


class GPU:
    """One adapter and device, with the adapter's real limits requested (all of them, as the page
    does: a plan's required_limits are checked against them by name); the best adapter unless
    `adapter` is given (gpu_for_rank)."""

    def __init__(self, features: list[str] | None = None, power_preference="high-performance", adapter=None):
        try:
            if adapter is None:
                adapter = wgpu.gpu.request_adapter_sync(power_preference=power_preference)
        except Exception as e:  # wgpu-native raises when no Vulkan/Metal/DX12 driver exists
            raise RuntimeError(f"{NO_ADAPTER} ({e})") from None
        if adapter is None:
            raise RuntimeError(NO_ADAPTER)
        self.adapter = adapter
        self.has_f16 = "shader-f16" in adapter.features
        wanted = set(features or [])
        if self.has_f16:
            wanted.add("shader-f16")
        if "timestamp-query" in adapter.features:
            wanted.add("timestamp-query")
        self.has_subgroups = "subgroup" in adapter.features  # wgpu-py's name of WebGPU's "subgroups"
        if self.has_subgroups:
            wanted.add("subgroup")
        missing = wanted - set(adapter.features)
        if missing:
            raise RuntimeError(f"the WebGPU adapter lacks required features: {sorted(missing)}")
        self.limits = {_webgpu_limit_name(k): v for k, v in adapter.limits.items()}  # the plans' names
        self.device = adapter.request_device_sync(
            required_features=sorted(wanted), required_limits=dict(adapter.limits)
        )
        self.features = set(wanted)
        self.runtime_cache: OrderedDict[str, Runtime] = OrderedDict()  # webmp.testing.probe's runtimes
        info = adapter.info
        self.backend = str(info.get("backend_type", "") or "unknown backend")
        detail = "; ".join(x for x in (info.get("description", ""), self.backend) if x)
        self.name = f"{info.get('device', '?')} ({detail})"  # every run's log and summary name the backend
        self.driver_note = old_lavapipe_note(dict(info))
        # what the shipped tile tables' class rule reads (webmp.engine.adapters)
        self.info = AdapterInfo.from_wgpu(dict(info), adapter.features)
        if self.backend not in NATIVE_BACKENDS:
            warnings.warn(
                f"webmp: the WebGPU adapter runs on {self.backend}, not Vulkan, Metal or D3D12 "
                f"({self.name}): expect emulated f16 and slower kernels; "
                "on Debian install mesa-vulkan-drivers",
                stacklevel=2,
            )

    def check_plan(self, plan: KernelPlan) -> None:
        if "shader-f16" in plan["required_features"] and not self.has_f16:
            raise RuntimeError(
                "the plan uses native f16 but this adapter lacks 'shader-f16'; build it with f16='emulated'"
            )
        if "subgroups" in plan["required_features"] and not self.has_subgroups:
            raise RuntimeError(
                "the plan's matmul tiles use subgroups but this adapter lacks them; build it with tiles "
                "for this adapter (TileTable.for_adapter) or the defaults"
            )
        for key, need in plan["required_limits"].items():
            have = self.limits.get(key, 0)
            if need > have:
                worst = (
                    max(plan["buffers"], key=lambda b: b["bytes"])
                    if key != "maxStorageBuffersPerShaderStage"
                    else None
                )
                what = f" (largest buffer: {worst['name']}, {worst['bytes']} bytes)" if worst else ""
                # the three-kernel attention's scores (webmp.models.gpt's S, net_seq's attention_S_h*)
                scores = worst is not None and (
                    worst["name"] == "S" or worst["name"].startswith("attention_S_")
                )
                hint = " (or --attention fused: no context-squared buffers)" if scores else ""
                raise RuntimeError(
                    f"the plan needs {key} = {need} but this adapter allows {have}{what}; "
                    f"use a smaller model or batch size{hint}"
                )


@functools.cache
def default_gpu() -> GPU:
    """The process's shared adapter and device, created on first use."""
    return GPU()


def gpu_for_rank(rank: int) -> GPU:
    """Data-parallel rank `rank`'s device: adapter rank mod count of the Vulkan, Metal or D3D12
    adapters (each GPU once; a one-GPU host shares its GPU between the ranks)."""
    try:
        adapters = [
            a for a in wgpu.gpu.enumerate_adapters_sync() if a.info["backend_type"] in NATIVE_BACKENDS
        ]
    except Exception as e:
        raise RuntimeError(f"{NO_ADAPTER} ({e})") from None
    if not adapters:
        raise RuntimeError(NO_ADAPTER)
    return GPU(adapter=adapters[rank % len(adapters)])


def make_pipeline(dev, k: Mapping[str, Any], modules: dict, bind_layouts: dict) -> tuple[Any, Any]:
    """Kernel `k`'s compute pipeline on `dev` and its bind group layout; shader modules and layouts
    shared through `modules` and `bind_layouts` (keyed by sources and by binding signature)."""
    from .wgsl import join_sources

    src = tuple(k["sources"])
    if src not in modules:
        modules[src] = dev.create_shader_module(code=join_sources(src), label=k["sources"][-1])
    sig = tuple((b["binding"], b["type"]) for b in k["bindings"])
    if sig not in bind_layouts:
        bgl = dev.create_bind_group_layout(
            entries=[
                {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": t}} for i, t in sig
            ]
        )
        bind_layouts[sig] = (bgl, dev.create_pipeline_layout(bind_group_layouts=[bgl]))
    bgl, layout = bind_layouts[sig]
    pipeline = dev.create_compute_pipeline(
        layout=layout,
        label=k["name"],
        compute={"module": modules[src], "entry_point": k["entry"], "constants": k["constants"]},
    )
    return pipeline, bgl


class _Made(dict):
    """A dict whose missing keys are made on first use, by `make(key)`."""

    def __init__(self, make):
        super().__init__()
        self.make = make

    def __missing__(self, key):
        value = self[key] = self.make(key)
        return value


class Runtime:
    """A plan's buffers, pipelines and programs on a device. With `first` (program names) only those
    programs' pipelines are made here, every other one at its first use (a first training step need
    not wait for the evaluation's kernels: the page's runner makes them in the background); without,
    all of them."""

    def __init__(
        self,
        plan: KernelPlan,
        blob: bytes,
        gpu: GPU | None = None,
        first: Sequence[str] | None = None,
        compile_helpers: int = 0,
    ):
        self.plan = plan
        self.gpu = gpu or default_gpu()
        self.gpu.check_plan(plan)
        dev = self.device = self.gpu.device
        check_layout(dev, plan["kernels"])  # before any pipeline that relies on it (SG_LAYOUT)
        usage = (  # UNIFORM: small buffers some kernels bind as uniforms (the matmuls' sizes)
            wgpu.BufferUsage.STORAGE
            | wgpu.BufferUsage.UNIFORM
            | wgpu.BufferUsage.COPY_SRC
            | wgpu.BufferUsage.COPY_DST
        )
        self.buffers = {}
        for b in plan["buffers"]:
            buf = dev.create_buffer(size=b["bytes"], usage=usage, label=b["name"])
            if b["init"] is not None:
                off, n = b["init"]["offset"], b["init"]["bytes"]
                dev.queue.write_buffer(buf, 0, blob[off : off + n])
            self.buffers[b["name"]] = buf
        self.kernels = {k["name"]: k for k in plan["kernels"]}
        self.modules: dict[tuple[str, ...], Any] = {}
        self.bind_layouts: dict[tuple[tuple[int, str], ...], tuple[Any, Any]] = {}
        self.layouts: dict[str, Any] = {}
        self.pipelines: dict[str, Any] = _Made(self._pipeline)
        self.programs: dict[str, list] = _Made(
            lambda name: [self._prepare(d) for d in plan["programs"][name]]
        )
        made_first = list(plan["programs"]) if first is None else [p for p in first if p in plan["programs"]]
        # what precompile did: the first programs' kernels compiled before their first run, on this
        # device and `compile_helpers` helper devices at once (where the driver compiles at first dispatch)
        self.precompiled = self.precompile(made_first, compile_helpers) if compile_helpers > 0 else None
        for name in made_first:
            self.programs[name]
        if first is None:
            for name in self.kernels:
                self.pipelines[name]
        m = plan["metrics"]
        self.metrics_bytes = self.buffers[m["buffer"]].size
        # a training plan's gradient-range lens: its counts are staged after the ring, in the same map
        lens = plan.get("histograms")
        self.lens_buffer: str | None = lens["buffer"] if lens else None  # type: ignore[index]
        self.lens_bytes = self.buffers[self.lens_buffer].size if self.lens_buffer else 0
        self.last_histograms: bytes | None = None  # the counts read by the last run(..., histograms=True)
        self.staging = dev.create_buffer(
            size=self.metrics_bytes + self.lens_bytes,
            usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST,
        )
        self.readbacks = 0
        self.submits = 0
        self.gather_staging = None  # read_gathered's staging buffer, made on first use

    def _pipeline(self, name: str):
        pipeline, self.layouts[name] = make_pipeline(
            self.device, self.kernels[name], self.modules, self.bind_layouts
        )
        return pipeline

    def precompile(self, programs: Sequence[str], helpers: int) -> dict[str, Any]:
        """Compiles the programs' kernels before their first run, on this device and `helpers` helper
        devices at once (webmp.engine.precompile: where the driver compiles at first dispatch)."""
        from .precompile import precompile

        names = [d["kernel"] for p in programs for d in self.plan["programs"][p]]

        def helper_device():  # another device of the run's adapter, with the same features
            return GPU(adapter=self.gpu.adapter).device

        def pipeline(name: str):
            return self.pipelines[name], self.layouts[name]

        return precompile(
            self.device, pipeline, self.kernels, names, [helper_device] * helpers, make_pipeline
        )

    def _prepare(self, d):
        pipeline = self.pipelines[d["kernel"]]  # made (with its layout) at its first use
        bg = self.device.create_bind_group(
            layout=self.layouts[d["kernel"]],
            entries=[
                {"binding": i, "resource": {"buffer": self.buffers[name]}} for i, name in enumerate(d["bind"])
            ],
        )
        return pipeline, bg, d["workgroups"]

    def encode(self, encoder, program: str):
        cpass = encoder.begin_compute_pass()
        for pipeline, bg, (x, y, z) in self.programs[program]:
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, bg)
            cpass.dispatch_workgroups(x, y, z)
        cpass.end()

    def run(
        self, program: str, read_metrics: bool = False, repeat: int = 1, histograms: bool = False
    ) -> bytes | None:
        """One submit of `program` (`repeat` times over, one compute pass each, in one command
        buffer: a sampling plan's tokens); with read_metrics, also copies and maps the metrics ring.
        With histograms: where `program` is the one the plan's gradient-range lens replaces, its
        last run is the lens's program (the same step, counting); with read_metrics the counts come
        back in the same map, as `last_histograms`."""
        lens = cast("HistogramSpec | None", self.plan.get("histograms"))  # training plans have one
        counts = histograms and lens is not None and program == lens["replaces"]
        if histograms and not (counts or (read_metrics and self.lens_buffer)):
            raise ValueError(f"the plan's lens neither counts in {program!r} nor is read with metrics")
        enc = self.device.create_command_encoder()
        for i in range(repeat):
            self.encode(enc, lens["program"] if counts and lens and i == repeat - 1 else program)
        if read_metrics:
            enc.copy_buffer_to_buffer(
                self.buffers[self.plan["metrics"]["buffer"]], 0, self.staging, 0, self.metrics_bytes
            )
        if histograms and read_metrics and self.lens_buffer:
            enc.copy_buffer_to_buffer(
                self.buffers[self.lens_buffer], 0, self.staging, self.metrics_bytes, self.lens_bytes
            )
        self.device.queue.submit([enc.finish()])
        self.submits += 1
        if not read_metrics:
            return None
        self.readbacks += 1
        self.staging.map_sync(wgpu.MapMode.READ)
        try:
            raw = bytes(self.staging.read_mapped())
        finally:
            self.staging.unmap()
        self.last_histograms = raw[self.metrics_bytes :] if histograms else None
        return raw[: self.metrics_bytes]

    def read_gathered(self, regions: list[tuple[str, int, int]], nbytes: int) -> bytes:
        """One copy and map of several buffers into one reused staging buffer of `nbytes` bytes:
        `regions` are (buffer, byte offset in the staging buffer, bytes from the buffer's start).
        Bytes no region covers keep what they held (zeros: nothing else writes them)."""
        staging = self.gather_staging
        if staging is None or staging.size != nbytes:
            staging = self.gather_staging = self.device.create_buffer(
                size=nbytes, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
            )
        enc = self.device.create_command_encoder()
        for name, offset, n in regions:
            enc.copy_buffer_to_buffer(self.buffers[name], 0, staging, offset, n)
        self.device.queue.submit([enc.finish()])
        staging.map_sync(wgpu.MapMode.READ)
        try:
            return bytes(staging.read_mapped())
        finally:
            staging.unmap()

    def read(self, name: str) -> bytes:
        return bytes(self.device.queue.read_buffer(self.buffers[name]))

    def write(self, name: str, data: bytes) -> None:
        if len(data) > self.buffers[name].size:
            raise ValueError(f"{len(data)} bytes do not fit buffer {name} ({self.buffers[name].size})")
        self.device.queue.write_buffer(self.buffers[name], 0, data)

    def read_state(self) -> dict[str, float | int]:
        """The state words, {field: value} by the plan's state.fields."""
        state = self.plan["state"]
        return decode_state(self.read(state["buffer"]), state["fields"])

    def sync(self) -> None:
        self.device.queue.read_buffer(self.buffers[self.plan["state"]["buffer"]])
