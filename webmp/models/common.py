"""What every model's plan shares: the data and bookkeeping buffers, parameters with their master
copy, gradient, moments and optional working copy, the optimizer program (overflow check, loss
scaler, AdamW) and the plan dictionary itself. A model (mlp.py, ...) adds its activations and its
forward, backward and evaluation dispatches in between."""

from __future__ import annotations

import math
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
from ..engine.tiles import TileTable

TRAIN_STEP = "train_step"
TRAIN_GRADS = "train_grads"  # data-parallel: train_step up to complete gradients ...
TRAIN_UPDATE = "train_update"  # ... and from there, after the ranks' gradients are summed
EVAL = "eval"
LOSS_ROWS_ALL = "loss_rows_all"  # data-parallel: the global batch's loss rows, summed over the ranks
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


def pytorch_linear_init(
    fan_in: int, fan_out: int, rng: np.random.Generator, gain: float
) -> tuple[np.ndarray, np.ndarray]:
    """nn.Linear's default init (uniform in +-1/sqrt(fan_in)) times gain; weight stored [in, out]."""
    bound = gain / math.sqrt(fan_in)
    w = rng.uniform(-bound, bound, size=(fan_in, fan_out)).astype(np.float32)
    b = rng.uniform(-bound, bound, size=fan_out).astype(np.float32)
    return w, b


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
    step is two programs, `grads_program` and `update_program` (else both are train_step)."""

    def __init__(
        self, cfg: TrainConfig, path: str, tiles: TileTable | None = None, rank: int = 0, world: int = 1
    ):
        check_shard(cfg.batch_size, rank, world)
        self.cfg = cfg
        self.path = path
        self.pb = PlanBuilder(path)
        self.tiles = tiles or TileTable()
        self.params: list[Param] = []
        self.rank, self.world = rank, world
        self.local_batch = cfg.batch_size // world
        self.grads_program = TRAIN_STEP if world == 1 else TRAIN_GRADS
        self.update_program = TRAIN_STEP if world == 1 else TRAIN_UPDATE
        self.global_rows = 0  # loss rows of the global batch, set by bookkeeping
        # (dispatch index in grads_program, lens layers counted there): see lens_point
        self.lens_points: list[tuple[int, list[tuple[str, str]]]] = []

    @property
    def counted_rows(self) -> int | None:
        """softmax_xent's `counted` in the training step: the global batch's rows on a data-parallel
        rank (so the ranks' gradients sum to the global mean's), else None (this batch's)."""
        return self.global_rows if self.world > 1 else None
        self.histogram_spec: HistogramSpec | None = None

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
        if self.world > 1:
            pb.f32(LOSS_ROWS_ALL, (self.global_rows,), "activations")
        # unwritten ring slots hold step 0xFFFFFFFF, so readers can tell them from step 0
        ring = (cfg.log_every, len(METRIC_FIELDS))
        pb.u32("metrics", ring, "other", np.full(ring, NO_STEP))
        pb.u32("eval_result", (2,), "other")

    def param(self, name: str, init: np.ndarray, copy_shape: tuple[int, int] | None = None) -> Param:
        """A trained tensor: f32 master, gradient and both Adam moments; with copy_shape also a
        working copy in the activation format (what the matmuls read), and weight decay."""
        pb, shape = self.pb, list(init.shape)
        entry: Param = {
            "name": name,
            "shape": shape,
            "master": pb.f32(name, shape, "master_weights", init),
            "grad": pb.f32("g_" + name, shape, "gradients"),
            "m": pb.f32("m_" + name, shape, "optimizer_state"),
            "v": pb.f32("v_" + name, shape, "optimizer_state"),
            "copy": None,
            "decay": copy_shape is not None,
        }
        if copy_shape is not None:
            rows, cols = copy_shape
            entry["copy"] = pb.h(
                "h_" + name, rows, cols, category="working_weights", init=pack_h(init, self.path)
            )
        self.params.append(entry)
        return entry

    def matmul(self, program: str, variant: str, **kw: Any) -> None:
        """ops.matmul with the tile shape the table gives this shape."""
        shape = (self.path, kw["M"], kw["N"], kw["K"], kw.get("trans_a", 0), kw.get("trans_b", 0))
        ops.matmul(self.pb, program, variant, tiles=self.tiles.for_shape(*shape), **kw)

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

    def attention_matmul(self, program: str, variant: str, **kw: Any) -> None:
        """ops.attention_matmul with the tile shape the table gives one batch-head's product."""
        shape = ops.attention_shape(variant, kw["T"], kw["d"])
        ops.attention_matmul(self.pb, program, variant, tiles=self.tiles.for_shape(self.path, *shape), **kw)

    def layernorm_fwd(self, program: str, **kw: Any) -> None:
        """ops.layernorm_fwd in the row kernels' form the table gives (TileTable.row_kernels)."""
        ops.layernorm_fwd(self.pb, program, rows=self.tiles.row_kernels, **kw)

    def layernorm_bwd(self, program: str, **kw: Any) -> None:
        """ops.layernorm_bwd in the table's row kernels' form."""
        ops.layernorm_bwd(self.pb, program, rows=self.tiles.row_kernels, **kw)

    def attn_softmax_fwd(self, program: str, **kw: Any) -> None:
        """ops.attn_softmax_fwd in the table's row kernels' form."""
        ops.attn_softmax_fwd(self.pb, program, rows=self.tiles.row_kernels, **kw)

    def attn_softmax_bwd(self, program: str, **kw: Any) -> None:
        """ops.attn_softmax_bwd in the table's row kernels' form."""
        ops.attn_softmax_bwd(self.pb, program, rows=self.tiles.row_kernels, **kw)

    def optimizer(self) -> None:
        """After the backward pass (in update_program): overflow check and norm partials over every
        master gradient, the scaler's verdict and metrics record (over the global batch's loss
        rows), then AdamW on every parameter."""
        cfg, pb, program, batch = self.cfg, self.pb, self.update_program, self.global_rows
        bases, total = [], 0
        for p in self.params:
            bases.append(total)
            total += ops.grad_stats_workgroups(int(np.prod(p["shape"])))
        pb.f32("norm_partials", (total,), "other")
        for p, base in zip(self.params, bases, strict=True):
            ops.grad_stats(
                pb, program, G=p["grad"], partials="norm_partials", N=int(np.prod(p["shape"])), BASE=base
            )
        ops.scaler_step(
            pb,
            program,
            scaler_constants(cfg, total, batch),
            partials="norm_partials",
            loss_rows=LOSS_ROWS_ALL if self.world > 1 else "loss_rows",
            metrics="metrics",
        )
        for p in self.params:
            wd = cfg.weight_decay if p["decay"] else 0.0
            hyper: dict[str, Any] = {"WD": wd, "BETA1": cfg.beta1, "BETA2": cfg.beta2, "EPS": cfg.eps}
            moments: dict[str, Any] = {"P": p["master"], "G": p["grad"], "Mo": p["m"], "V": p["v"]}
            if p["copy"]:
                rows, cols = p["shape"]
                ops.adamw_copy(pb, program, Wh=p["copy"], ROWS=rows, COLS=cols, **moments, **hyper)
            else:
                ops.adamw(pb, program, N=int(np.prod(p["shape"])), **moments, **hyper)

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
            "checkpoint_buffers": [n for p in params for n in (p["master"], p["m"], p["v"], p["copy"]) if n]
            + ["state"],
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
        if self.world > 1:
            plan["data_parallel"] = self.data_parallel_spec()
        return plan, bytes(pb.blob)

    def data_parallel_spec(self) -> DataParallelSpec:
        """The fused all-reduce buffer's layout: every gradient, then the global batch's loss rows
        (this rank's at its place, zeros elsewhere: the sum assembles them), then the flag bits."""
        gradients: list[FusedRegion] = []
        offset = 0
        for p in self.params:
            n = int(np.prod(p["shape"]))
            gradients.append({"buffer": p["grad"], "offset": offset, "floats": n})
            offset += n
        local = self.global_rows // self.world
        loss_base = offset
        return {
            "rank": self.rank,
            "world": self.world,
            "grads_program": self.grads_program,
            "update_program": self.update_program,
            "floats": loss_base + self.global_rows + FLAG_BITS,
            "gradients": gradients,
            "loss": {
                "buffer": "loss_rows",
                "offset": loss_base + self.rank * local,
                "floats": local,
                "all": LOSS_ROWS_ALL,
                "all_offset": loss_base,
                "rows": self.global_rows,
            },
            "flags": {"buffer": "flags", "offset": loss_base + self.global_rows, "bits": FLAG_BITS},
        }


def scaler_constants(cfg: TrainConfig, num_partials: int, batch: int) -> dict[str, Any]:
    """scaler.wgsl's overrides: the loss scaler (GradScaler semantics), clipping, the lr schedule,
    Adam's betas for the bias corrections."""
    return {
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
