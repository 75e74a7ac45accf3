"""The character GPT in float64: its loss, gradients and values (gpt_loss_and_grads), exact or with
values rounded where the engine stores them, and its validation loss (gpt_eval_loss). A
pre-LayerNorm GPT-2-style model; parameter names (per layer l = 0 .. n_layer - 1):
  wte [V, D], wpe [Tmax, D]                      token and position embeddings (f32 tables)
  ln1_g{l}, ln1_b{l} [D]                         LayerNorm before attention
  Wqkv{l} [D, 3D], bqkv{l} [3D]                  qkv = a @ Wqkv + bqkv, columns [q | k | v]
  Wo{l} [D, D], bo{l} [D]                        attention output projection (residual branch)
  ln2_g{l}, ln2_b{l} [D]                         LayerNorm before the MLP
  W1{l} [D, 4D], b1{l} [4D], W2{l} [4D, D], b2{l} [D]   MLP (GELU, tanh approximation)
  lnf_g, lnf_b [D]                               final LayerNorm
  Whead [D, V], bhead [V]                        the head, absent when tied (logits = xf @ wte^T)
Matrices are stored [in, out] as the MLP's, so a GPU weight buffer is the same array. The parameter
table, its initialisation (gpt_init) and the weight-decay rule (GPT_DECAY) are the model's own, in
webmp/models/gpt.py; the reference uses them as they are.
"""

from __future__ import annotations

import math

import numpy as np

from ...data.tables import eval_windows
from ...engine.fp8 import quantise
from .kernels import (
    NO_LABEL,
    act_fwd,
    act_grad,
    attn_heads,
    attn_merge,
    attn_softmax_bwd,
    attn_softmax_fwd,
    causal,
    layernorm_bwd,
    layernorm_fwd,
    layernorm_wgrad,
    round_h,
    softmax_xent,
    transposed,
)
from .tokens import gather_windows_eval


def gpt_loss_and_grads(
    params: dict,
    idx,
    targets,
    *,
    n_layer: int,
    n_head: int,
    tie_head: bool,
    store: str | None = None,
    counted: int | None = None,
    attn_scale: float | None = None,
    loss_scale: float = 1.0,
    eps: float = 1e-5,
    grads: bool = True,
    fused_attention: bool = False,
    fp8: dict[str, tuple[int, int, int]] | None = None,
):
    """(loss, grads, cache) of the character GPT on idx, targets [B, T] (ints), in float64.

    Model: x = wte[idx] + wpe[:T]; per layer x += attn(LN1(x)) @ Wo + bo, x += gelu(LN2(x) @ W1
    + b1) @ W2 + b2, causal multi-head attention with softmax(Q K^T * attn_scale) (default
    1/sqrt(d); pass ops.attention_scale(d) for the GPU's f32 constant); logits = LNf(x) @ wte^T
    (tie_head) or @ Whead + bhead. LayerNorm: eps, biased variance. loss: mean cross-entropy over
    `counted` rows (default: the rows whose target is not NO_LABEL; NO_LABEL rows add nothing).

    grads: {param name: gradient} by hand-written backprop, multiplied by `loss_scale` (as the
    engine's g_* buffers hold them); a tied wte's gradient is the embedding's plus the head's.
    grads=False skips the backward pass (returns None). cache: the forward values ("x0", "xf",
    "logits" [B*T, V], "layers": per-layer dicts of a, qkv, S, P, O, x_mid, m, z, h, x) and, with
    grads, the backward deltas ("dlogits", "dxf", per-layer dx_out, dO, dS, dqkv, dz, ...).
    Rows are r = b * T + t throughout.

    store=None: exact float64. store="native"/"emulated" (f16) or "fp32": values are rounded to
    the activation format where the GPU stores them, every other operation exact:
      forward
      1. working copies of the matrices read by matmuls: Wqkv, Wo, W1, W2, Whead, and wte as the
         tied head's matrix (the embedding reads the f32 tables; biases, LN params f32);
      2. x0 = rnd(wte[idx] + wpe[t]);
      3. a = rnd(LN1(x)), m = rnd(LN2(x)), xf = rnd(LNf(x)) (LN statistics exact, from stored x);
      4. qkv = rnd(a @ Wqkv + bqkv);
      5. S exact (f32 buffer), P = rnd(causal softmax(S * attn_scale));
      6. O = rnd(P @ V);
      7. attention branch y = rnd(O @ Wo + bo), then x = rnd(x + y) (the residual add);
      8. MLP pre-activation z = rnd(m @ W1 + b1), its activation rnd(gelu(z)) as W2's operand
         (A_ACT on load), u = rnd(h @ W2 + b2), then x = rnd(x + u);
      9. logits exact (f32 buffer).
      backward
      10. dlogits = rnd(softmax_xent's gradient * loss_scale / counted);
      11. dxf = rnd(dlogits @ Whead^T) (tied: wte's working copy);
      12. every LayerNorm input gradient rnd(layernorm_bwd(...)), from the stored upstream delta;
      13. MLP: dz = rnd((dx @ W2^T) * gelu'(z)) (dgrad epilogue), dm = rnd(dz @ W1^T);
      14. attention: dO = rnd(dx @ Wo^T), dP exact (f32), dS = rnd(softmax backward),
          dqkv = rnd([dS K | dS^T Q | P^T dO]), da = rnd(dqkv @ Wqkv^T);
      15. the residual stream's gradient after each branch: dx = rnd(dx + rnd(LN input grad));
      16. weight gradients (A^T dZ, column sums, LN wgrads, embedding sums) exact, from the stored
          operands (f32 accumulators).
    fused_attention: the fused kernels' rounding points (webmp/ops/flash.py) instead of 5., 6. and
    14.'s: P and dS never stored (exact), O = rnd(P @ V), dS = P (dP - rowsum(dO * O)) * attn_scale
    with O as stored, dqkv = rnd([dS K | dS^T Q | P^T dO]).
    fp8: {matrix name (Wqkv{l}, Wo{l}, W1{l}, W2{l}): (e_input, e_weight, e_grad_output)} quantises
    those products' operands as `--precision fp8` does (webmp.engine.fp8.quantise): the input (W2's
    with the GELU applied, unrounded) and the f32 master to E4M3, the output gradient to E5M2, in
    both of its products; the bias gradient from the unquantised gradient.
    """
    gpt = GPTValues(params, idx, n_head, store, attn_scale, eps)
    gpt.fused = fused_attention
    gpt.fp8 = fp8 or {}
    labels = np.asarray(targets, np.int64).reshape(gpt.R)
    n_rows = int((labels != NO_LABEL).sum()) if counted is None else int(counted)
    n_rows = max(n_rows, 1)
    cache = gpt_forward(gpt, n_layer, tie_head)
    loss_rows, dlogits, _ = softmax_xent(cache["logits"], labels, loss_scale, n_rows)
    loss = float(loss_rows.sum() / n_rows)
    if not grads:
        return loss, None, cache
    g = gpt_backward(gpt, cache, dlogits, n_layer, tie_head)
    return loss, {name: g[name] for name in params}, cache


