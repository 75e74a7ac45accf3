"""numpy references for every kernel family and a float64 MLP, for tests and numerics debugging.

Kernel references take the values a kernel actually reads (stored f16 operands are exact in float64)
and return the exact float64 result of the operation *before* the kernel's final store; the f32
arithmetic and the f16 store are accounted for by error bounds (see `store_error`, `dot_error`).
The arguments mirror the kernels' override constants, so a test passes one dict to both.

Rounding facts the bounds rest on (WGSL spec, "Floating Point Accuracy"):
- f32 +, -, * are correctly rounded, and WGSL lets "correctly rounded" pick either neighbour, so
  one operation errs by less than one ulp: relative 2 * U32.
- f32 -> f16 conversion (vec2<f16>(v), pack2x16float) may also round to either neighbour:
  a stored value is within one f16 ulp, relative 2 * U16, or 2^-24 absolute in the subnormal range.
"""

from __future__ import annotations

import math

import numpy as np

from ..data.tables import batch_rows, eval_windows, window_starts
from ..models.gpt import GPT_DECAY, gpt_decays, gpt_init, gpt_param_shapes  # noqa: F401 (part of the reference API)

U16 = 2.0**-11  # f16 unit roundoff
U32 = 2.0**-24  # f32 unit roundoff
F16_MAX = 65504.0
F16_TINY = 2.0**-24  # smallest f16 subnormal = f16 ulp below 2^-14
GELU_K = math.sqrt(2.0 / math.pi)
GELU_C = 0.044715
ACT = {"none": 0, "relu": 1, "gelu": 2}
NO_LABEL = 0xFFFFFFFF  # common.wgsl's label of padding rows


# --- rounding ----------------------------------------------------------------------------------


def round_h(x, path: str) -> np.ndarray:
    """x as stored in the activation format of `path` (f16, or f32 for 'fp32'), as float64."""
    dt = np.float32 if path == "fp32" else np.float16
    return np.asarray(x, np.float64).astype(dt).astype(np.float64)


def store_error(path: str) -> float:
    """Relative error bound of one store into the activation format (see the module docstring)."""
    return 2 * U32 if path == "fp32" else 2 * U16


def store_tiny(path: str) -> float:
    """Absolute error bound of a store in the subnormal range (f32 subnormals may flush to 0)."""
    return 2.0**-126 if path == "fp32" else F16_TINY


def dot_error(k: int) -> float:
    """Bound on |fl(sum of k products) - exact| / sum|products| for f32 accumulation in any order,
    each product and addition erring by < 2 * U32 (gamma_{k+1} with doubled unit roundoff)."""
    n = (k + 1) * 2 * U32
    return n / (1 - n)


def check_close(actual, expected, bound, what: str = "") -> None:
    """Raise AssertionError naming the worst element unless |actual - expected| <= bound everywhere."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    bound = np.broadcast_to(np.asarray(bound, np.float64), expected.shape)
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {actual.shape} != expected {expected.shape}")
    err = np.abs(actual - expected)
    bad = ~(err <= bound)  # NaN counts as bad
    if bad.any():
        ratio = np.where(bad, np.nan_to_num(err / np.maximum(bound, 1e-300), nan=np.inf), -1)
        i = np.unravel_index(np.argmax(ratio), expected.shape)
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} elements outside the bound; worst at {i}: "
            f"got {actual[i]!r}, expected {expected[i]!r}, |error| {err[i]:.3g} > bound {bound[i]:.3g}"
        )


# --- activations -------------------------------------------------------------------------------


def _act_code(kind) -> int:
    return ACT[kind] if isinstance(kind, str) else int(kind)


def act_fwd(x, kind) -> np.ndarray:
    x = np.asarray(x, np.float64)
    kind = _act_code(kind)
    if kind == 1:
        return np.maximum(x, 0.0)
    if kind == 2:
        return 0.5 * x * (1.0 + np.tanh(GELU_K * (x + GELU_C * x**3)))
    return x


def act_grad(x, kind) -> np.ndarray:
    """d act / dx at the pre-activation x (ReLU: 0 at x = 0, as the kernel)."""
    x = np.asarray(x, np.float64)
    kind = _act_code(kind)
    if kind == 1:
        return (x > 0).astype(np.float64)
    if kind == 2:
        t = np.tanh(GELU_K * (x + GELU_C * x**3))
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * x * x)
    return np.ones_like(x)


# Bounds on the kernels' f32 evaluation of the activations. ReLU is exact. GELU goes through WGSL
# tanh, whose accuracy is inherited from (exp(x) - exp(-x)) / (exp(x) + exp(-x)) with exp good to
# (3 + 2|x|) ulps (|x| <= 10 after the clamp): an absolute error below 2^-18 leaves a wide margin;
# the few f32 multiplications around it add at most 16 U32 relative.
TANH_ERROR = 2.0**-18


def act_fwd_error(x, kind) -> np.ndarray:
    """Bound on |f32 act_fwd(x) - exact| (0.5 x (1 + tanh): |x| times the tanh error)."""
    x = np.abs(np.asarray(x, np.float64))
    return (TANH_ERROR + 16 * U32) * x if _act_code(kind) == 2 else np.zeros_like(x)


def act_grad_error(x, kind) -> np.ndarray:
    """Bound on |f32 act_grad(x) - exact|: the derivative of the GELU gradient expression with
    respect to tanh is at most 0.5 + |x| + |x|^3 in magnitude."""
    x = np.abs(np.asarray(x, np.float64))
    return (TANH_ERROR + 16 * U32) * (1 + x + x**3) if _act_code(kind) == 2 else np.zeros_like(x)


# --- matmuls -----------------------------------------------------------------------------------


def matmul_operands(A, B, *, trans_a=0, trans_b=0, a_act=0, path="native"):
    """op(A) [M, K] and op(B) [K, N] as the matmul kernels multiply them: stored values, with A's
    activation applied on load and rounded to the storage precision (A_ACT)."""
    a = np.asarray(A, np.float64)
    b = np.asarray(B, np.float64)
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    if _act_code(a_act):
        a = round_h(act_fwd(a, a_act), path)
    return a, b


def matmul(A, B, *, trans_a=0, trans_b=0, a_act=0, path="native", dtype=np.float64):
    """op(act(A)) @ op(B), accumulated in `dtype` (float64: the exact value to bound errors against)."""
    a, b = matmul_operands(A, B, trans_a=trans_a, trans_b=trans_b, a_act=a_act, path=path)
    return (a.astype(dtype) @ b.astype(dtype)).astype(np.float64)


def matmul_error(A, B, *, trans_a=0, trans_b=0, a_act=0, path="native", extra=None):
    """Elementwise bound on |f32-accumulated matmul - exact product of the operands the kernel sees|,
    plus `extra` (e.g. |bias|) as one more summand. When A_ACT is on, the kernel's operand may also
    differ from the reference's by the activation's f32 error and by which f16 neighbour it rounds
    to, so those are folded in per element of A."""
    a, b = matmul_operands(A, B, trans_a=trans_a, trans_b=trans_b, a_act=a_act, path=path)
    k = a.shape[1]
    absprod = np.abs(a) @ np.abs(b)
    if extra is not None:
        absprod = absprod + np.abs(extra)
    bound = dot_error(k + 1) * absprod
    code = _act_code(a_act)
    if code:
        x = np.asarray(A, np.float64).T if trans_a else np.asarray(A, np.float64)
        # |kernel operand - reference operand| <= both roundings + the activation's f32 error
        da = 2 * (store_error(path) * np.abs(a) + store_tiny(path)) + 2 * act_fwd_error(x, code)
        bound = bound + (da @ np.abs(b)) * (1 + dot_error(k))
    return bound


def matmul_dgrad(dZ, W, zprev, out_act, *, path="native"):
    """The dgrad epilogue before its store: (dZ @ W^T) * act'(Zprev), W stored [in, out]."""
    return matmul(dZ, W, trans_b=1, path=path) * act_grad(zprev, out_act)


