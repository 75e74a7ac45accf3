"""A first step's kernels compiled on several CPU cores at once, where the driver compiles a
pipeline's shaders only when it is first dispatched.

Mesa's lavapipe (a CPU) compiles each kernel with LLVM on its queue's thread the first time it runs:
0.05-1 s a kernel (the matmul cores' register blocks most), one after another, so a first step
on a fresh machine waits seconds while the other cores idle. A dispatch of no workgroups compiles
too, and the driver keeps what it compiled in its on-disk shader cache (Mesa's, keyed by the
shader), where another device of the same adapter finds it. So helper devices (each with a queue
thread of its own) and the run's own device take the kernels from opposite ends of one list, each
dispatching a kernel with no workgroups and waiting; the run's first step then finds every kernel
compiled, its own in memory and the helpers' on disk. Nothing the step computes changes: the
dispatches run no work, on bind groups of scratch buffers.

The page does the same for its adapter (web/runner.js `precompile`). Off where it cannot help: an
adapter that compiles at pipeline creation (a real GPU's driver), one core, or Mesa's shader cache
disabled ($MESA_SHADER_CACHE_DISABLE); $WEBMP_COMPILE_HELPERS sets the number of helper devices
(0: none).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .adapters import AdapterInfo, adapter_class

SCRATCH_BYTES = 65536  # each binding's scratch buffer: more than any kernel's fixed-size struct needs
MAX_HELPERS = 3


def first_dispatch_compiler(info: AdapterInfo, features: Iterable[str]) -> str | None:
    """Why this adapter's driver compiles a kernel at its first dispatch; None where it compiles at
    pipeline creation (a GPU's driver, SwiftShader), where helper devices would only compile twice."""
    cls = adapter_class(info)
    if cls == "lavapipe":
        return "lavapipe compiles a kernel at its first dispatch"
    if cls == "swiftshader" and "shader-f16" in features:
        # SwiftShader has no shader-f16: this is lavapipe behind a layer that reports SwiftShader's
        # ids (how the test harness's Chromium gets shader-f16 on a CPU)
        return (
            "a browser's 'SwiftShader' with shader-f16 is lavapipe, which compiles a kernel at its first "
            "dispatch"
        )
    return None


def cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def helpers_for(info: AdapterInfo, features: Iterable[str], cores: int | None = None) -> tuple[int, str]:
    """How many helper devices compile beside the run's own (at most; `cores`: the CPU cores the
    driver has, unknown for a page's), and why that many."""
    env = os.environ.get("WEBMP_COMPILE_HELPERS")
    if env is not None:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(
                f"WEBMP_COMPILE_HELPERS={env!r}: expected a number of helper devices (0: none)"
            ) from None
        if n < 0:
            raise ValueError(f"WEBMP_COMPILE_HELPERS={env!r}: expected 0 or more")
        return n, "WEBMP_COMPILE_HELPERS"
    why = first_dispatch_compiler(info, features)
    if why is None:
        return 0, "the driver compiles at pipeline creation"
    if os.environ.get("MESA_SHADER_CACHE_DISABLE", "").lower() in ("1", "true", "yes"):
        return 0, "Mesa's shader cache is disabled (MESA_SHADER_CACHE_DISABLE)"
    if cores is None:
        return MAX_HELPERS, why
    if cores < 2:
        return 0, "one CPU core"
    return min(cores - 1, MAX_HELPERS), f"{why}; {cores} CPU cores"


class _Device:
    """One device's side of the compiling: its kernels' pipelines (`pipeline(name)`: the pipeline and
    its bind group layout) dispatched with no workgroups on scratch buffers, one kernel compiling
    while the next one's pipeline is made."""

    def __init__(
        self,
        device: Any,
        pipeline: Callable[[str], tuple[Any, Any]],
        kernels: Mapping[str, Mapping[str, Any]],
    ):
        self.device, self.pipeline, self.kernels = device, pipeline, kernels
        self.scratch: list[Any] = []
        self.pending = False

    def _commands(self, name: str) -> Any:
        import wgpu  # here: the server decides the page's helpers with this module, and loads no wgpu

        pipeline, layout = self.pipeline(name)
        bindings = self.kernels[name]["bindings"]
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_SRC
        while len(self.scratch) < len(bindings):  # one per binding: writable bindings may not alias
            self.scratch.append(self.device.create_buffer(size=SCRATCH_BYTES, usage=usage))
        group = self.device.create_bind_group(
            layout=layout,
            entries=[
                {
                    "binding": b["binding"],
                    "resource": {"buffer": self.scratch[i], "offset": 0, "size": SCRATCH_BYTES},
                }
                for i, b in enumerate(bindings)
            ],
        )
        enc = self.device.create_command_encoder()
        cpass = enc.begin_compute_pass()
        cpass.set_pipeline(pipeline)
        cpass.set_bind_group(0, group)
        cpass.dispatch_workgroups(0, 0, 0)
        cpass.end()
        return enc.finish()

    def compile(self, name: str) -> None:
        commands = self._commands(name)  # while the last kernel compiles on the queue's thread
        self.wait()
        self.device.queue.submit([commands])
        self.pending = True

    def wait(self) -> None:
        if self.pending:  # a read waits for the submits (wgpu-py 0.32's on_submitted_work_done_sync fails)
            self.device.queue.read_buffer(self.scratch[0], 0, 4)
            self.pending = False


MakePipeline = Callable[[Any, Mapping[str, Any], dict, dict], tuple[Any, Any]]


def precompile(
    device: Any,
    pipeline: Callable[[str], tuple[Any, Any]],
    kernels: Mapping[str, Mapping[str, Any]],
    names: Sequence[str],
    helper_devices: Sequence[Callable[[], Any]],
    make_pipeline: MakePipeline,
) -> dict[str, Any]:
    """Compiles the kernels `names` (in their order of first use) on `device` (whose pipeline and
    bind group layout `pipeline(name)` gives) and on a helper device made by each of
    `helper_devices` (their pipelines made by make_pipeline(device, kernel, modules, layouts));
    what it did, for the run's log."""
    t0 = time.perf_counter()
    todo = deque(dict.fromkeys(names))
    lock = threading.Lock()
    done: list[int] = [0] * (len(helper_devices) + 1)
    errors: list[BaseException] = []

    def take(front: bool) -> str | None:
        with lock:
            if not todo:
                return None
            return todo.popleft() if front else todo.pop()

    def work(i: int, side: _Device) -> None:
        while (name := take(front=i == 0)) is not None:
            side.compile(name)
            done[i] += 1
        side.wait()

    def helper_work(i: int) -> None:
        try:
            dev = helper_devices[i - 1]()
            modules: dict = {}
            layouts: dict = {}
            work(i, _Device(dev, lambda n: make_pipeline(dev, kernels[n], modules, layouts), kernels))
        except Exception as e:  # a helper's failure costs only time: the run's device compiles the rest
            errors.append(e)

    threads = [
        threading.Thread(target=helper_work, args=(i + 1,), daemon=True) for i in range(len(helper_devices))
    ]
    for t in threads:
        t.start()
    work(0, _Device(device, pipeline, kernels))
    for t in threads:
        t.join()
    return {
        "kernels": len(dict.fromkeys(names)),
        "helpers": len(helper_devices),
        "by_helpers": sum(done[1:]),
        "seconds": time.perf_counter() - t0,
        "helper_errors": [f"{type(e).__name__}: {e}" for e in errors],
    }
