"""`webmp export RUN OUT.safetensors --layout torch|webmp`: the trained weights of a run directory
(the f32 masters of its checkpoint) as a safetensors file, in webmp's names and layouts (what
`--init-weights` reads) or as the state_dict of its equivalent PyTorch Sequential
(webmp.nn.torch_layout): a network of webmp.nn layers, or a built-in model as the network it is
(mlp, mlp-ln: webmp.nn.network.mlp_network; gpt: webmp.nn.gpt.gpt_network, a tied head sharing
the embedding's weight). The optimizer state, working copies and GPU state words stay behind."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save

from ..config import TrainConfig
from ..models import network_of
from ..nn.torch_layout import to_torch
from .checkpoint import TENSORS, read_checkpoint
from .rundir import atomic_write

LAYOUTS = ("torch", "webmp")
EXPORT_FORMAT = "webmp-weights/1"  # not a checkpoint's format: --init-weights checks every name


@dataclass(frozen=True)
class Exported:
    path: Path
    tensors: int
    step: int
    layout: str


def run_weights(run: str | Path) -> tuple[TrainConfig, dict[str, np.ndarray], int]:
    """A run's config, its parameters (webmp's names and layouts, f32) and the step they are at;
    ValueError in one line naming what is wrong."""
    d = Path(run)
    if not d.is_dir():
        raise ValueError(f"{d}: no such run directory")
    if not (d / TENSORS).is_file():
        raise ValueError(f"{d} has no checkpoint ({TENSORS}); the run has not finished or saved one")
    tensors, meta = read_checkpoint(d)
    saved = meta["config"]
    try:
        cfg = TrainConfig(**{k: v for k, v in saved.items() if k in TrainConfig.model_fields})
    except ValueError as e:
        raise ValueError(f"{d}: its configuration is not valid ({' '.join(str(e).split())})") from None
    if cfg.model_spec is not None:
        shapes = {n: p.shape for n, p in cfg.model_spec.param_shapes().items()}
    else:  # a built-in model: its parameters are the masters, each saved with both Adam moments
        shapes = {n: t.shape for n, t in tensors.items() if f"m_{n}" in tensors and f"v_{n}" in tensors}
    weights = {}
    for name, shape in shapes.items():
        t = tensors.get(name)
        if t is None or t.shape != shape or t.dtype != np.float32:
            want = f"{list(shape)} f32"
            raise ValueError(f"{d}: the checkpoint's {name} does not fit its configuration ({want})")
        weights[name] = t
    return cfg, weights, meta["step"]


def export_weights(run: str | Path, out: str | Path, layout: str) -> Exported:
    """Writes the run's weights to `out` (replaced at once) in `layout` ('torch' or 'webmp')."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: one of {', '.join(LAYOUTS)}")
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"{out} is a directory; give the path of the .safetensors file to write")
    if not out.parent.is_dir():
        raise ValueError(f"{out}: its directory {out.parent} does not exist")
    cfg, weights, step = run_weights(run)
    if layout == "torch":
        net, names = network_of(cfg, {name: w.shape for name, w in weights.items()})
        weights = to_torch(net, {path: weights[name] for path, name in names.items()}, f"{run}'s weights")
    metadata = {"format": EXPORT_FORMAT, "layout": layout, "model": cfg.model, "step": str(step)}
    atomic_write(out, save(weights, metadata=metadata))
    return Exported(out, len(weights), step, layout)