# --- attention ---------------------------------------------------------------------------------
#
# The buffers of webmp.ops' attention section as arrays per batch and head: "heads" [B, H, T, d]
# (q, k, v from qkv [B*T, 3D]; O, dO [B*T, D]) and "squares" [B, H, T, T] (S, P, dP, dS
# [B*H*T, T]). Row i of a square is query i; keys j > i are masked (causal).


def attn_heads(x, B: int, T: int, H: int, d: int, part: int = 0) -> np.ndarray:
    """[B, H, T, d] view of the head columns of third `part` of x [B*T, n*H*d] (q, k, v: 0, 1, 2)."""
    D = H * d
    x = np.asarray(x, np.float64)
    return x[:, part * D : (part + 1) * D].reshape(B, T, H, d).transpose(0, 2, 1, 3)


def attn_merge(*heads) -> np.ndarray:
    """[B*T, n*H*d] from n head arrays [B, H, T, d] (attn_heads' inverse: qkv from q, k, v)."""
    B, H, T, d = heads[0].shape
    return np.concatenate([h.transpose(0, 2, 1, 3).reshape(B * T, H * d) for h in heads], 1)


def attn_squares(x, B: int, H: int, T: int) -> np.ndarray:
    """[B, H, T, T] view of a [B*H*T, T] matrix (S, P, dP, dS); `.reshape(-1, T)` is its inverse."""
    return np.asarray(x, np.float64).reshape(B, H, T, T)


def causal(T: int) -> np.ndarray:
    """[T, T] bool: key j visible from query i (j <= i)."""
    return np.tril(np.ones((T, T), bool))


def _t(x):
    return np.swapaxes(x, -1, -2)


def attention_operands(product: str, bufs: dict, B: int, T: int, H: int, d: int):
    """(op(A), op(B)) per batch-head, [B, H, M, K] and [B, H, K, N], of an attention product as its
    launcher reads them from the named buffers (qkv, P, dO, dS):
      scores S = Q K^T, values O = P V, dv = P^T dO, dp = dO V^T, dq = dS K, dk = dS^T Q."""

    def head(name, part=0):
        return attn_heads(bufs[name], B, T, H, d, part)

    def square(name):
        return attn_squares(bufs[name], B, H, T)

    ops = {
        "scores": lambda: (head("qkv", 0), _t(head("qkv", 1))),
        "values": lambda: (square("P"), head("qkv", 2)),
        "dv": lambda: (_t(square("P")), head("dO")),
        "dp": lambda: (head("dO"), _t(head("qkv", 2))),
        "dq": lambda: (square("dS"), head("qkv", 1)),
        "dk": lambda: (_t(square("dS")), head("qkv", 0)),
    }
    return ops[product]()


def bmm(a, b) -> np.ndarray:
    """Batched a @ b in float64 (exact for f16 operands and the sizes used here)."""
    return np.asarray(a, np.float64) @ np.asarray(b, np.float64)


def bmm_error(a, b, da=0.0, db=0.0) -> np.ndarray:
    """Bound on |f32-accumulated product of a' and b' - a @ b| when the kernel's operands a', b'
    differ from a, b by at most da, db elementwise (0 for the values a kernel reads): the exact
    perturbation |da||b| + |a||db| + |da||db|, plus dot_error(K) times |a'| @ |b'|."""
    a, b = np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64))
    da, db = np.broadcast_to(da, a.shape), np.broadcast_to(db, b.shape)
    k = a.shape[-1]
    return dot_error(k) * ((a + da) @ (b + db)) + da @ b + a @ db + da @ db


def attn_softmax_fwd(S, scale: float) -> np.ndarray:
    """P before the store: causal softmax(S * scale) of each row of S [..., T, T], masked entries 0."""
    S = np.asarray(S, np.float64)
    vis = causal(S.shape[-1])
    z = np.where(vis, S, -np.inf)
    e = np.where(vis, np.exp(scale * (z - z.max(-1, keepdims=True))), 0.0)
    return e / e.sum(-1, keepdims=True)


