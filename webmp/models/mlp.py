"""The MLP: Linear layers with an activation between them (model 'mlp'), optionally LayerNorm after
each hidden Linear ('mlp-ln'), softmax cross-entropy over the classes.

Activations are applied when the next matmul loads its operand, so only pre-activations (Z, or the
LayerNorm output Y) are stored; matmul_dgrad multiplies by the activation's derivative in its
epilogue. Weight matrices are stored [in, out] with an f16 working copy; they get weight decay,
biases and LayerNorm parameters do not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..data.tables import Dataset, perm_bits
from ..engine.plan import EvalSpec, Plan
from ..engine.tiles import TileTable
from .common import EVAL, EVAL_FLAGS, Init, ModelBuilder, Param, pytorch_linear_init, replayed


@dataclass
class LayerNorm:
    """A hidden layer's LayerNorm ('mlp-ln'): its parameters, output Y, Y's gradient, (mean, rstd)."""

    g: Param
    b: Param
    Y: str
    dY: str
    stats: str


@dataclass
class Layer:
    """Linear layer l: W [fan_in, fan_out] and b; Z its output (a hidden layer's pre-activation, the
    last layer's f32 logits), dZ Z's gradient; ln its LayerNorm, if any."""

    fan_in: int
    fan_out: int
    W: Param
    b: Param
    Z: str
    dZ: str
    ln: LayerNorm | None


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
    mlp = MLP(mb, data)
    mlp.train_step()
    mb.optimizer()
    mlp.evaluation()
    mb.histograms(mlp.lens_layers())
    evaluation: EvalSpec = {
        "result_buffer": "eval_result",
        "test_rows": len(data.test_x),
        "loss_buffer": None,
    }
    return mb.finish(mlp.dims, evaluation)


class MLP:
    """The MLP's buffers (the constructor declares them, in the plan's order) and its programs."""

    def __init__(self, mb: ModelBuilder, data: Dataset):
        cfg, pb = mb.cfg, mb.pb
        self.mb, self.pb, self.data = mb, pb, data
        self.Bt = Bt = mb.local_batch
        self.dims = dims = [data.features, *cfg.hidden, data.classes]
        self.act = ops.ACT_CODES[cfg.act]
        pb.f32("train_x", data.train_x.shape, "data", data.train_x)
        pb.u32("train_y", data.train_y.shape, "data", data.train_y)
        pb.f32("test_x", data.test_x.shape, "data", data.test_x)
        pb.u32("test_y", data.test_y.shape, "data", data.test_y)
        mb.bookkeeping(Bt)
        pb.h("X", Bt, dims[0])
        pb.u32("y", (Bt,), "activations")
        rng = np.random.default_rng(cfg.seed)
        self.layers = [self._layer(l, rng) for l in range(len(dims) - 1)]

    def _layer(self, l: int, rng: np.random.Generator) -> Layer:
        mb, pb, Bt = self.mb, self.pb, self.Bt
        fan_in, fan_out = self.dims[l], self.dims[l + 1]

        def uniform(shape: tuple[int, ...]) -> Init:
            return pytorch_linear_init(rng, fan_in, shape, mb.cfg.init_gain)

        W = mb.param(f"W{l}", (fan_in, fan_out), uniform((fan_in, fan_out)), copy=True, decay=True)
        b = mb.param(f"b{l}", (fan_out,), uniform((fan_out,)))
        if l == len(self.dims) - 2:
            logits = pb.f32("logits", (Bt, fan_out), "activations")
            return Layer(fan_in, fan_out, W, b, Z=logits, dZ=pb.h("dlogits", Bt, fan_out), ln=None)
        Z, dZ = pb.h(f"Z{l}", Bt, fan_out), pb.h(f"dZ{l}", Bt, fan_out)
        if mb.cfg.model != "mlp-ln":
            return Layer(fan_in, fan_out, W, b, Z, dZ, ln=None)
        ln = LayerNorm(
            g=mb.param(f"ln_g{l}", (fan_out,), lambda: np.ones(fan_out, np.float32)),
            b=mb.param(f"ln_b{l}", (fan_out,), lambda: np.zeros(fan_out, np.float32)),
            Y=pb.h(f"Y{l}", Bt, fan_out),
            dY=pb.h(f"dY{l}", Bt, fan_out),
            stats=pb.f32(f"ln_stats{l}", (Bt, 2), "activations"),
        )
        return Layer(fan_in, fan_out, W, b, Z, dZ, ln)

    def layer_input(self, l: int) -> tuple[str, int]:
        """(buffer, activation applied on load) feeding layer l."""
        if l == 0:
            return "X", 0
        prev = self.layers[l - 1]
        return (prev.ln.Y if prev.ln else prev.Z), self.act

    def forward(self, program: str, flags: str = "flags") -> None:
        """X -> logits, appended to `program`; f16 stores raise overflow bits in `flags`."""
        mb, Bt = self.mb, self.Bt
        last = len(self.layers) - 1
        for l, lay in enumerate(self.layers):
            src, a_act = self.layer_input(l)
            mb.matmul(
                program, "matmul_logits" if l == last else "matmul_fwd", A=src, B=str(lay.W["copy"]), C=lay.Z,
                bias=lay.b["master"], M=Bt, N=lay.fan_out, K=lay.fan_in, a_act=a_act, flags=flags,
            )  # fmt: skip
            if lay.ln:
                ln = lay.ln
                ops.layernorm_fwd(
                    self.pb, program, Z=lay.Z, gamma=ln.g["master"], beta=ln.b["master"], Y=ln.Y,
                    stats=ln.stats, M=Bt, N=lay.fan_out, flags=flags, rows=mb.rows,
                )  # fmt: skip

    def train_step(self) -> None:
        """The training step up to complete gradients (grads_program): the next batch, forward,
        the loss and dlogits, the backward pass."""
        mb, pb, Bt, T = self.mb, self.pb, self.Bt, self.mb.grads_program
        n_train = len(self.data.train_x)
        ops.gather_train(
            pb, T, xs="train_x", ys="train_y", X="X", y="y", n_rows=n_train, features=self.dims[0], batch=Bt,
            seed=mb.cfg.seed, perm_bits=perm_bits(n_train), shard=mb.rank * Bt,
        )  # fmt: skip
        self.forward(T)
        ops.softmax_xent(
            pb, T, logits="logits", labels="y", loss_rows="loss_rows", dlogits="dlogits", B=Bt,
            C=self.dims[-1], counted=mb.counted_rows,
        )  # fmt: skip
        for l in reversed(range(len(self.layers))):
            self.backward(T, l)

    def backward(self, T: str, l: int) -> None:
        """Layer l's weight and bias gradients from its dZ, and the previous layer's dZ."""
        mb, pb, Bt = self.mb, self.pb, self.Bt
        lay = self.layers[l]
        src, a_act = self.layer_input(l)
        mb.matmul(
            T, "matmul_wgrad", A=src, B=lay.dZ, C=lay.W["grad"], M=lay.fan_in, N=lay.fan_out, K=Bt,
            a_act=a_act, trans_a=1,
        )  # fmt: skip
        ops.colsum(pb, T, G=lay.dZ, out=lay.b["grad"], M=Bt, N=lay.fan_out)
        if l == 0:
            return
        prev = self.layers[l - 1]
        lnp = prev.ln
        mb.matmul(
            T, "matmul_dgrad", A=lay.dZ, B=str(lay.W["copy"]), C=lnp.dY if lnp else prev.dZ,
            Zprev=lnp.Y if lnp else prev.Z, M=Bt, N=lay.fan_in, K=lay.fan_out, trans_b=1, out_act=self.act,
        )  # fmt: skip
        if lnp:
            n = prev.fan_out
            ops.layernorm_wgrad(
                pb,
                T,
                dY=lnp.dY,
                Z=prev.Z,
                stats=lnp.stats,
                dgamma=lnp.g["grad"],
                dbeta=lnp.b["grad"],
                M=Bt,
                N=n,
            )
            ops.layernorm_bwd(
                pb, T, dY=lnp.dY, Z=prev.Z, stats=lnp.stats, gamma=lnp.g["master"], dZ=prev.dZ, M=Bt, N=n,
                rows=mb.rows,
            )  # fmt: skip

    def evaluation(self) -> None:
        """Program 'eval' on the test split: chunks of one batch each, the correct rows counted."""
        pb, Bt, E, C = self.pb, self.Bt, EVAL, self.dims[-1]
        n_test = len(self.data.test_x)
        forward = replayed(pb, lambda program: self.forward(program, flags=EVAL_FLAGS))
        ops.eval_reset(pb, E, logits="logits", labels="y", result="eval_result", B=Bt, C=C)
        for chunk in range(ops.cdiv(n_test, Bt)):
            ops.gather_eval(
                pb, E, xs="test_x", ys="test_y", X="X", y="y", n_rows=n_test, features=self.dims[0], batch=Bt,
                offset=chunk * Bt,
            )  # fmt: skip
            forward(E)
            ops.eval_count(pb, E, logits="logits", labels="y", result="eval_result", B=Bt, C=C)

    def lens_layers(self) -> list[tuple[str, str]]:
        """The gradient-range lens's layers: every hidden dZ (and dY), then dlogits."""
        hidden = [n for lay in self.layers[:-1] for n in [lay.dZ, *([lay.ln.dY] if lay.ln else [])]]
        return [(n, n) for n in hidden] + [("dlogits", "dlogits")]
