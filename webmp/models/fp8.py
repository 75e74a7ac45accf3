"""`--precision fp8` in a plan: the layers whose matmuls read fp8 operands, their three tensor
slots each (input E4M3, weight E4M3, output gradient E5M2: webmp.engine.fp8), the casts placed
right before those matmuls, and the delayed scaling's update after each step's optimizer.

The casts write the quantised values (exact in the bf16 storage) into buffers of their own, so a
value other kernels read is never changed, and those are transient, shared by every layer of the
same shape: fp8_input_<rows>x<cols> and fp8_grad_output_<rows>x<cols>. The backward pass casts the
layer's (kept) input again for the weight gradient rather than keeping a second copy of it: the
same kernel at the same scale on the same values gives the same bits. The weight's working copy
h_<name> is cast from its f32 master before each forward pass that reads it (training and
evaluation alike; only a training step's forward records amax, so an evaluation, or the backward
pass's second cast, changes no later step). The
scales live on the GPU (fp8_scale, fp8_amax, fp8_history, fp8_cursor: ops.FP8_BUFFERS), sized once
every layer has its slots, and go into checkpoints."""

from __future__ import annotations

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..engine.fp8 import ALGOS, Fp8Recipe
from ..engine.plan import PlanBuilder


def fp8_recipe(cfg: TrainConfig) -> Fp8Recipe | None:
    if cfg.precision != "fp8":
        return None
    return Fp8Recipe(
        margin=cfg.fp8_margin,
        amax_history_len=cfg.fp8_amax_history,
        amax_compute_algo=cfg.fp8_amax_algo,
        keep_ends=cfg.fp8_keep_ends,
    )


class Fp8Layers:
    """The plan's fp8 layers and their slots (layer i: slots 3i, 3i + 1, 3i + 2), in first-use order."""

    def __init__(self, pb: PlanBuilder, recipe: Fp8Recipe):
        self.pb, self.recipe = pb, recipe
        self.layers: list[str] = []
        self.sized = False
        for name in ops.FP8_BUFFERS:  # sized by `update`, when the slots are known
            pb.u32(name, (1,), "other")

    def first_slot(self, layer: str) -> int:
        if layer not in self.layers:
            if self.sized:
                raise ValueError(f"fp8 layer {layer} appeared after the scales were sized: build it earlier")
            self.layers.append(layer)
        return 3 * self.layers.index(layer)

    def input(self, program: str, layer: str, x: str, rows: int, cols: int, act: int, record: bool) -> str:
        """The layer's input x (the activation `act` fused before the layer applied) cast to E4M3."""
        y = f"fp8_input_{rows}x{cols}"
        if y not in self.pb.buffers:
            self.pb.h(y, rows, cols)
        ops.fp8_cast(self.pb, program, X=x, Y=y, rows=rows, cols=cols, slot=self.first_slot(layer), act=act,
                     record=record)  # fmt: skip
        return y

    def weight(
        self, program: str, layer: str, master: str, copy: str, rows: int, cols: int, record: bool
    ) -> None:
        """The weight's working copy = its f32 master cast to E4M3 (at the slot's current scale)."""
        slot = self.first_slot(layer) + 1
        ops.fp8_cast_weights(
            self.pb, program, P=master, Wh=copy, rows=rows, cols=cols, slot=slot, record=record
        )

    def grad_output(self, program: str, layer: str, dy: str, rows: int, cols: int) -> str:
        """The gradient of the layer's output cast to E5M2 (a training step's: recorded)."""
        y = f"fp8_grad_output_{rows}x{cols}"
        if y not in self.pb.buffers:
            self.pb.h(y, rows, cols)
        slot = self.first_slot(layer) + 2
        ops.fp8_cast(self.pb, program, X=dy, Y=y, rows=rows, cols=cols, slot=slot, act=0, record=True)
        return y

    def update(self, program: str) -> None:
        """After the step's update: each slot's amax into its history and its next scale."""
        slots, length = 3 * len(self.layers), self.recipe.amax_history_len
        if not slots:
            raise ValueError(
                "--precision fp8 found no layer to quantise: fp8 quantises Linear layers (and the gpt's "
                "attention projections), not convolutions, and keeps a network's first and last layer in "
                "bf16 (--no-fp8-keep-ends quantises those too)"
            )
        self.size()
        r = self.recipe
        ops.fp8_scales(
            self.pb, program, slots=slots, length=length, algo=ALGOS[r.amax_compute_algo], margin=r.margin
        )

    def size(self, scale: np.ndarray | None = None) -> None:
        """The scale buffers sized for the layers' slots (scale: the slots' exponents to start from,
        a checkpoint's fp8_scale; None: 0, a scale of 1, as a new run starts)."""
        slots, length = 3 * len(self.layers), self.recipe.amax_history_len
        if scale is not None and np.shape(scale) != (slots,):
            raise ValueError(
                f"fp8_scale holds {np.size(scale)} exponents, but this model has {slots} fp8 slots"
            )
        for name, n in zip(ops.FP8_BUFFERS, (slots, slots, slots * length, 1), strict=True):
            init = (
                np.asarray(scale, np.int32).tobytes() if name == "fp8_scale" and scale is not None else None
            )
            self.pb.resize(name, (n,), init)
        self.sized = True

    def describe(self) -> dict:
        return Fp8Recipe(**{**self.recipe.__dict__, "layers": tuple(self.layers)}).describe()