def attn_softmax_fwd_error(S, scale: float, S_err=0.0, scale_rel: float = 0.0) -> np.ndarray:
    """Bound on |attn_softmax_fwd kernel's f32 P (before the store) - attn_softmax_fwd(S, scale)|.

    The kernel reads S' (|S' - S| <= S_err) and uses a scale within scale_rel of `scale` (0 when
    `scale` is the kernel's SCALE). Per row of n = i + 1 visible scores:
    - inputs: p_j = exp(c s_j) / sum_k exp(c s_k) moves by a factor within exp(+-(c (E_j + E_max)))
      when each s_k moves by at most E_k (exact: the numerator and the denominator's weighted mean);
    - the kernel forms a_k = fl(fl(s_k - m) * SCALE) with m the exact maximum: two roundings,
      |a' - a| <= 4.01 U32 |a| (plus scale_rel |a|), then exp good to (3 + 2|a|) ulps (WGSL), an ulp
      being <= 2 U32 relative: each e_k errs by theta_k <= (6 + 8.1 |a_k|) U32 relative;
    - the sum of the e_k errs by sum_k p_k theta_k relative (before its own rounding: the f32 sum of
      n positive terms, dot_error(n)); the division: 2.5 ulps = 5 U32.
    So p_j errs by theta_j + sum_k p_k theta_k + dot_error(n) + 5 U32 relative, times 1.01 for the
    second-order terms (the total is asserted < 1e-2), plus 2^-125 absolute for results in f32's
    subnormal range.
    """
    S = np.asarray(S, np.float64)
    vis = causal(S.shape[-1])
    E = np.where(vis, np.broadcast_to(np.asarray(S_err, np.float64), S.shape), 0.0)
    Emax = E.max(-1, keepdims=True)
    p = attn_softmax_fwd(S, scale)
    z = np.where(vis, S, -np.inf)
    a = np.where(vis, scale * (z.max(-1, keepdims=True) - S + E + Emax), 0.0)  # bounds |a'_k|
    theta = (6 + 8.1 * a) * U32 + scale_rel * a
    rel_in = np.expm1(scale * (1 + scale_rel) * (E + Emax))
    n = vis.sum(-1, keepdims=True)
    dot = np.vectorize(dot_error)(n)
    # the kernel's weights p'_k are within (1 + rel_in) of p_k, up to the small terms of rel
    rel = 1.01 * (theta + (p * (1 + rel_in) * theta).sum(-1, keepdims=True) + dot + 5 * U32)
    assert rel[..., vis].max() < 1e-2, "the first-order bound needs small relative errors"
    return np.where(vis, p * ((1 + rel_in) * (1 + rel) - 1) + 2.0**-125, 0.0)


def attn_softmax_bwd(P, dP, scale: float) -> np.ndarray:
    """dS before the store: P * (dP - rowsum(dP * P)) * scale over the visible entries, 0 masked."""
    P, dP = np.asarray(P, np.float64), np.asarray(dP, np.float64)
    vis = causal(P.shape[-1])
    P, dP = np.where(vis, P, 0.0), np.where(vis, dP, 0.0)
    c = (P * dP).sum(-1, keepdims=True)
    return np.where(vis, P * (dP - c) * scale, 0.0)


def attn_softmax_bwd_error(P, dP, scale: float, P_err=0.0, dP_err=0.0, scale_rel: float = 0.0) -> np.ndarray:
    """Bound on |attn_softmax_bwd kernel's f32 dS (before the store) - attn_softmax_bwd(P, dP, scale)|
    when it reads P' and dP' within P_err, dP_err of P, dP (0 for the values a kernel reads).
    - inputs (exact): c moves by e_c = sum_k (eP_k |g_k| + p_k eg_k + eP_k eg_k), and
      p_j (g_j - c) by eP_j (|g_j - c| + eg_j + e_c) + p_j (eg_j + e_c) (g = dP);
    - the kernel: c' = f32 sum of the n products, |c' - c| <= dot_error(n) sum_k |p_k g_k|; then
      (p_j * (g_j - c')) * SCALE, three roundings: gamma_3 <= 6.01 U32 relative on |p_j (g_j - c')|;
    - a scale within scale_rel of `scale`: scale_rel of the magnitude; 2^-126 absolute for f32
      subnormals."""
    P, g = np.asarray(P, np.float64), np.asarray(dP, np.float64)
    vis = causal(P.shape[-1])
    eP = np.where(vis, np.broadcast_to(np.asarray(P_err, np.float64), P.shape), 0.0)
    eg = np.where(vis, np.broadcast_to(np.asarray(dP_err, np.float64), P.shape), 0.0)
    P, g = np.where(vis, P, 0.0), np.where(vis, g, 0.0)
    c = (P * g).sum(-1, keepdims=True)
    e_c = (eP * np.abs(g) + P * eg + eP * eg).sum(-1, keepdims=True)
    diff = np.abs(g - c)
    e_in = eP * (diff + eg + e_c) + P * (eg + e_c)
    Pm, gm = P + eP, np.abs(g) + eg  # bounds on what the kernel reads
    n = vis.sum(-1, keepdims=True)
    e_dot = np.vectorize(dot_error)(n) * (Pm * gm).sum(-1, keepdims=True)
    e_kernel = Pm * (e_dot + 6.01 * U32 * (diff + eg + e_c + e_dot))
    mag = Pm * (diff + eg + e_c + e_dot)
    return np.where(vis, scale * ((1 + scale_rel) * (e_in + e_kernel) + scale_rel * mag) + 2.0**-126, 0.0)


def attention(qkv, dO, *, B: int, T: int, H: int, d: int) -> dict:
    """Causal multi-head attention and its backward pass in float64 with the exact 1/sqrt(d): the
    heads' S, P, O and, for the output gradient dO, dP, dS and dqkv ([B*T, 3D]: dQ | dK | dV)."""
    q, k, v = (attn_heads(qkv, B, T, H, d, i) for i in range(3))
    g = attn_heads(dO, B, T, H, d)
    scale = 1 / math.sqrt(d)
    S = q @ _t(k)
    P = attn_softmax_fwd(S, scale)
    dP = g @ _t(v)
    dS = attn_softmax_bwd(P, dP, scale)
    return {
        "S": S,
        "P": P,
        "O": attn_merge(P @ v),
        "dP": dP,
        "dS": dS,
        "dqkv": attn_merge(dS @ k, _t(dS) @ q, _t(P) @ g),
    }


# --- other kernel families ---------------------------------------------------------------------


