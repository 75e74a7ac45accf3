"""A token network of webmp.nn layers in float64 (test_net_seq.py's reference): its loss, its
parameters' gradients and its logits, exact or with values rounded where webmp/models/net.py and
net_seq.py store them, from the same kernels' references as the gpt's (webmp.testing.reference).

Rows are r = b * T + t (window b, position t); values are [R, cols] float64. With store=path the
stored values are rounded to the activation format, every other operation exact:
  - the matrices the matmuls read (Linear and attention weights, a tied head's embedding table)
    as their working copies;
  - each layer's output (the last Linear's logits excepted: f32), a residual's x + f(x) too;
  - attention: qkv, P and O, the scores and dP exact (f32 buffers);
  - backward: dlogits, every input gradient (a residual's dx + dy too), attention's dO, dS and
    dqkv; the weight gradients exact from the stored operands (f32 accumulators).
gpt_spec is the GPT of layers test_net_seq.py trains and test_torch_parity.py compares.

Dropout keeps reference.dropout_keep's mask of (seed, the layer's index in trace order, the step's
iteration), as the GPU draws it; with training=False it is the identity.
"""

from __future__ import annotations

import numpy as np

from webmp import ops
from webmp.testing import reference as ref
from webmp.testing.reference.kernels import transposed

ACTS = ("relu", "gelu", "silu", "tanh")


