"""The step plan: everything a runtime needs to train, as JSON-serialisable data.

`build_plan` decides *what* runs: the buffers (name, size, category, initial contents), the kernels
(shader files, entry point, override constants, binding layout) and the programs (ordered dispatch
lists with their bindings and workgroup counts). A runtime (webmp/runtime.py natively, web/runner.js
in the browser) only creates what the plan lists and replays it; it makes no decisions of its own.

Precision policy (see docs/architecture.md): matmul operands and activations are stored in the
"h" format chosen by the prelude (f16 pairs natively or emulated, f32 pairs for fp32); master
weights, gradients, Adam moments, loss, norms and statistics are f32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypedDict

import numpy as np

from .config import TrainConfig
from .data import Dataset, perm_bits
from .state import METRIC_FIELDS, NO_STEP, STATE_BYTES, STATE_FIELDS, WordKind, initial_state
from .tilecache import DEFAULT_TILES, Tiles, TileTable
from .wgsl import PRELUDES, Binding, parse_bindings

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


class KernelPlan(TypedDict):
    """What a runtime needs to create and replay programs (webmp.inspect builds only this)."""

    buffers: list[BufferSpec]
    kernels: list[KernelSpec]
    programs: dict[str, list[Dispatch]]
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
    result_buffer: str
    test_rows: int


class Plan(KernelPlan):
    """A training plan: programs 'train_step' and 'eval'."""

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


def required_limits(buffers: Sequence[BufferSpec], kernels: Sequence[KernelSpec]) -> dict[str, int]:
    largest = max(b["bytes"] for b in buffers)
    return {
        "maxStorageBufferBindingSize": largest,
        "maxBufferSize": largest,
        "maxStorageBuffersPerShaderStage": max(len(k["bindings"]) for k in kernels),
    }


ACT_CODES = {"none": 0, "relu": 1, "gelu": 2}
MAX_WORKGROUPS = 4096  # for grid-stride kernels
GRAD_STATS_MAX_WG = 16

CATEGORIES = [
    "master_weights",
    "working_weights",
    "optimizer_state",
    "gradients",
    "activations",
    "data",
    "other",
]


def resolve_f16_path(precision: str, choice: str, adapter_has_f16: bool) -> str:
    """The prelude used: 'native', 'emulated' or 'fp32'."""
    if precision == "fp32":
        return "fp32"
    if choice == "native" and not adapter_has_f16:
        raise RuntimeError(
            "--f16 native was requested but this WebGPU adapter lacks the 'shader-f16' "
            "feature; use --f16 emulated (or auto)"
        )
    if choice == "auto":
        return "native" if adapter_has_f16 else "emulated"
    return choice


def describe_f16(path: str, choice: str = "auto") -> str:
    """How a run's f16 values are handled, for logs and summaries; says so when f16 is emulated."""
    if path == "native":
        return "f16 native (shader-f16)"
    if path == "emulated":
        why = "requested" if choice == "emulated" else "the adapter lacks shader-f16"
        return (
            f"f16 EMULATED ({why}): values stored as f16 pairs via pack2x16float, arithmetic in f32; "
            "slower than native"
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
    padded = np.zeros((rows, cols + (cols & 1)), np.float32 if path == "fp32" else np.float16)
    padded[:, :cols] = a
    return padded.tobytes()


def unpack_h(raw: bytes, rows: int, cols: int, path: str) -> np.ndarray:
    dt = np.float32 if path == "fp32" else np.float16
    a = np.frombuffer(raw, dt)[: rows * (cols + (cols & 1))].reshape(rows, cols + (cols & 1))
    return a[:, :cols].astype(np.float32)


def pytorch_linear_init(fan_in: int, fan_out: int, rng: np.random.Generator, gain: float):
    bound = gain / math.sqrt(fan_in)
    w = rng.uniform(-bound, bound, size=(fan_in, fan_out)).astype(np.float32)  # stored [in, out]
    b = rng.uniform(-bound, bound, size=fan_out).astype(np.float32)
    return w, b


class PlanBuilder:
    def __init__(self, path: str):
        self.path = path
        self.prelude = PRELUDES[path]
        self.buffers: dict[str, BufferSpec] = {}
        self.blob = bytearray()
        self.kernels: dict[tuple, KernelSpec] = {}
        self.programs: dict[str, list[Dispatch]] = {}

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
        if init is not None:
            if len(init) > nbytes:
                raise ValueError(f"initial contents of {name} exceed its size")
            spec["init"] = {"offset": len(self.blob), "bytes": len(init)}
            self.blob += init
            self.blob += b"\0" * (-len(self.blob) % 4)
        self.buffers[name] = spec
        return name

    def h(
        self, name: str, rows: int, cols: int, category: str = "activations", init: bytes | None = None
    ) -> str:
        return self.buffer(name, h_bytes(rows, cols, self.path), category, "h", (rows, cols), init)

    def f32(self, name: str, shape: Sequence[int], category: str, init: Any = None) -> str:
        n = int(np.prod(shape))
        data = None if init is None else np.asarray(init, np.float32).tobytes()
        return self.buffer(name, 4 * n, category, "f32", shape, data)

    def u32(self, name: str, shape: Sequence[int], category: str, init: Any = None) -> str:
        n = int(np.prod(shape))
        data = None if init is None else np.asarray(init, np.uint32).tobytes()
        return self.buffer(name, 4 * n, category, "u32", shape, data)

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
        self.programs.setdefault(program, []).append(
            {"kernel": k["name"], "bind": [binds[n] for n in names], "workgroups": [int(x) for x in wg]}
        )

    def kernel_plan(self, state: str, metrics: str, ring: int = 1) -> KernelPlan:
        """What a runtime needs to replay this builder's programs, with `state` and `metrics` naming
        the buffers holding the state words and the metrics ring (used by runtimes' sync and read)."""
        buffers, kernels = list(self.buffers.values()), list(self.kernels.values())
        return {
            "buffers": buffers,
            "kernels": kernels,
            "programs": self.programs,
            "required_features": ["shader-f16"] if self.path == "native" else [],
            "required_limits": required_limits(buffers, kernels),
            "state": {"buffer": state, "fields": STATE_FIELDS},
            "metrics": {"buffer": metrics, "ring": ring, "fields": METRIC_FIELDS},
        }


def _cdiv(a, b):
    return -(-a // b)


def _grid(n, per=64):
    return [min(MAX_WORKGROUPS, max(1, _cdiv(n, per)))]


# --- kernel families: one function each, used by the model builder and by webmp.inspect --------


def matmul_sources(variant: str) -> list[str]:
    """The shader files of a matmul variant after the prelude and common.wgsl: the core, the shared
    f16-output epilogue for the variants that store h, the variant's own file."""
    h_out = ["matmul_h_out.wgsl"] if variant in ("matmul_fwd", "matmul_dgrad") else []
    return ["matmul.wgsl", *h_out, f"{variant}.wgsl"]


def op_matmul(
    pb,
    program,
    variant,
    *,
    A,
    B,
    out,
    M,
    N,
    K,
    a_act=0,
    trans_a=0,
    trans_b=0,
    bias=None,
    zprev=None,
    out_act=0,
    tiles: Tiles = DEFAULT_TILES,
):
    """One tiled matmul dispatch with tile shape `tiles` (WG_X, WG_Y, TM, TN, BK)."""
    consts = {"M": M, "N": N, "K": K, "TRANS_A": trans_a, "TRANS_B": trans_b, "A_ACT": a_act, **tiles}
    binds = {"A": A, "B": B, "C": out}
    if variant in ("matmul_fwd", "matmul_logits"):
        binds["bias"] = bias
    if variant == "matmul_dgrad":
        binds["Zprev"] = zprev
        consts["OUT_ACT"] = out_act
    if variant in ("matmul_fwd", "matmul_dgrad"):
        binds["flags"] = "flags"
    pb.dispatch(
        program,
        matmul_sources(variant),
        variant,
        consts,
        binds,
        [_cdiv(N, tiles["WG_X"] * tiles["TN"]), _cdiv(M, tiles["WG_Y"] * tiles["TM"])],
    )


def build_plan(
    cfg: TrainConfig, data: Dataset, path: str, tiles: TileTable | None = None
) -> tuple[Plan, bytes]:
    """The plan and its initial-contents blob for training `cfg` on `data` with prelude `path`;
    matmul tile shapes from `tiles` (default: DEFAULT_TILES for every shape)."""
    pb = PlanBuilder(path)
    table = tiles or TileTable()

    def matmul(program, variant, **kw):
        shape = (path, kw["M"], kw["N"], kw["K"], kw.get("trans_a", 0), kw.get("trans_b", 0))
        op_matmul(pb, program, variant, tiles=table.for_shape(*shape), **kw)

    Bt = cfg.batch_size
    dims = [data.features, *cfg.hidden, data.classes]
    L = len(dims) - 1
    act = ACT_CODES[cfg.act]
    ln = cfg.model == "mlp-ln"
    rng = np.random.default_rng(cfg.seed)
    ring = cfg.log_every

    # data and bookkeeping
    pb.f32("train_x", data.train_x.shape, "data", data.train_x)
    pb.u32("train_y", data.train_y.shape, "data", data.train_y)
    pb.f32("test_x", data.test_x.shape, "data", data.test_x)
    pb.u32("test_y", data.test_y.shape, "data", data.test_y)
    state0 = initial_state(cfg.init_scale if cfg.loss_scaling else 1.0, cfg.hysteresis)
    pb.buffer("state", STATE_BYTES, "other", "state", (len(STATE_FIELDS),), state0)
    pb.u32("flags", (4,), "other")
    pb.f32("loss_rows", (Bt,), "activations")
    # unwritten ring slots hold step 0xFFFFFFFF, so readers can tell them from step 0
    pb.u32("metrics", (ring, len(METRIC_FIELDS)), "other", np.full((ring, len(METRIC_FIELDS)), NO_STEP))
    pb.u32("eval_result", (2,), "other")
    pb.h("X", Bt, dims[0])
    pb.u32("y", (Bt,), "activations")

    # parameters: master f32, gradient, both moments; weight matrices also get a working copy
    params = []

    def param(name, init, copy_shape=None):
        shape = init.shape
        entry = {
            "name": name,
            "shape": list(shape),
            "master": pb.f32(name, shape, "master_weights", init),
            "grad": pb.f32("g_" + name, shape, "gradients"),
            "m": pb.f32("m_" + name, shape, "optimizer_state"),
            "v": pb.f32("v_" + name, shape, "optimizer_state"),
            "copy": None,
            "decay": copy_shape is not None,
        }
        if copy_shape is not None:
            rows, cols = copy_shape
            entry["copy"] = pb.h("h_" + name, rows, cols, category="working_weights", init=pack_h(init, path))
        params.append(entry)
        return entry

    layers = []
    for l in range(L):
        w, b = pytorch_linear_init(dims[l], dims[l + 1], rng, cfg.init_gain)
        lay = {
            "in": dims[l],
            "out": dims[l + 1],
            "W": param(f"W{l}", w, (dims[l], dims[l + 1])),
            "b": param(f"b{l}", b),
            "ln": None,
        }
        if l < L - 1:
            lay["Z"] = pb.h(f"Z{l}", Bt, dims[l + 1])
            lay["dZ"] = pb.h(f"dZ{l}", Bt, dims[l + 1])
            if ln:
                lay["ln"] = {
                    "g": param(f"ln_g{l}", np.ones(dims[l + 1], np.float32)),
                    "b": param(f"ln_b{l}", np.zeros(dims[l + 1], np.float32)),
                    "Y": pb.h(f"Y{l}", Bt, dims[l + 1]),
                    "dY": pb.h(f"dY{l}", Bt, dims[l + 1]),
                    "stats": pb.f32(f"ln_stats{l}", (Bt, 2), "activations"),
                }
        else:
            lay["logits"] = pb.f32("logits", (Bt, dims[-1]), "activations")
            lay["dZ"] = pb.h("dlogits", Bt, dims[-1])
        layers.append(lay)

    def layer_input(l):
        """(buffer, activation applied on load) feeding layer l."""
        if l == 0:
            return "X", 0
        prev = layers[l - 1]
        return (prev["ln"]["Y"] if prev["ln"] else prev["Z"]), act

    def forward(program):
        for l, lay in enumerate(layers):
            src, a_act = layer_input(l)
            common = dict(
                A=src,
                B=lay["W"]["copy"],
                bias=lay["b"]["master"],
                M=Bt,
                N=lay["out"],
                K=lay["in"],
                a_act=a_act,
            )
            if l == L - 1:
                matmul(program, "matmul_logits", out=lay["logits"], **common)
                continue
            matmul(program, "matmul_fwd", out=lay["Z"], **common)
            if lay["ln"]:
                n = lay["out"]
                pb.dispatch(
                    program,
                    ["reduce.wgsl", "layernorm_fwd.wgsl"],
                    "layernorm_fwd",
                    {"M": Bt, "N": n},
                    {
                        "Z": lay["Z"],
                        "gamma": lay["ln"]["g"]["master"],
                        "beta": lay["ln"]["b"]["master"],
                        "Y": lay["ln"]["Y"],
                        "stats": lay["ln"]["stats"],
                        "flags": "flags",
                    },
                    [Bt],
                )

    # --- the training step ---------------------------------------------------------------------
    T = "train_step"
    fw_words = (dims[0] + 1) // 2
    pb.dispatch(
        T,
        ["gather.wgsl"],
        "gather_train",
        {
            "N_ROWS": len(data.train_x),
            "F": dims[0],
            "B": Bt,
            "SEED": cfg.seed,
            "PERM_BITS": perm_bits(len(data.train_x)),
        },
        {"xs": "train_x", "ys": "train_y", "state": "state", "X": "X", "y": "y"},
        _grid(Bt * fw_words),
    )
    forward(T)
    C = dims[-1]
    pb.dispatch(
        T,
        ["softmax_xent.wgsl"],
        "softmax_xent",
        {"B": Bt, "C": C},
        {
            "logits": "logits",
            "labels": "y",
            "state": "state",
            "loss_rows": "loss_rows",
            "dlogits": "dlogits",
            "flags": "flags",
        },
        [_cdiv(Bt, 64)],
    )
    for l in reversed(range(L)):
        lay = layers[l]
        src, a_act = layer_input(l)
        matmul(
            T,
            "matmul_wgrad",
            A=src,
            B=lay["dZ"],
            out=lay["W"]["grad"],
            M=lay["in"],
            N=lay["out"],
            K=Bt,
            a_act=a_act,
            trans_a=1,
        )
        pb.dispatch(
            T,
            ["columns.wgsl", "colsum.wgsl"],
            "colsum",
            {"M": Bt, "N": lay["out"]},
            {"G": lay["dZ"], "out": lay["b"]["grad"]},
            [_cdiv(lay["out"], 64)],
        )
        if l == 0:
            continue
        prev = layers[l - 1]
        target = prev["ln"]["dY"] if prev["ln"] else prev["dZ"]
        pre_act = prev["ln"]["Y"] if prev["ln"] else prev["Z"]
        matmul(
            T,
            "matmul_dgrad",
            A=lay["dZ"],
            B=lay["W"]["copy"],
            out=target,
            zprev=pre_act,
            M=Bt,
            N=lay["in"],
            K=lay["out"],
            trans_b=1,
            out_act=act,
        )
        if prev["ln"]:
            n = prev["out"]
            lnp = prev["ln"]
            pb.dispatch(
                T,
                ["columns.wgsl", "layernorm_wgrad.wgsl"],
                "layernorm_wgrad",
                {"M": Bt, "N": n},
                {
                    "dY": lnp["dY"],
                    "Z": prev["Z"],
                    "stats": lnp["stats"],
                    "dgamma": lnp["g"]["grad"],
                    "dbeta": lnp["b"]["grad"],
                },
                [_cdiv(n, 64)],
            )
            pb.dispatch(
                T,
                ["reduce.wgsl", "layernorm_bwd.wgsl"],
                "layernorm_bwd",
                {"M": Bt, "N": n},
                {
                    "dY": lnp["dY"],
                    "Z": prev["Z"],
                    "stats": lnp["stats"],
                    "gamma": lnp["g"]["master"],
                    "dZ": prev["dZ"],
                    "flags": "flags",
                },
                [Bt],
            )

    # overflow check + norm partials over every master gradient, then the scaler's verdict
    base = 0
    stats_dispatches = []
    for p in params:
        n = int(np.prod(p["shape"]))
        nwg = min(GRAD_STATS_MAX_WG, _cdiv(n, 256))
        stats_dispatches.append((p, n, nwg, base))
        base += nwg
    pb.f32("norm_partials", (base,), "other")
    for p, n, nwg, b0 in stats_dispatches:
        pb.dispatch(
            T,
            ["reduce.wgsl", "grad_stats.wgsl"],
            "grad_stats",
            {"N": n, "BASE": b0, "NWG": nwg},
            {"G": p["grad"], "state": "state", "partials": "norm_partials", "flags": "flags"},
            [nwg],
        )
    pb.dispatch(
        T,
        ["reduce.wgsl", "scaler.wgsl"],
        "scaler_step",
        {
            "NUM_PARTIALS": base,
            "B": Bt,
            "SCALING": int(cfg.loss_scaling),
            "GROWTH": cfg.growth_factor,
            "BACKOFF": cfg.backoff_factor,
            "INTERVAL": cfg.growth_interval,
            "HYSTERESIS": cfg.hysteresis,
            "MIN_SCALE": cfg.min_scale,
            "CLIP": cfg.clip_norm,
            "LR": cfg.lr,
            "LR_MIN": cfg.min_lr,
            "WARMUP": cfg.warmup,
            "TOTAL": cfg.steps,
            "SCHEDULE": int(cfg.schedule == "cosine"),
            "BETA1": cfg.beta1,
            "BETA2": cfg.beta2,
            "RING": ring,
        },
        {
            "state": "state",
            "flags": "flags",
            "partials": "norm_partials",
            "loss_rows": "loss_rows",
            "metrics": "metrics",
        },
        [1],
    )
    for p in params:
        n = int(np.prod(p["shape"]))
        consts = {
            "N": n,
            "WD": cfg.weight_decay if p["decay"] else 0.0,
            "BETA1": cfg.beta1,
            "BETA2": cfg.beta2,
            "EPS": cfg.eps,
        }
        binds = {"state": "state", "P": p["master"], "G": p["grad"], "Mo": p["m"], "V": p["v"]}
        if p["copy"]:
            rows, cols = p["shape"]
            pb.dispatch(
                T,
                ["adamw.wgsl", "adamw_copy.wgsl"],
                "adamw_copy",
                {**consts, "ROWS": rows, "COLS": cols},
                {**binds, "Wh": p["copy"]},
                _grid(rows * ((cols + 1) // 2)),
            )
        else:
            pb.dispatch(T, ["adamw.wgsl"], "adamw", consts, binds, _grid(n))

    # --- evaluation on the test split: chunks of one batch each -------------------------------
    E = "eval"
    n_test = len(data.test_x)
    pb.dispatch(
        E,
        ["eval.wgsl"],
        "eval_reset",
        {"B": Bt, "C": C},
        {"logits": "logits", "labels": "y", "result": "eval_result"},
        [1],
    )
    for chunk in range(_cdiv(n_test, Bt)):
        pb.dispatch(
            E,
            ["gather.wgsl"],
            "gather_eval",
            {"N_ROWS": n_test, "F": dims[0], "B": Bt, "OFFSET": chunk * Bt, "SEED": 0, "PERM_BITS": 1},
            {"xs": "test_x", "ys": "test_y", "state": "state", "X": "X", "y": "y"},
            _grid(Bt * fw_words),
        )
        forward(E)
        pb.dispatch(
            E,
            ["eval.wgsl"],
            "eval_count",
            {"B": Bt, "C": C},
            {"logits": "logits", "labels": "y", "result": "eval_result"},
            [_cdiv(Bt, 64)],
        )

    memory = {c: 0 for c in CATEGORIES}
    for b in pb.buffers.values():
        memory[b["category"]] += b["bytes"]
    plan: Plan = {
        "format": PLAN_FORMAT,
        "config": cfg.model_dump(),
        "precision": cfg.precision,
        "f16_path": None if path == "fp32" else path,
        "prelude": pb.prelude,
        "required_features": ["shader-f16"] if path == "native" else [],
        "layers": dims,
        "buffers": list(pb.buffers.values()),
        "blob_bytes": len(pb.blob),
        "kernels": list(pb.kernels.values()),
        "programs": pb.programs,
        "params": [
            ParamSpec(
                name=p["name"],
                shape=p["shape"],
                master=p["master"],
                grad=p["grad"],
                m=p["m"],
                v=p["v"],
                copy=p["copy"],
            )
            for p in params
        ],
        "state": {"buffer": "state", "fields": STATE_FIELDS},
        "checkpoint_buffers": [n for p in params for n in (p["master"], p["m"], p["v"], p["copy"]) if n]
        + ["state"],
        "schedule": {
            "steps": cfg.steps,
            "log_every": cfg.log_every,
            "checkpoint_every": cfg.checkpoint_every,
        },
        "metrics": {"buffer": "metrics", "ring": ring, "fields": METRIC_FIELDS},
        "eval": {"result_buffer": "eval_result", "test_rows": n_test},
        "memory": memory,
        "required_limits": required_limits(list(pb.buffers.values()), list(pb.kernels.values())),
    }
    return plan, bytes(pb.blob)
