"""Run any kernel from shaders/ on numpy inputs and get numpy outputs back.

The tests check shader outputs with it, and it is a tool for debugging numerics by hand:

    from webmp import ops
    from webmp.testing.probe import run_kernel, run_matmul, run_op
    out = run_matmul("matmul_fwd", A, W, bias=b, path="emulated")   # {"C": ..., "flags": ...}
    out = run_op(ops.colsum, {"G": g}, {"out": (7,)}, M=5, N=7)     # a launcher, as models use it
    out = run_kernel(["columns.wgsl", "colsum.wgsl"], "colsum", {"M": 5, "N": 7}, inputs={"G": g},
                     outputs={"out": (7,)}, workgroups=1)          # any entry point, grid by hand

Each call builds a one-program plan with `webmp.engine.plan.PlanBuilder` and executes it with
`webmp.engine.runtime.Runtime`, so kernels run through exactly the code path training uses (the last 32
runtimes are kept and reused for identical plans: compiling pipelines is the slow part). Every binding
of the kernel is a buffer named like the binding (run_op: the buffer the launcher binds to it); its
element kind (from `webmp.engine.wgsl.parse_bindings`) says how numpy data is converted:
  'h'               2-D float arrays in the activation layout (`pack_h` / `unpack_h`), returned as float32
  'f32'             float32 arrays
  'u32', 'atomic'   uint32 arrays
  'State'           a {field: value} dict over `webmp.engine.state.STATE_FIELDS` (missing fields are 0) or an
                    array of state words; returned as a dict
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ops
from ..engine.plan import KernelPlan, PlanBuilder, pack_h, unpack_h
from ..engine.runtime import GPU, Runtime, default_gpu
from ..engine.state import STATE_FIELDS, decode_state, encode_state
from ..engine.tiles import DEFAULT_TILES
from ..engine.wgsl import PRELUDES, parse_bindings

PROGRAM = "inspect"
_METRICS = "_metrics"  # Runtime stages a metrics buffer; these plans never read it
_CACHE_SIZE = 32  # runtimes kept per device for reuse: compiling pipelines is the slow part


def reset_buffers(rt: Runtime, plan: KernelPlan, blob: bytes) -> None:
    """Every buffer of `plan` back to its initial contents in `blob` (zeros where it has none)."""
    for b in plan["buffers"]:
        init = b["init"]
        data = blob[init["offset"] : init["offset"] + init["bytes"]] if init else b""
        rt.write(b["name"], data + bytes(b["bytes"] - len(data)))


def cached_runtime(plan: KernelPlan, blob: bytes, gpu: GPU | None = None) -> Runtime:
    """A Runtime for `plan` with its buffers set from `blob`, reusing a recent one built for the
    same kernels, programs and buffer sizes on the same device (so its pipelines are not compiled
    again). The cache lives on the GPU object."""
    gpu = gpu or default_gpu()
    cache = gpu.runtime_cache
    key = json.dumps([plan["kernels"], plan["programs"], [(b["name"], b["bytes"]) for b in plan["buffers"]]])
    rt = cache.pop(key, None)
    if rt is None:
        rt = Runtime(plan, blob, gpu)
    else:
        reset_buffers(rt, plan, blob)
    cache[key] = rt
    while len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return rt


def state_words(state: dict | np.ndarray | None = None) -> np.ndarray:
    """The state buffer's words from a {field: value} dict (missing fields 0) or an array of words."""
    if state is None or isinstance(state, dict):
        return np.frombuffer(encode_state(state or {}), np.uint32).copy()
    words = np.zeros(len(STATE_FIELDS), np.uint32)
    words[:] = np.asarray(state, np.uint32)
    return words


def run_kernel(
    files: list[str],
    entry: str,
    constants: dict,
    inputs: dict,
    outputs,
    workgroups,
    path: str = "native",
    gpu: GPU | None = None,
) -> dict:
    """Dispatch `entry` of the kernel made of `files` once and return the requested buffers.

    inputs: {binding: array} initial contents. outputs: {binding: spec} buffers to read back, where
    spec is a shape, (shape, dtype) to view an f32/u32 buffer as another dtype, ((rows, cols),
    "padded") to get an h matrix with its padding column when cols is odd, or None for "the shape
    of the input of that name"; a plain list of names means None for each. Every binding
    must appear in inputs or outputs (or both, for read_write buffers holding data).
    workgroups: an int or an (x[, y[, z]]) tuple.
    """
    bindings = parse_bindings((PRELUDES[path], "common.wgsl", *files))
    wg = [workgroups] if np.isscalar(workgroups) else list(workgroups)
    binds = {b["name"]: b["name"] for b in bindings}

    def dispatch(pb):
        pb.dispatch(PROGRAM, files, entry, constants, binds, wg)

    return _run(path, bindings, binds, inputs, outputs, dispatch, gpu)