class SeqReference:
    """gradients(idx, targets) and forward(idx) of `net` (a token Network) with `params` (by name)."""

    def __init__(self, net, params: dict, store: str | None, *, loss_scale=1.0, seed=0, iteration=0):
        self.net, self.store, self.loss_scale = net, store, loss_scale
        self.seed, self.iteration = seed, iteration
        self.p = {k: np.asarray(v, np.float64) for k, v in params.items()}
        self.index = {t.path: i for i, t in enumerate(net.trace())}
        self.T = net.context
        self.last = f"layers.{len(net.layers) - 1}"

    def rnd(self, v):
        return v if self.store is None else ref.round_h(v, self.store)

    def copy(self, name: str):
        """A matrix's working copy."""
        return self.rnd(self.p[name])

    def forward(self, idx, training: bool = False):
        """The logits [R, V] of idx [R], and what the backward pass needs (per layer, in order)."""
        self.training, self.Bn = training, len(idx) // self.T
        tape: list = []
        logits = self._layers(self.net.layers, "", np.asarray(idx, np.int64), tape)
        return logits, tape

    def gradients(self, idx, targets):
        """(loss, {param: gradient times loss_scale}, logits) of one training step's batch."""
        logits, tape = self.forward(idx, training=True)
        labels = np.asarray(targets, np.int64)
        rows, dlogits, _ = ref.softmax_xent(logits, labels, self.loss_scale, len(labels))
        self.g: dict = {}
        self._back(self.net.layers, "", self.rnd(dlogits), tape)
        return float(rows.sum() / len(labels)), self.g, logits

    def _layers(self, layers, prefix, x, tape):
        for i, layer in enumerate(layers):
            path = f"{prefix}layers.{i}"
            y, saved = getattr(self, "f_" + _kind(layer))(path, layer, x, tape)
            tape.append((path, layer, x, saved))
            x = y
        return x

    def _back(self, layers, prefix, dy, tape):
        for i in reversed(range(len(layers))):
            path, layer, x, saved = [e for e in tape if e[0] == f"{prefix}layers.{i}"][0]
            dy = getattr(self, "b_" + _kind(layer))(path, layer, x, saved, dy, tape)
        return dy

    # --- forward: (output, saved) --------------------------------------------------------------

    def f_embedding(self, path, layer, idx, tape):
        pos = self.p.get(f"{path}.positions", np.zeros((self.T, layer.dim)))
        return self.rnd(self.p[f"{path}.weight"][idx] + pos[np.arange(len(idx)) % self.T]), None

    def f_linear(self, path, layer, x, tape):
        if layer.tied:  # the embedding's table's working copy, transposed
            return x @ self.copy("layers.0.weight").T, None
        y = x @ self.copy(f"{path}.weight") + self.p.get(f"{path}.bias", 0.0)
        return (y if path == self.last else self.rnd(y)), None

    def f_layernorm(self, path, layer, x, tape):
        y, stats = ref.layernorm_fwd(x, self.p[f"{path}.weight"], self.p[f"{path}.bias"], layer.eps)
        return self.rnd(y), stats

    def f_rmsnorm(self, path, layer, x, tape):
        eps = ref.RMSNORM_EPS if layer.eps is None else layer.eps
        y, rstd = ref.rmsnorm_fwd(x, self.p[f"{path}.weight"], eps)
        return self.rnd(y), rstd

    def f_act(self, path, layer, x, tape):
        return self.rnd(ref.act_fwd(x, layer.type)), None

    def f_dropout(self, path, layer, x, tape):
        if not self.training or layer.p == 0:
            return x, None
        keep = ref.dropout_keep(*x.shape, layer.p, self.seed, self.index[path], self.iteration)
        return self.rnd(ref.dropout(x, keep, layer.p)), keep

    def f_residual(self, path, layer, x, tape):
        return self.rnd(x + self._layers(layer.layers, f"{path}.", x, tape)), None

    def heads(self, v, layer, D: int, part: int = 0):
        """[Bn, H, T, d] of third `part` of v (qkv [R, 3D]; O, dO [R, D])."""
        return ref.attn_heads(v, self.Bn, self.T, layer.heads, D // layer.heads, part)

    def f_causal_self_attention(self, path, layer, x, tape):
        D = x.shape[1]
        sc = ops.attention_scale(D // layer.heads)
        qkv = self.rnd(x @ self.copy(f"{path}.qkv.weight") + self.p.get(f"{path}.qkv.bias", 0.0))
        q, k, v = (self.heads(qkv, layer, D, i) for i in range(3))
        P = self.rnd(ref.attn_softmax_fwd(q @ transposed(k), sc))
        O = self.rnd(ref.attn_merge(P @ v))
        y = self.rnd(O @ self.copy(f"{path}.proj.weight") + self.p.get(f"{path}.proj.bias", 0.0))
        return y, (qkv, P, O, sc)

    # --- backward: the input's gradient; the parameters' into self.g ------------------------------

    def b_embedding(self, path, layer, idx, saved, dy, tape):
        dw = np.zeros_like(self.p[f"{path}.weight"])
        np.add.at(dw, idx, dy)
        self.g[f"{path}.weight"] = dw + self.g.get(f"{path}.weight", 0.0)  # a tied head's part first
        if layer.positions:
            self.g[f"{path}.positions"] = dy.reshape(self.Bn, self.T, -1).sum(0)
        return None

    def _wgrad(self, name, x, dy):
        self.g[f"{name}.weight"] = x.T @ dy
        if f"{name}.bias" in self.p:
            self.g[f"{name}.bias"] = dy.sum(0)

    def b_linear(self, path, layer, x, saved, dy, tape):
        if layer.tied:
            self.g["layers.0.weight"] = dy.T @ x
            return self.rnd(dy @ self.copy("layers.0.weight"))
        self._wgrad(path, x, dy)
        return self.rnd(dy @ self.copy(f"{path}.weight").T)

    def b_layernorm(self, path, layer, x, stats, dy, tape):
        self.g[f"{path}.weight"], self.g[f"{path}.bias"] = ref.layernorm_wgrad(dy, x, stats)
        return self.rnd(ref.layernorm_bwd(dy, x, stats, self.p[f"{path}.weight"]))

    def b_rmsnorm(self, path, layer, x, rstd, dy, tape):
        self.g[f"{path}.weight"] = ref.rmsnorm_wgrad(dy, x, rstd)
        return self.rnd(ref.rmsnorm_bwd(dy, x, rstd, self.p[f"{path}.weight"]))

    def b_act(self, path, layer, x, saved, dy, tape):
        return self.rnd(dy * ref.act_grad(x, layer.type))

    def b_dropout(self, path, layer, x, keep, dy, tape):
        return dy if keep is None else self.rnd(ref.dropout(dy, keep, layer.p))

    def b_residual(self, path, layer, x, saved, dy, tape):
        return self.rnd(self._back(layer.layers, f"{path}.", dy, tape) + dy)

    def b_causal_self_attention(self, path, layer, x, saved, dy, tape):
        qkv, P, O, sc = saved
        D = x.shape[1]
        self._wgrad(f"{path}.proj", O, dy)
        dO = self.rnd(dy @ self.copy(f"{path}.proj.weight").T)
        q, k, v = (self.heads(qkv, layer, D, i) for i in range(3))
        gO = self.heads(dO, layer, D)
        dS = self.rnd(ref.attn_softmax_bwd(P, gO @ transposed(v), sc))
        dqkv = self.rnd(ref.attn_merge(dS @ k, transposed(dS) @ q, transposed(P) @ gO))
        self._wgrad(f"{path}.qkv", x, dqkv)
        return self.rnd(dqkv @ self.copy(f"{path}.qkv.weight").T)


def gpt_spec(V: int, D: int, heads: int, blocks: int, T: int) -> dict:
    """A pre-LayerNorm GPT from layers (the built-in gpt's shape, untied head)."""
    block = [
        _res({"type": "layernorm"}, {"type": "causal_self_attention", "heads": heads}),
        _res(
            {"type": "layernorm"},
            {"type": "linear", "out": 4 * D},
            {"type": "gelu"},
            {"type": "linear", "out": D},
        ),
    ]
    return {
        "input": {"tokens": V, "context": T},
        "layers": [
            {"type": "embedding", "dim": D},
            *block * blocks,
            {"type": "layernorm"},
            {"type": "linear", "out": V},
        ],
    }


def _res(*layers) -> dict:
    return {"type": "residual", "layers": list(layers)}


def _kind(layer) -> str:
    return "act" if layer.type in ACTS else layer.type
