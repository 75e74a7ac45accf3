"""What every model's plan shares: the data and bookkeeping buffers, parameters with their master
copy, gradient, moments and optional working copy, the optimizer program (overflow check, loss
scaler, AdamW) and the plan dictionary itself. A model (mlp.py, ...) adds its activations and its
forward, backward and evaluation dispatches in between."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..engine.plan import (
    F16_RANGE,
    PLAN_FORMAT,
    DataParallelSpec,
    Dispatch,
    EvalSpec,
    FusedRegion,
    HistogramLayer,
    HistogramSpec,
    ParamSpec,
    Plan,
    PlanBuilder,
    memory_by_category,
    pack_h,
    required_features,
    required_limits,
)
from ..engine.state import METRIC_FIELDS, NO_STEP, STATE_BYTES, STATE_FIELDS, initial_state
from ..engine.tiles import TileTable, default_tiles
from .fp8 import Fp8Layers, fp8_recipe
from .zero import TRAIN_STATS, shard_owners, zero_spec

TRAIN_STEP = "train_step"
TRAIN_GRADS = "train_grads"  # data-parallel: train_step up to complete gradients ...
TRAIN_UPDATE = "train_update"  # ... and from there, after the ranks' gradients are summed
EVAL = "eval"
LOSS_ROWS_ALL = "loss_rows_all"  # data-parallel: the global batch's loss rows, summed over the ranks
LOSS_ROWS_STEP = "loss_rows_step"  # gradient accumulation: the step's loss rows (a rank's: its own)
FLAG_BITS = 3  # common.wgsl's FLAG_H_STORE, FLAG_MASTER_GRAD, FLAG_LOSS
HISTOGRAMS = "histograms"  # the gradient-range lens's program and its counts buffer
LENS_SCRATCH = "lens_scratch"  # where ModelBuilder.histograms builds dispatches before splicing them
EVAL_FLAGS = "eval_flags"  # the overflow flags of program 'eval' (the training step's are "flags")


class Param(TypedDict):
    name: str
    shape: list[int]
    master: str
    grad: str
    m: str
    v: str
    copy: str | None
    decay: bool  # AdamW weight decay applies (weight matrices; not biases or LayerNorm parameters)


Init = Callable[[], np.ndarray]
"""A parameter's initial value, computed when the builder keeps initial contents (not in a dry run)."""


def pytorch_linear_init(rng: np.random.Generator, fan_in: int, shape: tuple[int, ...], gain: float) -> Init:
    """nn.Linear's default init (uniform in +-1/sqrt(fan_in)) times gain, of a weight [in, out] or a
    bias [out]: one draw from `rng` when called (the weight's, then the bias's)."""
    bound = gain / math.sqrt(fan_in)
    return lambda: rng.uniform(-bound, bound, size=shape).astype(np.float32)


def replayed(pb: PlanBuilder, emit: Callable[[str], None]) -> Callable[[str], None]:
    """`emit` (which appends a pass's dispatches to a program) for a pass that appends the same
    dispatches every time and declares nothing after its first (a model's forward pass in program
    'eval', once a chunk): the first call runs it, later ones append what it appended again. The
    plan is the same as with `emit` every time, built in a fraction of the time."""
    recorded: list[Dispatch] = []

    def emit_again(program: str) -> None:
        if not recorded:
            start = len(pb.programs.get(program, []))
            emit(program)
            recorded.extend(pb.programs[program][start:])
        else:
            pb.programs[program] += recorded

    return emit_again