def softmax_xent(logits, labels, scale: float = 1.0, counted: int | None = None):
    """(loss per row, dlogits before the store, loss is non-finite) for the fused kernel:
    loss = log(sum_c exp(l_c - max)) - (l_y - max), dlogits = (softmax - onehot) * scale / counted
    (default B). Rows labelled NO_LABEL get loss 0 and a zero gradient."""
    z = np.asarray(logits, np.float64)
    labels = np.asarray(labels, np.int64)
    B = len(z)
    pad = labels == NO_LABEL
    lab = np.where(pad, 0, labels)
    mx = z.max(1, keepdims=True)
    e = np.exp(z - mx)
    s = e.sum(1, keepdims=True)
    # not (max + log(sum)) - l_y: that rounds the loss to the logits' ulp (float64's too)
    loss = np.log(s)[:, 0] - (z[np.arange(B), lab] - mx[:, 0])
    p = e / s
    p[np.arange(B), lab] -= 1.0
    loss[pad], p[pad] = 0.0, 0.0
    return loss, p * scale / (counted or B), bool(~np.isfinite(loss).all())


def softmax_xent_error(logits, labels, scale: float = 1.0, counted: int | None = None):
    """(loss bound, dlogits bound before the store) for the kernel's f32 evaluation. Each
    e_c = exp(l_c - max) errs by (6 + 6 |x_c|) U32 relative, x_c = l_c - max: WGSL exp is good to
    3 + 2|x| ulps (an ulp <= 2 U32) and its argument is rounded once; the row sum of C terms adds
    2 (C + 1) U32, so log(sum) errs by sum_rel = the p-weighted term errors + that, plus log's own
    error (2^-21 absolute for a sum in [1, 2], 3 ulps of log(sum) above). The loss
    log(sum) - (l_y - max) adds one rounding of l_y - max and one of the loss; each probability
    errs by 2 sum_rel + its term's error + the division's 2.5 ulps. Padding rows are exact (0)."""
    z = np.asarray(logits, np.float64)
    labels = np.asarray(labels, np.int64)
    B, C = z.shape
    pad = labels == NO_LABEL
    loss, dl, _ = softmax_xent(z, labels, scale, counted)
    n = counted or B
    mx = z.max(1)
    x = z - mx[:, None]
    e = np.exp(x)
    s = e.sum(1)
    p = e / s[:, None]
    term_rel = (6 + 6 * np.abs(x)) * U32
    sum_rel = (p * np.where(p > 0, term_rel, 0.0)).sum(1) + 2 * (C + 1) * U32
    zy = z[np.arange(B), np.where(pad, 0, labels)]
    log_err = np.maximum(2.0**-21, 6 * U32 * np.log(s))
    loss_err = sum_rel + log_err + 2 * U32 * (np.abs(zy - mx) + np.abs(loss))
    p_rel = 2 * sum_rel[:, None] + np.where(p > 0, term_rel, 0.0) + 10 * U32
    dl_err = (p_rel * p + 4 * U32 * np.abs(dl) * n / scale) * scale / n
    loss_err[pad], dl_err[pad] = 0.0, 0.0
    return loss_err, dl_err


def colsum(G) -> np.ndarray:
    return np.asarray(G, np.float64).sum(0)


def layernorm_fwd(Z, gamma, beta, eps: float = 1e-5):
    """(Y before the store, stats [M, 2] = mean, rstd) of LayerNorm over the last dimension."""
    z = np.asarray(Z, np.float64)
    mean = z.mean(1, keepdims=True)
    rstd = 1.0 / np.sqrt(((z - mean) ** 2).mean(1, keepdims=True) + eps)
    y = (z - mean) * rstd * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64)
    return y, np.concatenate([mean, rstd], 1)


def layernorm_bwd(dY, Z, stats, gamma) -> np.ndarray:
    """dZ before the store: rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dY * gamma."""
    stats = np.asarray(stats, np.float64)
    mean, rstd = stats[:, :1], stats[:, 1:]
    xhat = (np.asarray(Z, np.float64) - mean) * rstd
    g = np.asarray(dY, np.float64) * np.asarray(gamma, np.float64)
    return rstd * (g - g.mean(1, keepdims=True) - xhat * (g * xhat).mean(1, keepdims=True))


def layernorm_wgrad(dY, Z, stats):
    """(dgamma, dbeta) = (sum_r dY * xhat, sum_r dY)."""
    stats = np.asarray(stats, np.float64)
    xhat = (np.asarray(Z, np.float64) - stats[:, :1]) * stats[:, 1:]
    dY = np.asarray(dY, np.float64)
    return (dY * xhat).sum(0), dY.sum(0)


def grad_stats(G, scale: float, NWG: int, wg_size: int = 256):
    """(per-workgroup partial sums of (g / scale)^2, any non-finite g): workgroup w of the
    grid-stride loop owns the 256-element blocks b with b % NWG == w."""
    g = np.asarray(G, np.float64).ravel()
    bad = bool(~np.isfinite(g).all())
    u = np.where(np.isfinite(g), g, 0.0) / scale
    blocks = np.arange(len(g)) // wg_size
    partials = np.bincount(blocks % NWG, weights=u * u, minlength=NWG)
    return partials, bad


def grad_hist(x, path: str, e_min: int, e_max: int) -> np.ndarray:
    """grad_hist.wgsl's counts of the stored values x (int64 [e_max - e_min + 5]): zero, below
    2^e_min, floor(log2 |x|) = e_min..e_max, finite above, and what h_overflows flags (f16 paths:
    |x| >= 65504, Inf or NaN; fp32: Inf or NaN). floor(log2 |x|) from np.frexp, exact."""
    x = np.abs(np.asarray(x, np.float64).ravel())
    overflow = ~np.isfinite(x) | ((x >= F16_MAX) if path != "fp32" else False)
    finite = x[~overflow]
    nonzero = finite[finite > 0]
    e = np.frexp(nonzero)[1] - 1
    counts = np.zeros(e_max - e_min + 5, np.int64)
    counts[0] = np.count_nonzero(finite == 0)
    counts[1] = np.count_nonzero(e < e_min)
    inside = e[(e >= e_min) & (e <= e_max)]
    counts[2 : 2 + e_max - e_min + 1] = np.bincount(inside - e_min, minlength=e_max - e_min + 1)
    counts[-2] = np.count_nonzero(e > e_max)
    counts[-1] = np.count_nonzero(overflow)
    return counts


def f32(x) -> float:
    """x as the f32 the GPU holds (override constants and state words are f32)."""
    return float(np.float32(x))


