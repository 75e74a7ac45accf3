"""The step plan: everything a runtime needs to train, as JSON-serialisable data.

A plan says *what* runs: the buffers (name, size, category, initial contents), the kernels (shader
files, entry point, override constants, binding layout) and the programs (ordered dispatch lists
with their bindings and workgroup counts). This module holds its format (the TypedDicts below) and
`PlanBuilder`; the launchers of webmp/ops/ add dispatches to a builder, and the models of
webmp/models/ compose them (`webmp.models.build_plan`). A runtime (webmp/engine/runtime.py natively,
web/runner.js in the browser) only creates what the plan lists and replays it; it decides nothing.

Precision policy (see docs/architecture.md): matmul operands and activations are stored in the
"h" format chosen by the prelude (f16 pairs natively or emulated, f32 pairs for fp32); master
weights, gradients, Adam moments, loss, norms and statistics are f32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import numpy as np

from .formats import FORMATS, f32_bits_to_narrow
from .state import METRIC_FIELDS, STATE_FIELDS, WordKind
from .wgsl import PRELUDES, Binding, parse_bindings, source_features

MAX_WORKGROUPS_PER_DIM = 65535  # WebGPU's default maxComputeWorkgroupsPerDimension; no plan asks more

PLAN_FORMAT = "webmp-plan/1"


# --- the plan format: what both runtimes read (web/runner.js reads the same JSON) ------------------


class BlobRange(TypedDict):
    offset: int  # into the initial-contents blob
    bytes: int


class BufferSpec(TypedDict):
    name: str
    bytes: int
    category: str  # one of CATEGORIES
    dtype: str  # 'h' (activation format of the prelude), 'f32', 'u32' or 'state'
    shape: list[int]
    init: BlobRange | None  # initial contents, else zeros


class KernelSpec(TypedDict):
    name: str
    sources: list[str]  # shaders/ files joined in order
    entry: str
    constants: dict[str, float]  # pipeline-overridable constants
    bindings: list[Binding]


class Dispatch(TypedDict):
    kernel: str
    bind: list[str]  # buffer names, in binding order
    workgroups: list[int]  # x, y, z


class WordsSpec(TypedDict):
    buffer: str
    fields: list[tuple[str, WordKind]]


class MetricsSpec(WordsSpec):
    ring: int  # records held by the GPU ring buffer


class MatmulShape(TypedDict):
    """One distinct matmul product of a plan (one batch-head's, for batched ones) and how many a
    dispatch computes: what the tuners tune (M .. trans_b) and the bench times. The kernels'
    constants do not say it when the sizes are read at run time."""

    M: int
    N: int
    K: int
    trans_a: int
    trans_b: int
    batch: int


class KernelPlan(TypedDict):
    """What a runtime needs to create and replay programs (webmp.testing.probe builds only this)."""

    buffers: list[BufferSpec]
    kernels: list[KernelSpec]
    programs: dict[str, list[Dispatch]]
    matmuls: list[MatmulShape]  # the distinct matmul products, in the order first dispatched
    required_features: list[str]
    required_limits: dict[str, int]
    state: WordsSpec
    metrics: MetricsSpec


class ParamSpec(TypedDict):
    name: str
    shape: list[int]
    master: str  # buffer names
    grad: str
    m: str
    v: str
    copy: str | None  # working copy in the activation format (weight matrices)


class Schedule(TypedDict):
    """When a runner reads the metrics ring / uploads a checkpoint: after step s (1-based) if
    s % log_every == 0 or s == steps (metrics), s % checkpoint_every == 0 (checkpoint + metrics)."""

    steps: int
    log_every: int
    checkpoint_every: int


class EvalSpec(TypedDict):
    result_buffer: str  # u32 (correct, counted) after program 'eval'
    test_rows: int
    loss_buffer: str | None  # f32 [1]: the evaluated rows' summed loss (language models), else None


class FusedRegion(TypedDict):
    """`floats` f32 words of `buffer` (from its start) at word `offset` of the fused all-reduce buffer."""

    buffer: str
    offset: int
    floats: int


class LossRegion(FusedRegion):
    """This rank's loss rows (`buffer`, `floats` of them) go to word `offset`, its place in the
    global batch; after the sum, the global batch's `rows` rows at word `all_offset` go to `all`."""

    all: str
    all_offset: int
    rows: int


class FlagsRegion(TypedDict):
    """Word 0 of `buffer` (the overflow flags) as `bits` f32 words at `offset`, one per flag bit
    (1.0 when set): summed over the ranks, a bit is set when any rank set it (an OR by a sum)."""

    buffer: str
    offset: int
    bits: int


class DataParallelSpec(TypedDict):
    """One rank's part of data-parallel training (webmp.train.distributed): `grads_program` (this rank's
    shard: gather, forward, backward, losses normalised by the global batch), then the sum over
    the ranks of one fused f32 buffer of `floats` words (the gradients, the global batch's loss
    rows, the flags), written back, then `update_program` (overflow check, scaler, AdamW). With
    fp8, the step's amax too: their max over the ranks, so every rank sets the scales one process
    would from the whole batch."""

    rank: int
    world: int
    grads_program: str
    update_program: str
    floats: int
    gradients: list[FusedRegion]
    loss: LossRegion
    flags: FlagsRegion
    zero: dict[str, Any] | None  # sharded optimizer state (webmp.models.zero.zero_spec), or None
    amax: str | None  # fp8: the amax buffer (u32 bits of f32 >= 0), its max over the ranks written back


class HistogramLayer(TypedDict):
    name: str  # a label: the activation gradient's buffer (and, for shared buffers, which block's)
    buffer: str
    shape: list[int]  # [rows, cols]: rows * cols values are counted
    offset: int  # its first counter in HistogramSpec.buffer


class HistogramSpec(TypedDict):
    """The gradient-range lens. Program `program` is program `replaces` (train_step, or a
    data-parallel rank's train_grads) with counting dispatches added; a runtime runs it instead on
    a step whose metrics it reads. It fills `buffer` (u32 [len(layers) * buckets], exact counts)
    with each layer's log2 histogram of the |values| of its activation gradient, counted where the
    backward pass leaves them (the GPT's blocks share their delta buffers: each block's are counted
    before the next overwrites them): the loss-scaled gradients of that step, as stored (f16 on the
    f16 paths). A layer's counters, from its offset: 0 zero, 1 nonzero below
    2^e_min, 2 + i floor(log2 |x|) = e_min + i (i = 0 .. e_max - e_min), buckets - 2 finite at or above
    2^(e_max + 1), buckets - 1 what the training's overflow test flags (f16 paths: |x| >= 65504,
    Inf or NaN; fp32: Inf or NaN). f16_range: the f16 subnormal and normal floors and maximum."""

    program: str
    replaces: str
    buffer: str
    e_min: int
    e_max: int
    buckets: int
    layers: list[HistogramLayer]
    f16_range: dict[str, float]


F16_RANGE = {"subnormal_min": 2.0**-24, "normal_min": 2.0**-14, "max": 65504.0}


class TrainPlan(KernelPlan):
    """Plan's keys that every training plan has."""

    format: str
    config: dict[str, Any]
    precision: str
    f16_path: str | None  # None for fp32
    prelude: str
    layers: list[int]
    blob_bytes: int
    params: list[ParamSpec]
    checkpoint_buffers: list[str]
    schedule: Schedule
    eval: EvalSpec
    memory: dict[str, int]  # bytes by category
    histograms: HistogramSpec


# the programs a training run makes before its first step: the step and the lens's step (the first read)
FIRST_PROGRAMS = ["train_step", "histograms"]


class Plan(TrainPlan, total=False):
    """A training plan: programs 'train_step', 'eval' and 'histograms' (the gradient-range lens); a
    data-parallel rank's has 'train_grads' and 'train_update' instead of 'train_step', and
    `data_parallel` says how to run them. `fp8`: precision fp8's recipe and quantised layers
    (webmp.engine.fp8.Fp8Recipe.describe). `attention`: the GPT's attention form and why
    (webmp.models.attention_form.attention_entry: form, why, the log's line). `quick`: a page
    plan's quick tier, {program: its twin} (webmp.engine.tiers)."""

    data_parallel: DataParallelSpec
    fp8: dict[str, Any]
    accumulation: str  # with grad_accum > 1: the logs' line (TrainConfig.accumulation_line)
    attention: dict[str, str]
    quick: dict[str, str]


class SampleRun(TypedDict):
    """`tokens` consecutive tokens, each drawn by one run of `program`."""

    program: str
    tokens: int


class SampleSpec(TypedDict):
    """Text generation: replay the programs of `schedule` in order, each once per token of its run
    (at most `tokens_per_submit` replays a submit), `tokens` tokens in all after the prompt's; then
    `seq` (u32 [prompt_tokens + tokens], token ids into `vocab`) holds the prompt and the generated
    tokens, and `seq_len` (u32 [1]) their count."""

    schedule: list[SampleRun]
    seq: str  # buffer names
    seq_len: str
    flags: str  # u32 [4]: word 0 is non-zero once an activation overflowed the f16 range
    prompt_tokens: int
    tokens: int
    tokens_per_submit: int
    temperature: float  # as given; the kernel's f32 constants are in its KernelSpec
    seed: int
    vocab: list[str]  # token id -> character


class SamplePlan(KernelPlan):
    """A sampling plan (webmp/models/net_sample.py): programs 'sample_step' (the window) and, where
    its schedule has them, 'sample_row' (one position over the caches)."""

    format: str
    config: dict[str, Any]
    precision: str
    f16_path: str | None  # None for fp32
    prelude: str
    blob_bytes: int
    sample: SampleSpec
    memory: dict[str, int]  # bytes by category


def memory_by_category(buffers: Sequence[BufferSpec]) -> dict[str, int]:
    """Bytes of the buffers in each of CATEGORIES."""
    memory = {c: 0 for c in CATEGORIES}
    for b in buffers:
        memory[b["category"]] += b["bytes"]
    return memory


def required_limits(buffers: Sequence[BufferSpec], kernels: Sequence[KernelSpec]) -> dict[str, int]:
    largest = max(b["bytes"] for b in buffers)
    return {
        "maxStorageBufferBindingSize": largest,
        "maxBufferSize": largest,
        "maxStorageBuffersPerShaderStage": max(
            sum(b["type"] != "uniform" for b in k["bindings"]) for k in kernels
        ),
    }


CATEGORIES = [
    "master_weights",
    "working_weights",
    "optimizer_state",
    "gradients",
    "activations",
    "data",
    "other",
]


def required_features(path: str, kernels: Sequence[KernelSpec]) -> list[str]:
    """The WebGPU features a plan's device must have: shader-f16 on the native path, and what its
    kernels' shader files need (subgroups for the subgroup matmul core: wgsl.SOURCE_FEATURES)."""
    need = {"shader-f16"} if path == "native" else set()
    return sorted(need.union(*(source_features(k["sources"]) for k in kernels)))


def resolve_f16_path(precision: str, choice: str, adapter_has_f16: bool) -> str:
    """The prelude used: 'native', 'emulated', 'fp32' or 'bf16' (precision bf16, and fp8, whose
    storage is bf16: on any adapter)."""
    if precision in ("fp32", "bf16"):
        return precision
    if precision == "fp8":
        return "bf16"
    if choice == "native" and not adapter_has_f16:
        raise RuntimeError(
            "--f16 native was requested but this WebGPU adapter lacks the 'shader-f16' "
            "feature; use --f16 emulated (or auto)"
        )
    if choice == "auto":
        return "native" if adapter_has_f16 else "emulated"
    return choice


def describe_f16(path: str, choice: str = "auto", precision: str | None = None) -> str:
    """How a run's f16 values are handled, for logs and summaries; says so when f16 is emulated.
    precision fp8 stores in bf16 and says its scaling apart (webmp.engine.fp8.describe_fp8)."""
    if precision == "fp8":
        return (
            "bf16 storage (two a u32 word, converted in integer arithmetic; arithmetic in f32), fp8 matmuls"
        )
    if path == "native":
        return "f16 native (shader-f16)"
    if path == "emulated":
        why = "requested" if choice == "emulated" else "the adapter lacks shader-f16"
        return (
            f"f16 EMULATED ({why}): values stored as f16 pairs via pack2x16float, arithmetic in f32; "
            "slower than native"
        )
    if path == "bf16":
        return (
            "bf16 (two a u32 word, converted in integer arithmetic; arithmetic in f32; no loss "
            "scaling: bf16 has f32's range)"
        )
    return "fp32 (no f16)"


def h_bytes(rows: int, cols: int, path: str) -> int:
    return rows * ((cols + 1) // 2) * (8 if path == "fp32" else 4)


def pack_h(a: np.ndarray, path: str) -> bytes:
    """A [rows, cols] array in the h storage layout (pairs per word, odd rows zero-padded)."""
    a = np.asarray(a, np.float64)
    if a.ndim == 1:
        a = a[None, :]
    rows, cols = a.shape
    if path == "bf16":
        bits = f32_bits_to_narrow(a.astype(np.float32).view(np.uint32), FORMATS["bf16"])
        words = np.zeros((rows, cols + (cols & 1)), np.uint16)
        words[:, :cols] = bits
        return words.tobytes()
    padded = np.zeros((rows, cols + (cols & 1)), np.float32 if path == "fp32" else np.float16)
    padded[:, :cols] = a
    return padded.tobytes()


def unpack_h(raw: bytes, rows: int, cols: int, path: str) -> np.ndarray:
    if path == "bf16":
        bits = np.frombuffer(raw, np.uint16)[: rows * (cols + (cols & 1))].reshape(rows, cols + (cols & 1))
        return (bits[:, :cols].astype(np.uint32) << 16).view(np.float32)
    dt = np.float32 if path == "fp32" else np.float16
    a = np.frombuffer(raw, dt)[: rows * (cols + (cols & 1))].reshape(rows, cols + (cols & 1))
    return a[:, :cols].astype(np.float32)


class PlanBuilder:
    """The buffers, kernels and programs of a plan, and the blob of the buffers' initial contents.

    A dry builder (dry=True) declares every buffer and dispatch alike but keeps no initial contents:
    its buffers' `init` is None and its blob stays empty, so that a plan's sizes can be known from
    its declarations alone (webmp.models.plan_buffers), without the arrays of a large config."""

    def __init__(self, path: str, *, dry: bool = False):
        self.path = path
        self.dry = dry
        self.prelude = PRELUDES[path]
        self.buffers: dict[str, BufferSpec] = {}
        self.blob = bytearray()
        self.kernels: dict[tuple, KernelSpec] = {}
        self.programs: dict[str, list[Dispatch]] = {}
        self.matmuls: list[MatmulShape] = []  # webmp.ops.matmul adds each distinct product
        # the device's fixed subgroup width where the plan may rely on it (TileTable.subgroup_width,
        # webmp.engine.subgroups; 0: unknown): webmp.ops.matmul's SG_LAYOUT
        self.subgroup_width = 0

    # buffers ---------------------------------------------------------------------------------
    def buffer(
        self,
        name: str,
        nbytes: int,
        category: str,
        dtype: str,
        shape: Sequence[int],
        init: bytes | None = None,
    ) -> str:
        if name in self.buffers:
            raise ValueError(f"buffer {name} defined twice")
        nbytes = max(4, (int(nbytes) + 3) // 4 * 4)
        spec: BufferSpec = {
            "name": name,
            "bytes": nbytes,
            "category": category,
            "dtype": dtype,
            "shape": list(shape),
            "init": None,
        }
        if init is not None and not self.dry:
            if len(init) > nbytes:
                raise ValueError(f"initial contents of {name} exceed its size")
            spec["init"] = {"offset": len(self.blob), "bytes": len(init)}
            self.blob += init
            self.blob += b"\0" * (-len(self.blob) % 4)
        self.buffers[name] = spec
        return name

    def resize(self, name: str, shape: Sequence[int], init: bytes | None = None) -> None:
        """Buffer `name` (declared with no contents yet) re-sized to 4-byte elements of `shape`, with
        `init` its initial contents: for buffers whose size is known only once the programs are
        built (webmp.models.fp8)."""
        spec = self.buffers[name]
        if spec["init"] is not None:
            raise ValueError(f"buffer {name} has its contents already")
        n = math.prod(shape)
        spec["bytes"], spec["shape"] = max(4, 4 * n), list(shape)
        if init is not None and not self.dry:
            if len(init) > spec["bytes"]:
                raise ValueError(f"initial contents of {name} exceed its size")
            spec["init"] = {"offset": len(self.blob), "bytes": len(init)}
            self.blob += init
            self.blob += b"\0" * (-len(self.blob) % 4)

    def h(
        self, name: str, rows: int, cols: int, category: str = "activations", init: bytes | None = None
    ) -> str:
        return self.buffer(name, h_bytes(rows, cols, self.path), category, "h", (rows, cols), init)

    def f32(self, name: str, shape: Sequence[int], category: str, init: Any = None) -> str:
        n = math.prod(shape)
        data = None if init is None or self.dry else np.asarray(init, np.float32).tobytes()
        return self.buffer(name, 4 * n, category, "f32", shape, data)

    def u32(self, name: str, shape: Sequence[int], category: str, init: Any = None) -> str:
        n = math.prod(shape)
        data = None if init is None or self.dry else np.asarray(init, np.uint32).tobytes()
        return self.buffer(name, 4 * n, category, "u32", shape, data)

    def require_bytes(self, entry: str, buffer: str, nbytes: int, what: str) -> None:
        """For a kernel that takes a size from a binding's arrayLength: `buffer` must be exactly
        nbytes long (it holds `what`), or the kernel would run over the wrong number of values."""
        have = self.buffers[buffer]["bytes"]
        if have != nbytes:
            raise ValueError(
                f"{entry}: buffer {buffer} has {have} bytes, but the kernel takes its length as {what} "
                f"({nbytes} bytes)"
            )

    # kernels and dispatches -------------------------------------------------------------------
    def kernel(self, files: Sequence[str], entry: str, constants: dict[str, Any]) -> KernelSpec:
        sources = (self.prelude, "common.wgsl", *files)
        key = (sources, entry, tuple(sorted(constants.items())))
        if key not in self.kernels:
            self.kernels[key] = {
                "name": f"{entry}_{len(self.kernels)}",
                "sources": list(sources),
                "entry": entry,
                "constants": dict(constants),
                "bindings": [Binding(**b) for b in parse_bindings(tuple(sources))],
            }
        return self.kernels[key]

    def dispatch(
        self,
        program: str,
        files: Sequence[str],
        entry: str,
        constants: dict[str, Any],
        binds: dict[str, str],
        workgroups: Sequence[int],
    ) -> None:
        k = self.kernel(files, entry, constants)
        names = [b["name"] for b in k["bindings"]]
        if set(binds) != set(names):
            raise ValueError(f"{entry}: bindings {sorted(binds)} do not match the shader's {names}")
        for b in k["bindings"]:
            buf = self.buffers[binds[b["name"]]]
            want = b["element"]
            have = buf["dtype"]
            ok = want == have or (want == "atomic" and have == "u32") or (want == "State" and have == "state")
            if not ok:
                raise ValueError(
                    f"{entry}: binding {b['name']} wants {want}, got buffer {buf['name']} ({have})"
                )
        wg = list(workgroups) + [1] * (3 - len(workgroups))
        if not all(1 <= int(x) <= MAX_WORKGROUPS_PER_DIM for x in wg):
            raise ValueError(
                f"{entry} in {program} needs workgroups {wg}; a dispatch takes 1 .. {MAX_WORKGROUPS_PER_DIM} "
                "in each dimension (a smaller batch or context fits)"
            )
        self.programs.setdefault(program, []).append(
            {"kernel": k["name"], "bind": [binds[n] for n in names], "workgroups": [int(x) for x in wg]}
        )

    def take_last(self, program: str, entry: str, binds: Mapping[str, str]) -> dict[str, str] | None:
        """The program's last dispatch, removed, as {binding: buffer}, where it runs `entry` with
        (at least) `binds`; else None, and nothing removed (a builder fusing it into the next)."""
        dispatches = self.programs.get(program) or []
        if not dispatches:
            return None
        last = dispatches[-1]
        k = next(k for k in self.kernels.values() if k["name"] == last["kernel"])
        bound = dict(zip((b["name"] for b in k["bindings"]), last["bind"], strict=True))
        if k["entry"] != entry or any(bound.get(n) != b for n, b in binds.items()):
            return None
        dispatches.pop()
        return bound

    def kernel_plan(self, state: str, metrics: str, ring: int = 1) -> KernelPlan:
        """What a runtime needs to replay this builder's programs, with `state` and `metrics` naming
        the buffers holding the state words and the metrics ring (used by runtimes' sync and read)."""
        buffers, kernels = list(self.buffers.values()), list(self.kernels.values())
        return {
            "buffers": buffers,
            "kernels": kernels,
            "programs": self.programs,
            "matmuls": self.matmuls,
            "required_features": required_features(self.path, kernels),
            "required_limits": required_limits(buffers, kernels),
            "state": {"buffer": state, "fields": STATE_FIELDS},
            "metrics": {"buffer": metrics, "ring": ring, "fields": METRIC_FIELDS},
        }