def check_shard(batch_size: int, rank: int, world: int) -> None:
    """ValueError unless the global batch splits evenly over `world` ranks and 0 <= rank < world."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not one of the {world} ranks")
    if batch_size % world:
        raise ValueError(
            f"batch_size {batch_size} does not split over {world} ranks: data-parallel training gives "
            f"each rank batch_size / ranks of every global batch; choose a multiple of {world}"
        )


class ModelBuilder:
    """A PlanBuilder plus the parameter list and the parts of a training plan every model has.

    With `world` > 1 ranks (data-parallel), this rank's plan trains on `local_batch` =
    batch_size / world of every global batch, rows from rank * local_batch on, and its training
    step is two programs, `grads_program` and `update_program` (else both are train_step).

    With cfg.grad_accum N > 1 a step is N micro-batches of batch_size (rows k * batch_size on of the
    step's N * batch_size for micro-batch k, state.micro on the GPU): the model emits one
    micro-batch's dispatches into grads_program and `optimizer` repeats them N times, each ending
    in the sum of its gradients into the step's (`step_grad`, f32) and its loss rows into their slot;
    softmax_xent divides by the step's rows, so the sum is the gradient of the step's mean loss.

    The tile table picks how some launchers run: `matmul` and `attention_matmul` are ops' launchers
    with the tile shape it gives the product's shape; the row kernels (layernorm_fwd/bwd,
    attn_softmax_fwd/bwd) take its form as `rows=mb.rows`. With dry=True the builder is dry
    (PlanBuilder): parameters are declared without drawing their initial values."""

    def __init__(
        self,
        cfg: TrainConfig,
        path: str,
        tiles: TileTable | None = None,
        rank: int = 0,
        world: int = 1,
        *,
        dry: bool = False,
    ):
        check_shard(cfg.batch_size, rank, world)
        self.cfg = cfg
        self.path = path
        self.pb = PlanBuilder(path, dry=dry)
        self.tiles = tiles or TileTable()
        self.pb.subgroup_width = self.tiles.subgroup_width
        self.params: list[Param] = []
        self.rank, self.world = rank, world
        self.local_batch = cfg.batch_size // world
        self.grads_program = TRAIN_STEP if world == 1 else TRAIN_GRADS
        self.update_program = TRAIN_STEP if world == 1 else TRAIN_UPDATE
        self.zero = cfg.zero == 1 and world > 1  # sharded optimizer state (models/zero.py)
        self.stats_program = TRAIN_STATS if self.zero else self.update_program
        self.owners: list[int] = []  # with zero: each parameter's owner rank, set by optimizer
        self.partial_ranges: list[list[int]] = []  # each parameter's [first, count] in norm_partials
        self.zero_spec: dict[str, Any] | None = None  # set by finish
        self.global_rows = 0  # loss rows of the global batch (one micro-batch's), set by bookkeeping
        self.micro_batches = cfg.grad_accum
        # gathers: a micro-batch's rows (windows) over all ranks, 0 without accumulation
        self.micro_stride = cfg.batch_size if cfg.grad_accum > 1 else 0
        self.accumulators: dict[str, str] = {}  # gradient -> the step's sum of it, set by optimizer
        # (dispatch index in grads_program, lens layers counted there): see lens_point
        self.lens_points: list[tuple[int, list[tuple[str, str]]]] = []
        self.histogram_spec: HistogramSpec | None = None  # set by histograms, which finish requires
        recipe = fp8_recipe(cfg)
        self.fp8 = None if recipe is None else Fp8Layers(self.pb, recipe)  # the fp8 layers (models/fp8.py)

    @property
    def rows(self) -> str:
        """The row kernels' form the table gives (TileTable.row_kernels, one of ops.ROW_FORMS)."""
        return self.tiles.row_kernels

    @property
    def step_rows(self) -> int:
        """Loss rows of an optimizer step: every micro-batch's over every rank."""
        return self.global_rows * self.micro_batches

    @property
    def counted_rows(self) -> int | None:
        """softmax_xent's `counted` in the training step: the step's rows on a data-parallel rank or
        with accumulation (so the ranks' and micro-batches' gradients sum to the step's mean), else
        None (this batch's)."""
        return self.step_rows if self.world > 1 or self.micro_batches > 1 else None

    def step_grad(self, p: Param) -> str:
        """The step's gradient of p: the backward pass's own, or with accumulation their sum."""
        return self.accumulators.get(p["grad"], p["grad"])

    @property
    def step_loss_rows(self) -> str:
        """The loss rows this rank computes in a step: one batch's, or with accumulation every
        micro-batch's (LOSS_ROWS_STEP, in the step's order; a data-parallel rank's at their places
        among all the ranks' rows, zeros elsewhere)."""
        return LOSS_ROWS_STEP if self.micro_batches > 1 else "loss_rows"

    def bookkeeping(self, batch: int) -> None:
        """The GPU state, the overflow flags, per-row losses (`batch` of this rank's, and a
        data-parallel rank's buffer for the global batch's), the metrics ring, the eval counters.
        Program 'eval' stores activations with their overflow test too; its bits go to eval_flags
        (EVAL_FLAGS), never read by the scaler, so an evaluation leaves nothing that changes the
        next training step (its overflow would otherwise skip that step)."""
        cfg, pb = self.cfg, self.pb
        state0 = initial_state(cfg.init_scale if cfg.loss_scaling else 1.0, cfg.hysteresis)
        pb.buffer("state", STATE_BYTES, "other", "state", (len(STATE_FIELDS),), state0)
        pb.u32("flags", (4,), "other")
        pb.u32(EVAL_FLAGS, (4,), "other")
        pb.f32("loss_rows", (batch,), "activations")
        self.global_rows = batch * self.world
        if self.micro_batches > 1:  # in the global order; a data-parallel rank's other slots stay 0
            pb.f32(LOSS_ROWS_STEP, (self.step_rows,), "activations")
        if self.world > 1:
            pb.f32(LOSS_ROWS_ALL, (self.step_rows,), "activations")
        # unwritten ring slots hold step 0xFFFFFFFF, so readers can tell them from step 0
        ring = (cfg.log_every, len(METRIC_FIELDS))
        pb.u32("metrics", ring, "other", np.full(ring, NO_STEP))
        pb.u32("eval_result", (2,), "other")

    def param(
        self, name: str, shape: Sequence[int], init: Init, *, copy: bool = False, decay: bool = False
    ) -> Param:
        """A trained tensor: f32 master (from `init`, called here unless the builder is dry),
        gradient and both Adam moments; with `copy` also a working copy in the activation format
        (what the matmuls read); `decay`: AdamW's weight decay applies."""
        pb, shape = self.pb, list(shape)
        value = None if pb.dry else init()
        entry: Param = {
            "name": name,
            "shape": shape,
            "master": pb.f32(name, shape, "master_weights", value),
            "grad": pb.f32("g_" + name, shape, "gradients"),
            "m": pb.f32("m_" + name, shape, "optimizer_state"),
            "v": pb.f32("v_" + name, shape, "optimizer_state"),
            "copy": None,
            "decay": decay,
        }
        if copy:
            rows, cols = shape
            packed = None if value is None else pack_h(value, self.path)
            entry["copy"] = pb.h("h_" + name, rows, cols, category="working_weights", init=packed)
        self.params.append(entry)
        return entry

    def matmul(
        self,
        program: str,
        variant: str,
        *,
        A: str,
        B: str,
        C: str,
        M: int,
        N: int,
        K: int,
        a_act: int = 0,
        trans_a: int = 0,
        trans_b: int = 0,
        bias: str | None = None,
        Zprev: str | None = None,
        out_act: int = 0,
        flags: str = "flags",
        a_image: dict[str, int] | None = None,
    ) -> None:
        """ops.matmul of one (unbatched) product, with the tile shape the table gives its shape (a
        convolution's, A an image read as its patches with a_image, as any other of that shape that
        was tuned; the shipped class tables were measured on plain products only, and the page on
        SwiftShader lost its GPU instance creating the implicit convolution's pipeline with them:
        such products take the default tiles unless the tune cache has their class)."""
        tiles = self.tiles.for_shape(self.path, M, N, K, trans_a, trans_b)
        if a_image is not None and self.tiles.source(self.path, M, N, K, trans_a, trans_b) == "shipped":
            tiles = default_tiles(M, N, K)
        ops.matmul(
            self.pb, program, variant, A=A, B=B, C=C, M=M, N=N, K=K, a_act=a_act, trans_a=trans_a,
            trans_b=trans_b, bias=bias, Zprev=Zprev, out_act=out_act, flags=flags, tiles=tiles,
            a_image=a_image,
        )  # fmt: skip

    def attention_matmul(
        self,
        program: str,
        variant: str,
        *,
        B: int,
        T: int,
        H: int,
        d: int,
        qkv: str | None = None,
        P: str | None = None,
        dO: str | None = None,
        dS: str | None = None,
        S: str | None = None,
        O: str | None = None,
        dP: str | None = None,
        dqkv: str | None = None,
        flags: str = "flags",
    ) -> None:
        """ops.attention_matmul with the tile shape the table gives one batch-head's product."""
        tiles = self.tiles.for_shape(self.path, *ops.attention_shape(variant, T, d))
        ops.attention_matmul(
            self.pb, program, variant, B=B, T=T, H=H, d=d, qkv=qkv, P=P, dO=dO, dS=dS, S=S, O=O, dP=dP,
            dqkv=dqkv, flags=flags, tiles=tiles,
        )  # fmt: skip

    def weight_transposed(self, program: str, p: Param) -> tuple[str, int]:
        """Weight p's working copy for a product that reads it transposed (the GPT's backward pass:
        dX = dY Wᵀ), and that product's trans_b: the copy as stored and 1, or with the table's
        weights form "transposed" (TileTable.weights) a transposed copy made here, in `program`,
        each time it runs (transpose_h into hT_<name>: the same bits), and 0. The MLPs keep the
        copies as stored: at their sizes the transposes cost about what the A·B products gain
        (docs/benchmarks.md "fifth pass")."""
        if self.tiles.weights != "transposed":
            return str(p["copy"]), 1
        rows, cols = p["shape"]
        t = self.pb.h("hT_" + p["name"], cols, rows, category="working_weights")
        ops.transpose_h(self.pb, program, X=str(p["copy"]), Y=t, rows=rows, cols=cols)
        return t, 0

    def accumulate(self) -> None:
        """Gradient accumulation: grads_program (one micro-batch) ends in adding its gradients into
        the step's sums (acc_g_*, gradients) and its loss rows into LOSS_ROWS_STEP, then advances
        state.micro, and is repeated micro_batches times: one submit for the step, no host work
        between micro-batches. The lens's points move to the last micro-batch (its values are the
        ones left in the buffers when the step ends)."""
        pb, program, n = self.pb, self.grads_program, self.micro_batches
        for p in self.params:
            acc = pb.f32("acc_" + p["grad"], p["shape"], "gradients")
            self.accumulators[p["grad"]] = acc
            ops.grad_accum(pb, program, G=p["grad"], A=acc, N=math.prod(p["shape"]))
        rows = self.global_rows // self.world
        ops.accum_rows(
            pb, program, src="loss_rows", dst=LOSS_ROWS_STEP, rows=rows, micro_batches=n,
            stride=self.global_rows, offset=self.rank * rows,
        )  # fmt: skip
        ops.micro_next(pb, program, micro_batches=n)
        one = pb.programs[program]
        pb.programs[program] = one * n
        self.lens_points = [(at + (n - 1) * len(one), lays) for at, lays in self.lens_points]

    def optimizer(self) -> None:
        """After the backward pass (in update_program; with accumulation after the micro-batches,
        `accumulate`): overflow check and norm partials over every step gradient, the scaler's
        verdict and metrics record (over the step's loss rows), then AdamW on every parameter."""
        if self.micro_batches > 1:
            self.accumulate()
        cfg, pb, program, batch = self.cfg, self.pb, self.update_program, self.step_rows
        bases, total = [], 0
        for p in self.params:
            bases.append(total)
            count = ops.grad_stats_workgroups(math.prod(p["shape"]))
            self.partial_ranges.append([total, count])
            total += count
        self.owners = shard_owners(self.params, self.world) if self.zero else [self.rank] * len(self.params)
        mine = [owner == self.rank for owner in self.owners]
        pb.f32("norm_partials", (total,), "other")
        pb.programs.setdefault(self.stats_program, [])  # a rank may own no parameter
        for p, base, own in zip(self.params, bases, mine, strict=True):
            if own:
                ops.grad_stats(
                    pb, self.stats_program, G=self.step_grad(p), partials="norm_partials",
                    N=math.prod(p["shape"]), BASE=base,
                )  # fmt: skip
        ops.scaler_step(
            pb,
            program,
            scaler_constants(cfg, total, batch),
            partials="norm_partials",
            loss_rows=LOSS_ROWS_ALL if self.world > 1 else self.step_loss_rows,
            metrics="metrics",
        )
        b1, b2, eps = cfg.beta1, cfg.beta2, cfg.eps
        for p in (p for p, own in zip(self.params, mine, strict=True) if own):
            wd = cfg.weight_decay if p["decay"] else 0.0
            P, G, Mo, V = p["master"], self.step_grad(p), p["m"], p["v"]
            if p["copy"]:
                rows, cols = p["shape"]
                ops.adamw_copy(
                    pb, program, P=P, G=G, Mo=Mo, V=V, Wh=p["copy"], ROWS=rows, COLS=cols, WD=wd, BETA1=b1,
                    BETA2=b2, EPS=eps,
                )  # fmt: skip
            else:
                N = math.prod(p["shape"])
                ops.adamw(pb, program, P=P, G=G, Mo=Mo, V=V, N=N, WD=wd, BETA1=b1, BETA2=b2, EPS=eps)
        if self.fp8 is not None:
            self.fp8.update(program)

    def lens_point(self, layers: list[tuple[str, str]]) -> None:
        """Here, in the backward pass of grads_program, the (label, buffer) activation gradients
        `layers` hold this step's values for the last time (a later block overwrites the buffers
        it shares with this one): the lens counts them at this point. Layers without a point are
        counted at the end of the step."""
        self.lens_points.append((len(self.pb.programs[self.grads_program]), list(layers)))

    def histograms(self, layers: list[tuple[str, str]]) -> None:
        """Program HISTOGRAMS, the gradient-range lens: a training step that also counts the log2
        histograms of the (label, buffer) activation gradients into one u32 counts buffer, each
        where the backward pass leaves its final values (lens_point; else after the step). The
        runtimes run it instead of grads_program on a step whose metrics they read, so counting
        costs nothing on the other steps; plan["histograms"] describes it. Call after the other
        programs: train_step and eval stay as they were."""
        pb = self.pb
        buckets = ops.grad_hist_buckets()
        spec_layers: list[HistogramLayer] = []
        for i, (name, buffer) in enumerate(layers):
            rows, cols = pb.buffers[buffer]["shape"]
            spec_layers.append({"name": name, "buffer": buffer, "shape": [rows, cols], "offset": i * buckets})
        by_name = {lay["name"]: lay for lay in spec_layers}
        pointed = [name for _, lays in self.lens_points for name, _ in lays]
        if set(pointed) - set(by_name) or len(set(pointed)) != len(pointed):
            raise ValueError(f"lens points {pointed} must name distinct layers of {list(by_name)}")
        pb.u32(HISTOGRAMS, (len(layers), buckets), "other")

        def counting(names: list[str]) -> list[Dispatch]:
            for name in names:
                lay = by_name[name]
                rows, cols = lay["shape"]
                ops.grad_hist(
                    pb,
                    LENS_SCRATCH,
                    X=lay["buffer"],
                    counts=HISTOGRAMS,
                    ROWS=rows,
                    COLS=cols,
                    BASE=lay["offset"],
                )
            return pb.programs.pop(LENS_SCRATCH, [])

        ops.grad_hist_clear(pb, LENS_SCRATCH, counts=HISTOGRAMS, N=buckets * len(layers))
        step = pb.programs[self.grads_program]
        program = pb.programs.pop(LENS_SCRATCH)
        done = 0
        for at, lays in sorted(self.lens_points, key=lambda p: p[0]):
            program += step[done:at] + counting([name for name, _ in lays])
            done = at
        program += step[done:] + counting([lay["name"] for lay in spec_layers if lay["name"] not in pointed])
        pb.programs[HISTOGRAMS] = program
        self.histogram_spec = {
            "program": HISTOGRAMS,
            "replaces": self.grads_program,
            "buffer": HISTOGRAMS,
            "e_min": ops.GRAD_HIST_E_MIN,
            "e_max": ops.GRAD_HIST_E_MAX,
            "buckets": buckets,
            "layers": spec_layers,
            "f16_range": dict(F16_RANGE),
        }

    def finish(self, layers: list[int], evaluation: EvalSpec) -> tuple[Plan, bytes]:
        cfg, pb, path = self.cfg, self.pb, self.path
        if self.histogram_spec is None:
            raise ValueError("the model's plan has no histograms program: call ModelBuilder.histograms")
        if self.zero:
            programs = (self.stats_program, self.update_program)
            kept = list(ops.FP8_BUFFERS) if self.fp8 else []
            self.zero_spec = zero_spec(pb, self.params, self.owners, self.rank, programs, kept)
        memory = memory_by_category(list(pb.buffers.values()))
        params = self.params
        plan: Plan = {
            "format": PLAN_FORMAT,
            "config": cfg.model_dump(),
            "precision": cfg.precision,
            "f16_path": None if path == "fp32" else path,
            "prelude": pb.prelude,
            "required_features": required_features(path, list(pb.kernels.values())),
            "layers": layers,
            "buffers": list(pb.buffers.values()),
            "blob_bytes": len(pb.blob),
            "kernels": list(pb.kernels.values()),
            "programs": pb.programs,
            "matmuls": pb.matmuls,
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
            "checkpoint_buffers": [
                n for p in params for n in (p["master"], p["m"], p["v"], p["copy"]) if n and n in pb.buffers
            ]
            + ["state"]
            + (list(ops.FP8_BUFFERS) if self.fp8 else []),
            "schedule": {
                "steps": cfg.steps,
                "log_every": cfg.log_every,
                "checkpoint_every": cfg.checkpoint_every,
            },
            "metrics": {"buffer": "metrics", "ring": cfg.log_every, "fields": METRIC_FIELDS},
            "eval": evaluation,
            "memory": memory,
            "histograms": self.histogram_spec,
            "required_limits": required_limits(list(pb.buffers.values()), list(pb.kernels.values())),
        }
        if self.fp8 is not None:
            plan["fp8"] = self.fp8.describe()
        if cfg.grad_accum > 1:
            plan["accumulation"] = cfg.accumulation_line
        if self.world > 1:
            plan["data_parallel"] = self.data_parallel_spec()
        return plan, bytes(pb.blob)

    def data_parallel_spec(self) -> DataParallelSpec:
        """The fused all-reduce buffer's layout: every step gradient, then the step's loss rows
        (this rank's at its place, zeros elsewhere: the sum assembles them; with accumulation the
        whole LOSS_ROWS_STEP, which has this rank's rows of every micro-batch at their places),
        then the flag bits."""
        gradients: list[FusedRegion] = []
        offset = 0
        for p in self.params:
            n = math.prod(p["shape"])
            gradients.append({"buffer": self.step_grad(p), "offset": offset, "floats": n})
            offset += n
        local = self.global_rows // self.world
        loss_base = offset
        accumulated = self.micro_batches > 1
        return {
            "rank": self.rank,
            "world": self.world,
            "grads_program": self.grads_program,
            "update_program": self.update_program,
            "floats": loss_base + self.step_rows + FLAG_BITS,
            "gradients": gradients,
            "loss": {
                "buffer": self.step_loss_rows,
                "offset": loss_base + (0 if accumulated else self.rank * local),
                "floats": self.step_rows if accumulated else local,
                "all": LOSS_ROWS_ALL,
                "all_offset": loss_base,
                "rows": self.step_rows,
            },
            "flags": {"buffer": "flags", "offset": loss_base + self.step_rows, "bits": FLAG_BITS},
            "zero": {**self.zero_spec, "partials": self.partial_ranges} if self.zero_spec else None,
            "amax": "fp8_amax" if self.fp8 is not None else None,
        }


def scaler_constants(cfg: TrainConfig, num_partials: int, batch: int) -> dict[str, Any]:
    """scaler.wgsl's overrides: the loss scaler (GradScaler semantics), clipping, the lr schedule,
    Adam's betas for the bias corrections; bf16 skips a step that overflowed without a scale."""
    skip = {"SKIP_OVERFLOW": 1} if cfg.skips_unscaled_overflow else {}
    return {
        **skip,
        "NUM_PARTIALS": num_partials,
        "B": batch,
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
        "LOG_BETA1": ops.adam_log_beta(cfg.beta1),
        "LOG_BETA2": ops.adam_log_beta(cfg.beta2),
        "RING": cfg.log_every,
    }


def check_params(params: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> None:
    """ValueError unless `params` (given initial or sampling parameters) has exactly the names and
    shapes `shapes`."""
    if set(params) != set(shapes) or any(tuple(np.shape(params[k])) != s for k, s in shapes.items()):
        raise ValueError(f"params must have exactly the shapes {shapes}")