class GPTValues:
    """What gpt_loss_and_grads' forward and backward passes share: the parameters in float64, the
    rounding to the activation format (`store`: None exact, else a path), the shapes (Bn windows of
    T tokens, R = Bn * T rows, V, D, H heads of d) and the attention's scale."""

    def __init__(
        self, params: dict, idx, n_head: int, store: str | None, attn_scale: float | None, eps: float
    ):
        self.params, self.store, self.eps = params, store, eps
        self.idx = np.asarray(idx, np.int64)
        self.Bn, self.T = self.idx.shape
        self.R = self.Bn * self.T
        self.wte = np.asarray(params["wte"], np.float64)
        self.V, self.D = self.wte.shape
        self.H = n_head
        if self.D % self.H:
            raise ValueError(f"D = {self.D} is not a multiple of n_head = {self.H}")
        self.d = self.D // self.H
        self.sc = 1.0 / math.sqrt(self.d) if attn_scale is None else float(attn_scale)
        self.fused = False  # the fused attention's rounding points (gpt_loss_and_grads)
        self.fp8: dict[str, tuple[int, int, int]] = {}  # gpt_loss_and_grads' fp8

    def q8(self, v, w: str, k: int) -> np.ndarray:
        """v as matrix w's product reads it: itself, or quantised at w's slot k (0 input, 1 weight,
        2 output gradient) with fp8."""
        if w not in self.fp8:
            return v
        fmt = "e5m2" if k == 2 else "e4m3"
        return quantise(np.asarray(v, np.float32), self.fp8[w][k], fmt).astype(np.float64)

    def wq(self, name: str) -> np.ndarray:
        """Matrix `name` as its products read it: the working copy, or with fp8 its master quantised."""
        return self.q8(self.p64(name), name, 1) if name in self.fp8 else self.wcopy(name)

    def rnd(self, v):
        """v as stored in the activation format (unchanged when exact)."""
        return v if self.store is None else round_h(v, self.store)

    def p64(self, name: str) -> np.ndarray:
        return np.asarray(self.params[name], np.float64)

    def wcopy(self, name: str) -> np.ndarray:
        """Matrix `name`'s working copy (as stored)."""
        return self.rnd(self.p64(name))

    def head(self, tie_head: bool) -> np.ndarray:
        """The head's matrix [D, V] as the logits' matmul reads it (tied: wte's working copy, transposed)."""
        return self.rnd(self.wte.T) if tie_head else self.wcopy("Whead")

    def heads(self, v, part: int = 0) -> np.ndarray:
        return attn_heads(v, self.Bn, self.T, self.H, self.d, part)


