"""The MLP: Linear layers with an activation between them (model 'mlp'), optionally LayerNorm after
each hidden Linear ('mlp-ln'), softmax cross-entropy over the classes.

Its plan is the network webmp.nn.mlp.mlp_network's (MLPNet: a Net, webmp/models/net.py, whose nodes
emit the dispatches) under the MLP's own names: parameters W0, b0, ln_g0, ... (mlp_names), buffers
below (mlp_buffers), declared in the order they always had and drawn as they always were, so that
its plans, checkpoints and curves are the ones it had when its dispatches were listed here by hand.

Each activation is fused into the next linear layer's matmuls (applied as they load its operand),
so only pre-activations (Z, or the LayerNorm output Y) are stored; matmul_dgrad multiplies by the
activation's derivative in its epilogue. Weight matrices are stored [in, out] with an f16 working
copy; they get weight decay, biases and LayerNorm parameters do not.

Buffers per hidden layer l: Z{l} (its linear layer's output) and dZ{l}; with LayerNorm Y{l}, dY{l}
and ln_stats{l} (mean, rstd: f32). The last layer's output is the f32 logits, its gradient dlogits.
"""

from __future__ import annotations

from ..config import TrainConfig
from ..data.tables import Dataset
from ..engine.plan import Plan
from ..engine.tiles import TileTable
from ..nn.layers import LayerNorm, Linear, ParamShape
from ..nn.mlp import mlp_names, mlp_network
from ..nn.network import Traced
from .common import Init, ModelBuilder, pytorch_linear_init
from .net import Net


def build_mlp_plan(
    cfg: TrainConfig,
    data: Dataset,
    path: str,
    tiles: TileTable | None = None,
    rank: int = 0,
    world: int = 1,
    *,
    dry: bool = False,
) -> tuple[Plan, bytes]:
    """The MLP's plan; with `world` > 1, data-parallel rank `rank`'s (ModelBuilder); dry: a dry run."""
    mb = ModelBuilder(cfg, path, tiles, rank, world, dry=dry)
    mlp = MLPNet(mb, data)
    mlp.train_step()
    mb.optimizer()
    evaluation = mlp.evaluation()
    mb.histograms(mlp.lens_layers())
    return mb.finish(mlp.dims, evaluation)


def mlp_buffers(n_hidden: int, layernorm: bool) -> dict[str, str]:
    """{a buffer of mlp_network's nodes (by its layer's path): the MLP's name}: hidden layer l's
    values and their gradients (a value's gradient is d_<its buffer>)."""
    per = 3 if layernorm else 2
    names: dict[str, str] = {}
    for l in range(n_hidden):
        k = l * per
        names |= {f"layers.{k}.y": f"Z{l}", f"d_Z{l}": f"dZ{l}"}
        if layernorm:
            ln = f"layers.{k + 1}"
            names |= {f"{ln}.y": f"Y{l}", f"{ln}.stats": f"ln_stats{l}", f"d_Y{l}": f"dY{l}"}
    return names


class MLPNet(Net):
    """The MLP's training plan: mlp_network's nodes under the MLP's names (mlp_names, mlp_buffers),
    each layer's activations declared right after its parameters (`placed`), and its weights and
    biases PyTorch's default init times cfg.init_gain, drawn in the layers' order from numpy's
    generator seeded by cfg.seed (with gain 1 the network's own draw)."""

    def __init__(self, mb: ModelBuilder, data: Dataset):
        cfg = mb.cfg
        self.dims = [data.features, *cfg.hidden, data.classes]
        self.layernorm = ln = cfg.model == "mlp-ln"
        self.names = mlp_names(len(cfg.hidden), ln) | mlp_buffers(len(cfg.hidden), ln)
        super().__init__(mb, mlp_network(data.features, cfg.hidden, data.classes, cfg.act, ln), data)

    def named(self, name: str) -> str:
        return self.names.get(name, name)

    def placed(self, t: Traced) -> None:
        """A layer's output and its gradient (Z, dZ; Y, dY and ln_stats; the last layer's logits,
        dlogits) right after its parameters; the activations store nothing (fused)."""
        pb, Bt, n = self.pb, self.Bt, t.out_shape[0]
        if t is self.traced[-1]:
            pb.f32("logits", (Bt, n), "activations")
            pb.h("dlogits", Bt, n)
        elif isinstance(t.layer, Linear | LayerNorm):
            self.act("d_" + self.act(f"{t.path}.y", Bt, n), Bt, n)
            if isinstance(t.layer, LayerNorm):
                pb.f32(self.named(f"{t.path}.stats"), (Bt, 2), "activations")

    def initial(self, name: str, p: ParamShape) -> Init | None:
        if p.fill is not None:  # a LayerNorm's gain and shift
            return None
        return pytorch_linear_init(self.rng, p.fan_in, p.shape, self.mb.cfg.init_gain)

    def lens_layers(self) -> list[tuple[str, str]]:
        """The gradient-range lens's layers: every hidden dZ (and dY), then dlogits."""
        per_layer = ("dZ", "dY") if self.layernorm else ("dZ",)
        hidden = [f"{d}{l}" for l in range(len(self.dims) - 2) for d in per_layer]
        return [(n, n) for n in hidden] + [("dlogits", "dlogits")]