def run_matmul(
    variant: str,
    A,
    B,
    *,
    bias=None,
    zprev=None,
    trans_a: int = 0,
    trans_b: int = 0,
    a_act: int = 0,
    out_act: int = 0,
    flags=None,
    padded: bool = False,
    tiles: dict | None = None,
    path: str = "native",
    gpu: GPU | None = None,
) -> dict:
    """One matmul kernel ('matmul_fwd', 'matmul_logits', 'matmul_wgrad', 'matmul_dgrad') dispatched
    by `webmp.ops.matmul`, as training does. A is [M, K] ([K, M] with trans_a), B is [K, N]
    ([N, K] with trans_b). Returns {"C": [M, N]} plus "flags" for the variants that have them;
    padded=True returns an h output C with its zero-padding column when N is odd. tiles: the tile
    shape constants (WG_X, WG_Y, TM, TN, BK) and optionally the core (webmp.ops.MATMUL_CORES);
    default: DEFAULT_TILES."""
    A, B = np.atleast_2d(A), np.atleast_2d(B)
    M, K = (A.shape[1], A.shape[0]) if trans_a else A.shape
    N = B.shape[0] if trans_b else B.shape[1]
    if (B.shape[1] if trans_b else B.shape[0]) != K:
        raise ValueError(
            f"inner dimensions differ: A {A.shape} (trans_a={trans_a}), B {B.shape} (trans_b={trans_b})"
        )
    bindings = parse_bindings(
        (
            PRELUDES[path],
            "common.wgsl",
            *ops.matmul_sources(variant, ops.core_constants(tiles or DEFAULT_TILES)[0]),
        )
    )
    names = {b["name"] for b in bindings}
    inputs = {"A": A, "B": B}
    if "bias" in names:
        inputs["bias"] = np.zeros(N, np.float32) if bias is None else bias
    if "Zprev" in names:
        inputs["Zprev"] = zprev
    outputs: dict[str, Any] = {
        "C": ((M, N), "padded") if padded and variant in ("matmul_fwd", "matmul_dgrad") else (M, N)
    }
    if "flags" in names:
        inputs["flags"] = np.zeros(4, np.uint32) if flags is None else flags
        outputs["flags"] = None

    return run_op(
        ops.matmul,
        inputs,
        outputs,
        path=path,
        gpu=gpu,
        variant=variant,
        M=M,
        N=N,
        K=K,
        a_act=a_act,
        trans_a=trans_a,
        trans_b=trans_b,
        out_act=out_act,
        **({"tiles": tiles} if tiles else {}),
    )


class _Recorder(PlanBuilder):
    """Takes a launcher's dispatch and its buffer-size requirements without checking buffers (they
    are made once the kernel's bindings are known; run_op checks the requirements then)."""

    def __init__(self, path: str):
        super().__init__(path)
        self.required: list[tuple[str, str, int, str]] = []

    def require_bytes(self, entry: str, buffer: str, nbytes: int, what: str) -> None:
        self.required.append((entry, buffer, nbytes, what))

    def dispatch(self, program, files, entry, constants, binds, workgroups) -> None:
        self.recorded = (list(files), entry, dict(constants), dict(binds), list(workgroups))


def run_op(
    launcher: Callable[..., None],
    inputs: dict[str, Any],
    outputs: Any,
    *,
    path: str = "native",
    gpu: GPU | None = None,
    **params: Any,
) -> dict:
    """Dispatch one launcher of webmp.ops (as a model does) on numpy inputs and return the requested
    outputs. Every name in inputs and outputs is passed to the launcher as that buffer argument
    (a buffer of that name); the launcher binds them, one buffer possibly to several bindings (the
    attention launchers bind qkv as both A and B). `params` are its other arguments (sizes,
    constants; a positional-only first argument such as matmul's variant goes in as `variant`).
    inputs/outputs as for `run_kernel`, by buffer name."""
    names = set(inputs) | set(outputs)
    buffers = {n: n for n in names}
    args = [params.pop("variant")] if "variant" in params else []
    args += [params.pop("constants")] if "constants" in params else []
    probe = _Recorder(path)
    launcher(probe, PROGRAM, *args, **buffers, **params)
    files, entry, constants, binds, workgroups = probe.recorded
    bindings = parse_bindings((PRELUDES[path], "common.wgsl", *files))
    inputs = {**inputs, **_made_by_launcher(probe, set(binds.values()) - names)}

    def dispatch(pb):
        for required in probe.required:
            pb.require_bytes(*required)
        pb.dispatch(PROGRAM, files, entry, constants, binds, workgroups)

    return _run(path, bindings, binds, inputs, outputs, dispatch, gpu)