def gpt_forward(gpt: GPTValues, n_layer: int, tie_head: bool) -> dict:
    """The forward values (gpt_loss_and_grads' cache): the embedding x0, each block's, the final
    LayerNorm's and the logits."""
    rnd, p64 = gpt.rnd, gpt.p64
    rows = gpt.idx.reshape(gpt.R)
    x = rnd(gpt.wte[rows] + p64("wpe")[np.tile(np.arange(gpt.T), gpt.Bn)])
    cache: dict = {"x0": x, "layers": []}
    for l in range(n_layer):
        c = block_forward(gpt, l, x)
        x = c["x"]
        cache["layers"].append(c)
    xf, cache["lnf_stats"] = layernorm_fwd(x, p64("lnf_g"), p64("lnf_b"), gpt.eps)
    cache["x_final"] = x
    cache["xf"] = xf = rnd(xf)
    logits = xf @ gpt.head(tie_head)
    if not tie_head:
        logits = logits + p64("bhead")
    cache["logits"] = logits
    return cache


def block_forward(gpt: GPTValues, l: int, x: np.ndarray) -> dict:
    """Block l's values from its input x: x_in, the attention branch's (a, qkv, S, P, O, x_mid)
    and the MLP branch's (m, z, h, x), with the LayerNorm statistics."""
    rnd, p64, wq, q8, eps = gpt.rnd, gpt.p64, gpt.wq, gpt.q8, gpt.eps
    c: dict = {"x_in": x}
    a, c["ln1_stats"] = layernorm_fwd(x, p64(f"ln1_g{l}"), p64(f"ln1_b{l}"), eps)
    c["a"] = a = rnd(a)
    c["qkv"] = qkv = rnd(q8(a, f"Wqkv{l}", 0) @ wq(f"Wqkv{l}") + p64(f"bqkv{l}"))
    q, k, v = (gpt.heads(qkv, i) for i in range(3))
    c["S"] = S = q @ transposed(k)
    P = attn_softmax_fwd(S, gpt.sc)
    c["P"] = P = P if gpt.fused else rnd(P)
    c["O"] = O = rnd(attn_merge(P @ v))
    y = rnd(q8(O, f"Wo{l}", 0) @ wq(f"Wo{l}") + p64(f"bo{l}"))
    c["x_mid"] = x = rnd(x + y)
    m, c["ln2_stats"] = layernorm_fwd(x, p64(f"ln2_g{l}"), p64(f"ln2_b{l}"), eps)
    c["m"] = m = rnd(m)
    c["z"] = z = rnd(q8(m, f"W1{l}", 0) @ wq(f"W1{l}") + p64(f"b1{l}"))
    gelu = act_fwd(z, "gelu")  # fp8's cast quantises it unrounded
    c["h"] = h = q8(gelu, f"W2{l}", 0) if f"W2{l}" in gpt.fp8 else rnd(gelu)
    u = rnd(h @ wq(f"W2{l}") + p64(f"b2{l}"))
    c["x"] = rnd(x + u)
    return c


def gpt_backward(gpt: GPTValues, cache: dict, dlogits: np.ndarray, n_layer: int, tie_head: bool) -> dict:
    """{param name: gradient} from dlogits (softmax_xent's, loss-scaled): the head, the final
    LayerNorm, the blocks from the last, the embeddings; the deltas go into `cache`."""
    rnd, p64 = gpt.rnd, gpt.p64
    g: dict[str, np.ndarray] = {}
    cache["dlogits"] = dl = rnd(dlogits)
    xf = cache["xf"]
    if tie_head:
        g["wte"] = dl.T @ xf
    else:
        g["Whead"], g["bhead"] = xf.T @ dl, dl.sum(0)
    cache["dxf"] = dxf = rnd(dl @ gpt.head(tie_head).T)
    g["lnf_g"], g["lnf_b"] = layernorm_wgrad(dxf, cache["x_final"], cache["lnf_stats"])
    dx = rnd(layernorm_bwd(dxf, cache["x_final"], cache["lnf_stats"], p64("lnf_g")))
    for l in reversed(range(n_layer)):
        dx = block_backward(gpt, l, cache["layers"][l], dx, g)
    cache["dx0"] = dx
    rows = gpt.idx.reshape(gpt.R)
    dwte = np.zeros((gpt.V, gpt.D))
    np.add.at(dwte, rows, dx)
    g["wte"] = g.get("wte", 0.0) + dwte
    dwpe = np.zeros_like(p64("wpe"))
    dwpe[: gpt.T] = dx.reshape(gpt.Bn, gpt.T, gpt.D).sum(0)
    g["wpe"] = dwpe
    return g