SCALER_DEFAULTS = {
    "SCALING": 1,
    "GROWTH": 2.0,
    "BACKOFF": 0.5,
    "INTERVAL": 2000,
    "HYSTERESIS": 1,
    "MIN_SCALE": 1.0,
    "CLIP": 0.0,
    "LR_MIN": 0.0,
    "WARMUP": 0,
    "SCHEDULE": 1,
    "LOG_BETA1": float(np.float32(math.log(np.float32(0.9)))),  # webmp.ops.adam_log_beta(0.9)
    "LOG_BETA2": float(np.float32(math.log(np.float32(0.999)))),
}


def lr_at(it: int, c: dict) -> float:
    c = {**SCALER_DEFAULTS, **c}
    lr, warmup = c["LR"], c["WARMUP"]
    if it < warmup:
        return lr * (it + 1) / warmup
    if c["SCHEDULE"] == 0:
        return lr
    p = min((it - warmup) / (max(c["TOTAL"], warmup + 1) - warmup), 1.0)
    return c["LR_MIN"] + 0.5 * (lr - c["LR_MIN"]) * (1.0 + math.cos(math.pi * p))


def scaler_step(state: dict, found: int, partials, loss_rows, c: dict):
    """The scaler kernel's update rule (PyTorch GradScaler semantics, DeepSpeed-style hysteresis,
    a floor at MIN_SCALE): returns (new state dict, metrics record dict). `c` holds the kernel's
    override constants (B, LR, TOTAL, ... as in webmp.engine.plan); `found` is the flags word."""
    c = {k: f32(v) if isinstance(v, float) else v for k, v in {**SCALER_DEFAULTS, **c}.items()}
    s = dict(state)
    it, scale = s["iteration"], s["scale"]
    norm = math.sqrt(float(np.sum(partials, dtype=np.float64)))
    loss = float(np.sum(loss_rows, dtype=np.float64)) / c["B"]
    overflow = found != 0
    skip = c["SCALING"] == 1 and overflow
    lr = lr_at(it, c)
    clip = min(1.0, c["CLIP"] / (norm + 1e-6)) if c["CLIP"] > 0 else 1.0
    s.update(apply=0 if skip else 1, lr=lr, grad_mul=clip / scale, loss=loss, grad_norm=norm, found_inf=found)
    if not skip:
        s["opt_step"] += 1
        # 1 - e^(t ln beta) for the kernel's f32 constant ln beta: adam_bias_correction within 1 U32
        s["bc1"] = -math.expm1(s["opt_step"] * c["LOG_BETA1"])
        s["bc2"] = -math.expm1(s["opt_step"] * c["LOG_BETA2"])
    min_event = 0
    if c["SCALING"] == 1:
        if overflow:
            s["skipped_total"] += 1
            s["growth_tracker"] = 0
            if s["hysteresis_left"] > 1:
                s["hysteresis_left"] -= 1
            elif scale <= c["MIN_SCALE"]:
                min_event = 1
                s["min_scale_events"] += 1
                if s["first_min_scale_iter"] == 0:
                    s["first_min_scale_iter"] = it + 1
            else:
                s["scale"] = max(scale * c["BACKOFF"], c["MIN_SCALE"])
        else:
            s["growth_tracker"] += 1
            if s["growth_tracker"] >= c["INTERVAL"]:
                with np.errstate(over="ignore"):
                    grown_is_finite = math.isfinite(float(np.float32(scale * c["GROWTH"])))
                if grown_is_finite:
                    s["scale"] = scale * c["GROWTH"]
                s["growth_tracker"] = 0
                s["hysteresis_left"] = c["HYSTERESIS"]
    record = {
        "step": it,
        "loss": loss,
        "scale": scale,
        "skipped": int(skip),
        "lr": lr,
        "grad_norm": norm,
        "found_inf": found,
        "min_scale_event": min_event,
    }
    s["iteration"] = it + 1
    s["data_pos"] += c["B"]
    return s, record


def adam_bias_correction(beta: float, t) -> np.ndarray:
    """1 - beta^t exactly (to float64 rounding) for the f32 value of beta, the number the kernels'
    moment updates use: what scaler.wgsl's bias corrections bc1, bc2 approximate at opt_step t."""
    b = np.float64(np.float32(beta))
    t = np.asarray(t, np.float64)
    if b == 0.0:
        return np.ones_like(t)
    return -np.expm1(t * np.log1p(b - 1.0))


# scaler.wgsl's one_minus_pow: relative error bound of its bias corrections (derived in the shader)
BIAS_CORRECTION_ERROR = 12 * U32


def adamw(P, G, Mo, V, state: dict, c: dict):
    """(P, Mo, V) after one AdamW step with the state's lr, grad_mul, bc1, bc2 (unchanged when
    state['apply'] == 0). `c` holds the kernel's constants WD, BETA1, BETA2, EPS. Constants and
    state values are used as the f32 numbers the kernel reads (1 - 0.999 and 1 - f32(0.999)
    differ by 3e-5 relative)."""
    P, G, Mo, V = (np.asarray(a, np.float64) for a in (P, G, Mo, V))
    if not state["apply"]:
        return P, Mo, V
    b1, b2 = f32(c.get("BETA1", 0.9)), f32(c.get("BETA2", 0.999))
    eps, wd = f32(c.get("EPS", 1e-8)), f32(c.get("WD", 0.0))
    lr, bc1, bc2 = f32(state["lr"]), f32(state["bc1"]), f32(state["bc2"])
    g = G * f32(state["grad_mul"])
    m = b1 * Mo + (1 - b1) * g
    v = b2 * V + (1 - b2) * g * g
    p = P * (1 - lr * wd) - lr * (m / bc1) / (np.sqrt(v / bc2) + eps)
    return p, m, v


