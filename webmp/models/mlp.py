"""The MLP: Linear layers with an activation between them (model 'mlp'), optionally LayerNorm after
each hidden Linear ('mlp-ln'), softmax cross-entropy over the classes.

Activations are applied when the next matmul loads its operand, so only pre-activations (Z, or the
LayerNorm output Y) are stored; matmul_dgrad multiplies by the activation's derivative in its
epilogue. Weight matrices are stored [in, out] with an f16 working copy; they get weight decay,
biases and LayerNorm parameters do not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..data.tables import Dataset, perm_bits
from ..engine.plan import Plan
from ..engine.tiles import TileTable
from .common import EVAL, EVAL_FLAGS, ModelBuilder, pytorch_linear_init


def build_mlp_plan(
    cfg: TrainConfig, data: Dataset, path: str, tiles: TileTable | None = None, rank: int = 0, world: int = 1
) -> tuple[Plan, bytes]:
    """The MLP's plan; with `world` > 1, data-parallel rank `rank`'s (ModelBuilder)."""
    mb = ModelBuilder(cfg, path, tiles, rank, world)
    pb = mb.pb
    Bt = mb.local_batch
    dims = [data.features, *cfg.hidden, data.classes]
    L = len(dims) - 1
    act = ops.ACT_CODES[cfg.act]
    rng = np.random.default_rng(cfg.seed)

    pb.f32("train_x", data.train_x.shape, "data", data.train_x)
    pb.u32("train_y", data.train_y.shape, "data", data.train_y)
    pb.f32("test_x", data.test_x.shape, "data", data.test_x)
    pb.u32("test_y", data.test_y.shape, "data", data.test_y)
    mb.bookkeeping(Bt)
    pb.h("X", Bt, dims[0])
    pb.u32("y", (Bt,), "activations")

    layers: list[dict[str, Any]] = []
    for l in range(L):
        w, b = pytorch_linear_init(dims[l], dims[l + 1], rng, cfg.init_gain)
        lay: dict[str, Any] = {
            "in": dims[l],
            "out": dims[l + 1],
            "W": mb.param(f"W{l}", w, (dims[l], dims[l + 1])),
            "b": mb.param(f"b{l}", b),
            "ln": None,
        }
        if l < L - 1:
            lay["Z"] = pb.h(f"Z{l}", Bt, dims[l + 1])
            lay["dZ"] = pb.h(f"dZ{l}", Bt, dims[l + 1])
            if cfg.model == "mlp-ln":
                lay["ln"] = {
                    "g": mb.param(f"ln_g{l}", np.ones(dims[l + 1], np.float32)),
                    "b": mb.param(f"ln_b{l}", np.zeros(dims[l + 1], np.float32)),
                    "Y": pb.h(f"Y{l}", Bt, dims[l + 1]),
                    "dY": pb.h(f"dY{l}", Bt, dims[l + 1]),
                    "stats": pb.f32(f"ln_stats{l}", (Bt, 2), "activations"),
                }
        else:
            lay["logits"] = pb.f32("logits", (Bt, dims[-1]), "activations")
            lay["dZ"] = pb.h("dlogits", Bt, dims[-1])
        layers.append(lay)

    def layer_input(l: int) -> tuple[str, int]:
        """(buffer, activation applied on load) feeding layer l."""
        if l == 0:
            return "X", 0
        prev = layers[l - 1]
        return (prev["ln"]["Y"] if prev["ln"] else prev["Z"]), act

    def forward(program: str, flags: str = "flags") -> None:
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
                flags=flags,
            )
            if l == L - 1:
                mb.matmul(program, "matmul_logits", C=lay["logits"], **common)
                continue
            mb.matmul(program, "matmul_fwd", C=lay["Z"], **common)
            if lay["ln"]:
                ln = lay["ln"]
                mb.layernorm_fwd(
                    program,
                    Z=lay["Z"],
                    gamma=ln["g"]["master"],
                    beta=ln["b"]["master"],
                    Y=ln["Y"],
                    stats=ln["stats"],
                    M=Bt,
                    N=lay["out"],
                    flags=flags,
                )

    # --- the training step ---------------------------------------------------------------------
    T = mb.grads_program
    n_train = len(data.train_x)
    ops.gather_train(
        pb,
        T,
        xs="train_x",
        ys="train_y",
        X="X",
        y="y",
        n_rows=n_train,
        features=dims[0],
        batch=Bt,
        seed=cfg.seed,
        perm_bits=perm_bits(n_train),
        shard=rank * Bt,
    )
    forward(T)
    C = dims[-1]
    ops.softmax_xent(
        pb, T, logits="logits", labels="y", loss_rows="loss_rows", dlogits="dlogits", B=Bt, C=C,
        counted=mb.counted_rows,
    )  # fmt: skip
    for l in reversed(range(L)):
        lay = layers[l]
        src, a_act = layer_input(l)
        mb.matmul(
            T,
            "matmul_wgrad",
            A=src,
            B=lay["dZ"],
            C=lay["W"]["grad"],
            M=lay["in"],
            N=lay["out"],
            K=Bt,
            a_act=a_act,
            trans_a=1,
        )
        ops.colsum(pb, T, G=lay["dZ"], out=lay["b"]["grad"], M=Bt, N=lay["out"])
        if l == 0:
            continue
        prev = layers[l - 1]
        lnp = prev["ln"]
        target = lnp["dY"] if lnp else prev["dZ"]
        pre_act = lnp["Y"] if lnp else prev["Z"]
        mb.matmul(
            T,
            "matmul_dgrad",
            A=lay["dZ"],
            B=lay["W"]["copy"],
            C=target,
            Zprev=pre_act,
            M=Bt,
            N=lay["in"],
            K=lay["out"],
            trans_b=1,
            out_act=act,
        )
        if lnp:
            n = prev["out"]
            ops.layernorm_wgrad(
                pb,
                T,
                dY=lnp["dY"],
                Z=prev["Z"],
                stats=lnp["stats"],
                dgamma=lnp["g"]["grad"],
                dbeta=lnp["b"]["grad"],
                M=Bt,
                N=n,
            )
            mb.layernorm_bwd(
                T,
                dY=lnp["dY"],
                Z=prev["Z"],
                stats=lnp["stats"],
                gamma=lnp["g"]["master"],
                dZ=prev["dZ"],
                M=Bt,
                N=n,
            )
    mb.optimizer()

    # --- evaluation on the test split: chunks of one batch each -------------------------------
    E = EVAL
    n_test = len(data.test_x)
    io: dict[str, Any] = {"logits": "logits", "labels": "y", "result": "eval_result", "B": Bt, "C": C}
    ops.eval_reset(pb, E, **io)
    for chunk in range(ops.cdiv(n_test, Bt)):
        ops.gather_eval(
            pb,
            E,
            xs="test_x",
            ys="test_y",
            X="X",
            y="y",
            n_rows=n_test,
            features=dims[0],
            batch=Bt,
            offset=chunk * Bt,
        )
        forward(E, flags=EVAL_FLAGS)
        ops.eval_count(pb, E, **io)

    lens = [(n, n) for lay in layers[:-1] for n in ([lay["dZ"]] + ([lay["ln"]["dY"]] if lay["ln"] else []))]
    mb.histograms([*lens, ("dlogits", "dlogits")])
    return mb.finish(dims, {"result_buffer": "eval_result", "test_rows": n_test, "loss_buffer": None})