def block_backward(gpt: GPTValues, l: int, c: dict, dx: np.ndarray, g: dict) -> np.ndarray:
    """Block l's parameter gradients into g and the gradient of its input, from dx (its output's):
    the MLP branch, then the attention branch; its deltas go into c (block l's cache)."""
    rnd, p64, wq, q8 = gpt.rnd, gpt.p64, gpt.wq, gpt.q8
    c["dx_out"] = dx
    # MLP branch: u = h @ W2 + b2 receives dx
    g2 = q8(dx, f"W2{l}", 2)
    g[f"W2{l}"], g[f"b2{l}"] = c["h"].T @ g2, dx.sum(0)
    c["dz"] = dz = rnd((g2 @ wq(f"W2{l}").T) * act_grad(c["z"], "gelu"))
    g1 = q8(dz, f"W1{l}", 2)
    g[f"W1{l}"], g[f"b1{l}"] = q8(c["m"], f"W1{l}", 0).T @ g1, dz.sum(0)
    c["dm"] = dm = rnd(g1 @ wq(f"W1{l}").T)
    g[f"ln2_g{l}"], g[f"ln2_b{l}"] = layernorm_wgrad(dm, c["x_mid"], c["ln2_stats"])
    dx = rnd(dx + rnd(layernorm_bwd(dm, c["x_mid"], c["ln2_stats"], p64(f"ln2_g{l}"))))
    c["dx_mid"] = dx
    # attention branch: y = O @ Wo + bo receives dx
    go = q8(dx, f"Wo{l}", 2)
    g[f"Wo{l}"], g[f"bo{l}"] = q8(c["O"], f"Wo{l}", 0).T @ go, dx.sum(0)
    c["dO"] = dO = rnd(go @ wq(f"Wo{l}").T)
    q, k, v = (gpt.heads(c["qkv"], i) for i in range(3))
    P, gO = c["P"], gpt.heads(dO)
    c["dP"] = dP = gO @ transposed(v)
    if gpt.fused:  # rowsum(dP * P) as dO . O from the stored O
        D = (gO * gpt.heads(c["O"])).sum(-1, keepdims=True)
        c["dS"] = dS = np.where(causal(gpt.T), P * (dP - D) * gpt.sc, 0.0)
    else:
        c["dS"] = dS = rnd(attn_softmax_bwd(P, dP, gpt.sc))
    c["dqkv"] = dqkv = rnd(attn_merge(dS @ k, transposed(dS) @ q, transposed(P) @ gO))
    gq = q8(dqkv, f"Wqkv{l}", 2)
    g[f"Wqkv{l}"], g[f"bqkv{l}"] = q8(c["a"], f"Wqkv{l}", 0).T @ gq, dqkv.sum(0)
    c["da"] = da = rnd(gq @ wq(f"Wqkv{l}").T)
    g[f"ln1_g{l}"], g[f"ln1_b{l}"] = layernorm_wgrad(da, c["x_in"], c["ln1_stats"])
    return rnd(dx + rnd(layernorm_bwd(da, c["x_in"], c["ln1_stats"], p64(f"ln1_g{l}"))))


def gpt_eval_loss(
    params: dict,
    tokens,
    *,
    n_layer: int,
    n_head: int,
    context: int,
    tie_head: bool,
    store: str | None = None,
    attn_scale: float | None = None,
) -> float:
    """The mean validation loss of program 'eval' in float64: every next token of `tokens`, predicted
    from the consecutive windows of `context` tokens (gather_windows_eval). store / attn_scale as
    for gpt_loss_and_grads (None: exact; a path: rounded where the GPU stores)."""
    n = eval_windows(len(tokens), context)
    idx, targets = gather_windows_eval(tokens, n, context, 0)
    loss, _, _ = gpt_loss_and_grads(
        params, idx.reshape(n, context), targets.reshape(n, context), n_layer=n_layer, n_head=n_head,
        tie_head=tie_head, store=store, attn_scale=attn_scale, grads=False,
    )  # fmt: skip
    return loss