def adamw_error(P, G, Mo, V, state: dict, c: dict):
    """Bounds (m_err, v_err, p_err) on the f32 kernel's Mo, V, P against adamw's float64 values:
    m and v are a few correctly rounded f32 operations on the magnitudes below; the update
    lr m^ / (sqrt(v^) + eps) adds sqrt and two divisions (2.5 ulps each)."""
    P, G, Mo, V = (np.asarray(a, np.float64) for a in (P, G, Mo, V))
    p, m, v = adamw(P, G, Mo, V, state, c)
    b1, b2 = f32(c.get("BETA1", 0.9)), f32(c.get("BETA2", 0.999))
    lr, bc1, bc2, eps = f32(state["lr"]), f32(state["bc1"]), f32(state["bc2"]), f32(c.get("EPS", 1e-8))
    g = G * f32(state["grad_mul"])
    m_err = 8 * U32 * (b1 * np.abs(Mo) + (1 - b1) * np.abs(g))
    v_err = 8 * U32 * (b2 * V + (1 - b2) * g * g)
    upd = lr * (m / bc1) / (np.sqrt(v / bc2) + eps)
    # v = 0 (a zero gradient on zero moments) makes m = 0 and the update exactly 0
    with np.errstate(divide="ignore", invalid="ignore"):
        upd_err = np.where(
            v > 0, lr / bc1 * m_err / np.sqrt(v / bc2) + np.abs(upd) * (0.5 * v_err / v + 24 * U32), 0.0
        )
    p_err = 4 * U32 * np.abs(P) + upd_err + 2 * U32 * np.abs(p)
    return m_err, v_err, p_err


def gather(train_x, train_y, data_pos: int, batch: int, seed: int):
    """(X, y) the gather_train kernel produces at this data position (X before the store)."""
    rows = batch_rows(data_pos, batch, len(train_x), seed)
    return np.asarray(train_x, np.float64)[rows], np.asarray(train_y)[rows]


def eval_count(logits, labels):
    """(correct, counted) over rows whose label is not the padding label 0xffffffff; ties go to the
    lowest index, as the kernel's strict '>' scan."""
    labels = np.asarray(labels, np.int64)
    valid = labels != 0xFFFFFFFF
    pred = np.argmax(np.asarray(logits), 1)
    return int((pred[valid] == labels[valid]).sum()), int(valid.sum())


# --- the whole MLP, float64 ----------------------------------------------------------------------


def mlp_loss_and_grads(
    params: dict,
    x,
    y,
    *,
    act="gelu",
    ln: bool = False,
    scale: float = 1.0,
    store: str | None = None,
    eps: float = 1e-5,
):
    """Mean softmax cross-entropy of the engine's MLP and its gradients, in float64.

    params: {name: array} as the plan names them (W{l} [in, out], b{l}, ln_g{l}, ln_b{l}).
    Gradients are multiplied by `scale`, as the engine's g_* buffers hold them. With store=path,
    values are rounded where the engine stores them in the activation format (inputs, weight
    copies, pre-activations, activations on load, LayerNorm outputs, backward deltas): the
    mixed-precision model of the computation with every other operation exact.
    """
    rnd = (lambda a: a) if store is None else (lambda a: round_h(a, store))
    L = sum(1 for k in params if k.startswith("W"))
    W = [rnd(np.asarray(params[f"W{l}"], np.float64)) for l in range(L)]
    b = [np.asarray(params[f"b{l}"], np.float64) for l in range(L)]
    y = np.asarray(y, np.int64)

    inputs: list[np.ndarray] = []
    pre: list[np.ndarray] = []
    cache: list[tuple[np.ndarray, np.ndarray]] = []
    h = rnd(np.asarray(x, np.float64))
    for l in range(L):
        if l > 0:
            h = rnd(act_fwd(pre[-1], act))
        inputs.append(h)
        z = h @ W[l] + b[l]
        if l == L - 1:
            logits = z
            break
        z = rnd(z)
        if ln:
            yl, stats = layernorm_fwd(z, params[f"ln_g{l}"], params[f"ln_b{l}"], eps)
            cache.append((z, stats))
            pre.append(rnd(yl))
        else:
            pre.append(z)

    loss_rows, d, _ = softmax_xent(logits, y, scale)
    d = rnd(d)
    grads = {}
    for l in reversed(range(L)):
        grads[f"W{l}"] = inputs[l].T @ d
        grads[f"b{l}"] = d.sum(0)
        if l == 0:
            break
        d = rnd((d @ W[l].T) * act_grad(pre[l - 1], act))
        if ln:
            z, stats = cache[l - 1]
            grads[f"ln_g{l - 1}"], grads[f"ln_b{l - 1}"] = layernorm_wgrad(d, z, stats)
            d = rnd(layernorm_bwd(d, z, stats, params[f"ln_g{l - 1}"]))
    return float(loss_rows.mean()), grads


# --- token models ----------------------------------------------------------------------------------


def gather_windows(tokens, data_pos: int, batch: int, T: int, seed: int):
    """(idx, targets) [batch * T] of gather_windows at window number data_pos (in windows)."""
    tokens = np.asarray(tokens, np.uint32)
    starts = window_starts(data_pos, batch, len(tokens) - T, seed)
    rows = (starts[:, None] + np.arange(T)[None, :]).ravel()
    return tokens[rows], tokens[rows + 1]


def gather_windows_eval(tokens, batch: int, T: int, offset: int):
    """(idx, targets) of gather_windows_eval: windows offset .. offset + batch - 1, consecutive;
    rows without a next token hold token 0 and NO_LABEL."""
    tokens = np.asarray(tokens, np.uint32)
    p = offset * T + np.arange(batch * T)
    valid = p + 1 < len(tokens)
    idx = np.where(valid, tokens[np.minimum(p, len(tokens) - 1)], 0).astype(np.uint32)
    targets = np.where(valid, tokens[np.minimum(p + 1, len(tokens) - 1)], NO_LABEL).astype(np.uint32)
    return idx, targets


def embed_fwd(idx, wte, wpe) -> np.ndarray:
    """X before the store: wte[idx[r]] + wpe[r % T]."""
    wpe = np.asarray(wpe, np.float64)
    idx = np.asarray(idx, np.int64)
    return np.asarray(wte, np.float64)[idx] + wpe[np.arange(len(idx)) % len(wpe)]


def token_rows(idx, V: int):
    """(spans [V, 2] = (start, count), order [R]) of the stable counting sort of idx by token."""
    idx = np.asarray(idx, np.int64)
    counts = np.bincount(idx, minlength=V)[:V]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return np.stack([starts, counts], 1).astype(np.uint32), np.argsort(idx, kind="stable").astype(np.uint32)