_NUMPY = {"u32": np.uint32, "f32": np.float32}  # plan dtypes a launcher-made buffer may have


def _made_by_launcher(probe: PlanBuilder, names: set[str]) -> dict[str, np.ndarray]:
    """The initial contents of the buffers a launcher added to the plan itself and binds
    (grad_stats's BASE word), as inputs for the run."""
    made = {}
    for name in sorted(names):
        spec = probe.buffers.get(name)
        if spec is None or spec["init"] is None or spec["dtype"] not in _NUMPY:
            raise ValueError(f"the launcher binds buffer {name}, neither given nor made by it with contents")
        off, n = spec["init"]["offset"], spec["init"]["bytes"]
        contents = np.frombuffer(bytes(probe.blob[off : off + n]), _NUMPY[spec["dtype"]])
        made[name] = contents.reshape(spec["shape"])
    return made


def _run(path, bindings, binds, inputs, outputs, dispatch, gpu) -> dict:
    """Make a buffer for each buffer name in `binds` ({binding: buffer}), of the element kind of the
    binding(s) it is bound to, run `dispatch` and read `outputs` back."""
    if not isinstance(outputs, dict):
        outputs = {name: None for name in outputs}
    kinds: dict[str, str] = {}
    for b in bindings:
        buf = binds[b["name"]]
        if kinds.setdefault(buf, b["element"]) != b["element"]:
            raise ValueError(f"buffer {buf} is bound as {kinds[buf]} and as {b['element']} ({b['name']})")
    names = list(kinds)
    unknown = (set(inputs) | set(outputs)) - set(names)
    missing = set(names) - set(inputs) - set(outputs)
    if unknown or missing:
        raise ValueError(f"the kernel binds {names}; unknown: {sorted(unknown)}, missing: {sorted(missing)}")

    pb = PlanBuilder(path)
    reads = {}
    for name, kind in kinds.items():
        data = inputs.get(name)
        shape, view = _shape_and_view(name, kind, data, outputs.get(name))
        if kind == "h":
            rows, cols = shape
            pb.h(name, rows, cols, category="other", init=None if data is None else pack_h(data, path))
        elif kind == "f32":
            pb.f32(name, shape, "other", data)
        elif kind in ("u32", "atomic"):
            pb.u32(name, shape, "other", data)
        elif kind == "State":
            pb.buffer(name, 4 * len(STATE_FIELDS), "other", "state", shape, state_words(data).tobytes())
        else:
            raise ValueError(f"binding {name}: element kind {kind!r} is not supported")
        if name in outputs:
            reads[name] = (kind, shape, view)
    pb.u32(_METRICS, (1,), "other")
    dispatch(pb)

    plan = pb.kernel_plan(state=_METRICS, metrics=_METRICS)
    rt = cached_runtime(plan, bytes(pb.blob), gpu)
    rt.run(PROGRAM)

    out: dict[str, Any] = {}
    for name, (kind, shape, view) in reads.items():
        raw = rt.read(name)
        if kind == "h":
            rows, cols = shape
            out[name] = unpack_h(raw, rows, cols + (cols & 1 if view == "padded" else 0), path)
        elif kind == "State":
            out[name] = decode_state(raw)
        else:
            n = int(np.prod(shape))
            out[name] = np.frombuffer(raw, view)[:n].reshape(shape).copy()
    return out


def _shape_and_view(name, kind, data, spec):
    """(buffer shape, numpy dtype to read it as) from the input data and/or the output spec."""
    view = np.float32 if kind == "f32" else np.uint32
    if kind == "State":
        return (len(STATE_FIELDS),), None
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], (tuple, list)):
        spec, view = spec  # (shape, dtype)
    if spec is None:
        if data is None:
            raise ValueError(f"binding {name}: give an input array or an output shape")
        shape = np.atleast_2d(data).shape if kind == "h" else np.shape(data)
    else:
        shape = (spec,) if np.isscalar(spec) else tuple(spec)
    if kind == "h":
        shape = (1, *shape) if len(shape) == 1 else shape
        if len(shape) != 2:
            raise ValueError(f"binding {name}: activation-format buffers are 2-D, got shape {shape}")
    return tuple(int(s) for s in shape), view