def embed_wgrad(idx, dX, V: int, T: int, dwte0=None):
    """(dwte, dwpe) exactly: dwte[v] = dwte0[v] (if accumulating) + sum of dX[r] over rows of token
    v, dwpe[t] = sum of dX[r] over rows r % T == t; and (abs_dwte, abs_dwpe), the same sums of
    |terms| (what the f32 error bounds scale with)."""
    idx = np.asarray(idx, np.int64)
    dX = np.asarray(dX, np.float64)
    D = dX.shape[1]
    dwte, abs_te = np.zeros((V, D)), np.zeros((V, D))
    np.add.at(dwte, idx, dX)
    np.add.at(abs_te, idx, np.abs(dX))
    if dwte0 is not None:
        dwte += np.asarray(dwte0, np.float64)
        abs_te += np.abs(np.asarray(dwte0, np.float64))
    dwpe = dX.reshape(-1, T, D).sum(0)
    abs_pe = np.abs(dX).reshape(-1, T, D).sum(0)
    return dwte, dwpe, abs_te, abs_pe


def embed_wgrad_f32(idx, dX, V: int, T: int, dwte0=None):
    """(dwte, dwpe) as float32 sums in row order, each started at 0 (dwte0 added last): what the
    kernel computes when every f32 addition rounds to nearest, bit for bit."""
    idx = np.asarray(idx, np.int64)
    dX = np.asarray(dX, np.float32)
    D = dX.shape[1]
    dwte, dwpe = np.zeros((V, D), np.float32), np.zeros((T, D), np.float32)
    for r in range(len(idx)):
        dwte[idx[r]] += dX[r]
        dwpe[r % T] += dX[r]
    if dwte0 is not None:
        dwte += np.asarray(dwte0, np.float32)
    return dwte, dwpe


# --- the whole GPT, float64 ------------------------------------------------------------------------
#
# A pre-LayerNorm GPT-2-style character model. Parameter names (per layer l = 0 .. n_layer - 1):
#   wte [V, D], wpe [Tmax, D]                      token and position embeddings (f32 tables)
#   ln1_g{l}, ln1_b{l} [D]                         LayerNorm before attention
#   Wqkv{l} [D, 3D], bqkv{l} [3D]                  qkv = a @ Wqkv + bqkv, columns [q | k | v]
#   Wo{l} [D, D], bo{l} [D]                        attention output projection (residual branch)
#   ln2_g{l}, ln2_b{l} [D]                         LayerNorm before the MLP
#   W1{l} [D, 4D], b1{l} [4D], W2{l} [4D, D], b2{l} [D]   MLP (GELU, tanh approximation)
#   lnf_g, lnf_b [D]                               final LayerNorm
#   Whead [D, V], bhead [V]                        the head, absent when tied (logits = xf @ wte^T)
# Matrices are stored [in, out] as the MLP's, so a GPU weight buffer is the same array.

# The parameter table above, its initialisation (gpt_init) and the weight-decay rule (GPT_DECAY)
# are the model's own, in webmp/models/gpt.py; the reference uses them as they are.


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
    """
    rnd = (lambda v: v) if store is None else (lambda v: round_h(v, store))
    idx = np.asarray(idx, np.int64)
    Bn, T = idx.shape
    R = Bn * T
    wte = np.asarray(params["wte"], np.float64)
    V, D = wte.shape
    H = n_head
    if D % H:
        raise ValueError(f"D = {D} is not a multiple of n_head = {H}")
    d = D // H
    sc = 1.0 / math.sqrt(d) if attn_scale is None else float(attn_scale)
    labels = np.asarray(targets, np.int64).reshape(R)
    n_rows = int((labels != NO_LABEL).sum()) if counted is None else int(counted)
    n_rows = max(n_rows, 1)

    def p64(name):
        return np.asarray(params[name], np.float64)

    def wcopy(name):
        return rnd(p64(name))

    def heads(v, part=0):
        return attn_heads(v, Bn, T, H, d, part)

    # forward
    rows = idx.reshape(R)
    x = rnd(wte[rows] + p64("wpe")[np.tile(np.arange(T), Bn)])
    cache: dict = {"x0": x, "layers": []}
    for l in range(n_layer):
        c: dict = {"x_in": x}
        a, c["ln1_stats"] = layernorm_fwd(x, p64(f"ln1_g{l}"), p64(f"ln1_b{l}"), eps)
        c["a"] = a = rnd(a)
        c["qkv"] = qkv = rnd(a @ wcopy(f"Wqkv{l}") + p64(f"bqkv{l}"))
        q, k, v = (heads(qkv, i) for i in range(3))
        c["S"] = S = q @ _t(k)
        c["P"] = P = rnd(attn_softmax_fwd(S, sc))
        c["O"] = O = rnd(attn_merge(P @ v))
        y = rnd(O @ wcopy(f"Wo{l}") + p64(f"bo{l}"))
        c["x_mid"] = x = rnd(x + y)
        m, c["ln2_stats"] = layernorm_fwd(x, p64(f"ln2_g{l}"), p64(f"ln2_b{l}"), eps)
        c["m"] = m = rnd(m)
        c["z"] = z = rnd(m @ wcopy(f"W1{l}") + p64(f"b1{l}"))
        c["h"] = h = rnd(act_fwd(z, "gelu"))
        u = rnd(h @ wcopy(f"W2{l}") + p64(f"b2{l}"))
        c["x"] = x = rnd(x + u)
        cache["layers"].append(c)
    xf, cache["lnf_stats"] = layernorm_fwd(x, p64("lnf_g"), p64("lnf_b"), eps)
    cache["x_final"] = x
    cache["xf"] = xf = rnd(xf)
    Wh = rnd(wte.T) if tie_head else wcopy("Whead")
    logits = xf @ Wh
    if not tie_head:
        logits = logits + p64("bhead")
    cache["logits"] = logits
    loss_rows, dlogits, _ = softmax_xent(logits, labels, loss_scale, n_rows)
    loss = float(loss_rows.sum() / n_rows)
    if not grads:
        return loss, None, cache

    # backward
    g: dict[str, np.ndarray] = {}
    cache["dlogits"] = dl = rnd(dlogits)
    if tie_head:
        g["wte"] = dl.T @ xf
    else:
        g["Whead"], g["bhead"] = xf.T @ dl, dl.sum(0)
    cache["dxf"] = dxf = rnd(dl @ Wh.T)
    g["lnf_g"], g["lnf_b"] = layernorm_wgrad(dxf, cache["x_final"], cache["lnf_stats"])
    dx = rnd(layernorm_bwd(dxf, cache["x_final"], cache["lnf_stats"], p64("lnf_g")))
    for l in reversed(range(n_layer)):
        c = cache["layers"][l]
        c["dx_out"] = dx
        # MLP branch: u = h @ W2 + b2 receives dx
        g[f"W2{l}"], g[f"b2{l}"] = c["h"].T @ dx, dx.sum(0)
        c["dz"] = dz = rnd((dx @ wcopy(f"W2{l}").T) * act_grad(c["z"], "gelu"))
        g[f"W1{l}"], g[f"b1{l}"] = c["m"].T @ dz, dz.sum(0)
        c["dm"] = dm = rnd(dz @ wcopy(f"W1{l}").T)
        g[f"ln2_g{l}"], g[f"ln2_b{l}"] = layernorm_wgrad(dm, c["x_mid"], c["ln2_stats"])
        dx = rnd(dx + rnd(layernorm_bwd(dm, c["x_mid"], c["ln2_stats"], p64(f"ln2_g{l}"))))
        c["dx_mid"] = dx
        # attention branch: y = O @ Wo + bo receives dx
        g[f"Wo{l}"], g[f"bo{l}"] = c["O"].T @ dx, dx.sum(0)
        c["dO"] = dO = rnd(dx @ wcopy(f"Wo{l}").T)
        q, k, v = (heads(c["qkv"], i) for i in range(3))
        P, gO = c["P"], heads(dO)
        c["dP"] = dP = gO @ _t(v)
        c["dS"] = dS = rnd(attn_softmax_bwd(P, dP, sc))
        c["dqkv"] = dqkv = rnd(attn_merge(dS @ k, _t(dS) @ q, _t(P) @ gO))
        g[f"Wqkv{l}"], g[f"bqkv{l}"] = c["a"].T @ dqkv, dqkv.sum(0)
        c["da"] = da = rnd(dqkv @ wcopy(f"Wqkv{l}").T)
        g[f"ln1_g{l}"], g[f"ln1_b{l}"] = layernorm_wgrad(da, c["x_in"], c["ln1_stats"])
        dx = rnd(dx + rnd(layernorm_bwd(da, c["x_in"], c["ln1_stats"], p64(f"ln1_g{l}"))))
    cache["dx0"] = dx
    dwte = np.zeros((V, D))
    np.add.at(dwte, rows, dx)
    g["wte"] = g.get("wte", 0.0) + dwte
    dwpe = np.zeros_like(p64("wpe"))
    dwpe[:T] = dx.reshape(Bn, T, D).sum(0)
    g["wpe"] = dwpe
    return loss, {name: g[name] for name in params}, cache


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


def sample_window(seq, n: int, T: int) -> np.ndarray:
    """idx [T] of sample_window.wgsl: the last min(n, T) of the n tokens seq holds, then zeros."""
    seq = np.asarray(seq, np.uint32)
    n = min(n, len(seq))
    shown = min(n, T)
    idx = np.zeros(T, np.uint32)
    idx[:shown] = seq[n - shown : n]
    return idx


def sample_uniform(seed: int, pos) -> np.ndarray:
    """sample_next.wgsl's u for the token at position(s) `pos`, bit for bit: the top 24 bits of
    pcg_hash(seed ^ pcg_hash(pos)) times 2^-24 (float64 holding the f32 value exactly)."""
    from ..data.tables import pcg_hash

    bits = pcg_hash(np.uint64(seed) ^ pcg_hash(pos)) >> np.uint64(8)
    return bits.astype(np.float64) * 2.0**-24


def sample_probs(row, TEMPERATURE: float, CUTOFF: float) -> np.ndarray:
    """The probabilities sample_next draws from for one logits row (f32 values), exactly in float64:
    e_c = exp((l_c - m) / TEMPERATURE) (m the row maximum), 0 where m - l_c >= CUTOFF, over their
    sum. TEMPERATURE and CUTOFF as the kernel's constants (webmp.ops.sample_temperature)."""
    row = np.asarray(row, np.float64)
    gap = row.max() - row
    e = np.where(gap < CUTOFF, np.exp(-gap / TEMPERATURE), 0.0)
    return e / e.sum()


def sample_draw(p, u: float) -> int:
    """The token sample_next picks in exact arithmetic: the first c with p_0 + ... + p_c > u."""
    cum = np.cumsum(np.asarray(p, np.float64))
    above = np.nonzero(cum > u)[0]
    return int(above[0]) if len(above) else int(np.nonzero(np.asarray(p) > 0)[0][-1])


SAMPLE_WG = 64  # sample_next.wgsl's workgroup size
SAMPLE_CUTOFF = 87.0  # webmp.ops.SAMPLE_CUTOFF: weights at (m - l) / TEMPERATURE >= this are 0


def sample_draw_bound(row, TEMPERATURE: float, CUTOFF: float) -> float:
    """A bound on how far sample_next's f32 comparison "running sum > u * total", divided by the
    total, can stand from the exact "p_0 + ... + p_c > u": when no cumulative probability of
    sample_probs lies within it of u, the kernel picks sample_draw's token.

    Per weight: l - m (< 1 ulp), the division (2.5 ulp), so the argument x errs by < 7 U32 |x|,
    and exp errs by < 3 + 2|x| ulp (WGSL): |e~ - e| < U32 (6 + 11|x|) e. The sums (a thread's
    columns, then the chunks, <= V + WG additions on any path) err by < dot_error(V + WG) of the
    total; u * total by one rounding; weights set to 0 at the cutoff by < exp(-87) each."""
    row = np.asarray(row, np.float64)
    gap = row.max() - row
    x = -gap / TEMPERATURE
    e = np.where(gap < CUTOFF, np.exp(x), 0.0)
    total = e.sum()
    weights = float((U32 * (6 + 11 * np.abs(x)) * e).sum()) + len(row) * math.exp(-SAMPLE_CUTOFF)
    E = weights + dot_error(len(row) + SAMPLE_WG) * total
    return 1.01 * (2 * E + 2 * U32 * total) / total
