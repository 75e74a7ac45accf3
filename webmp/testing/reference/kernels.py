"""float64 references for every kernel family, with the error bounds the tests check the kernels
against.

Kernel references take the values a kernel actually reads (stored f16 operands are exact in float64)
and return the exact float64 result of the operation *before* the kernel's final store; the f32
arithmetic and the f16 store are accounted for by error bounds (see `store_error`, `dot_error`).
The arguments mirror the kernels' override constants, so a test passes one dict to both.

Rounding facts the bounds rest on (WGSL spec, "Floating Point Accuracy"):
- f32 +, -, * are correctly rounded, and WGSL lets "correctly rounded" pick either neighbour, so
  one operation errs by less than one ulp: relative 2 * U32.
- f32 -> f16 conversion (vec2<f16>(v), pack2x16float) may also round to either neighbour:
  a stored value is within one f16 ulp, relative 2 * U16, or 2^-24 absolute in the subnormal range.

The optimizer's kernels (scaler, AdamW) are optim.py's, the token models' (windows, embeddings,
sampling) tokens.py's.
"""

from __future__ import annotations

import math

import numpy as np

from ...data.tables import batch_rows
from ...engine.formats import FORMATS, f32_bits_to_narrow

U16 = 2.0**-11  # f16 unit roundoff
U32 = 2.0**-24  # f32 unit roundoff
F16_MAX = 65504.0
F16_TINY = 2.0**-24  # smallest f16 subnormal = f16 ulp below 2^-14
GELU_K = math.sqrt(2.0 / math.pi)
GELU_C = 0.044715
ACT = {"none": 0, "relu": 1, "gelu": 2, "silu": 3, "tanh": 4}
NO_LABEL = 0xFFFFFFFF  # common.wgsl's label of padding rows


# --- rounding ----------------------------------------------------------------------------------


def round_h(x, path: str) -> np.ndarray:
    """x as stored in the activation format of `path` (f16, bf16, or f32 for 'fp32'), as float64."""
    if path == "bf16":
        bits = f32_bits_to_narrow(np.asarray(x, np.float32).view(np.uint32), FORMATS["bf16"])
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    dt = np.float32 if path == "fp32" else np.float16
    return np.asarray(x, np.float64).astype(dt).astype(np.float64)


def store_error(path: str) -> float:
    """Relative error bound of one store into the activation format (see the module docstring);
    bf16's unit roundoff is 2^-8."""
    return {"fp32": 2 * U32, "bf16": 2 * 2.0**-8}.get(path, 2 * U16)


def store_tiny(path: str) -> float:
    """Absolute error bound of a store in the subnormal range (f32 subnormals may flush to 0, and
    bf16's are f32's)."""
    return 2.0**-126 if path in ("fp32", "bf16") else F16_TINY


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
    if kind == 3:
        return x * _sigmoid(x)
    if kind == 4:
        return np.tanh(x)
    return x


def _sigmoid(x) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow for any x."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def act_grad(x, kind) -> np.ndarray:
    """d act / dx at the pre-activation x (ReLU: 0 at x = 0, as the kernel)."""
    x = np.asarray(x, np.float64)
    kind = _act_code(kind)
    if kind == 1:
        return (x > 0).astype(np.float64)
    if kind == 2:
        t = np.tanh(GELU_K * (x + GELU_C * x**3))
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * x * x)
    if kind == 3:
        return _sigmoid(x) * (1.0 + x * _sigmoid(-x))
    if kind == 4:
        return 1.0 - np.tanh(x) ** 2
    return np.ones_like(x)


# Bounds on the kernels' f32 evaluation of the activations. ReLU is exact. GELU goes through WGSL
# tanh, whose accuracy is inherited from (exp(x) - exp(-x)) / (exp(x) + exp(-x)) with exp good to
# (3 + 2|x|) ulps (|x| <= 10 after the clamp): an absolute error below 2^-18 leaves a wide margin;
# the few f32 multiplications around it add at most 16 U32 relative.
# The same bound serves Tanh (clamped to |x| <= 10, where f32's tanh is already 1).
# SiLU's sigmoid comes from e = exp(-|x|), good to (3 + 2|x|) ulps (<= 2 U32 each), then 1 + e and
# a division (2.5 ulps): sigmoid(+-x) err by SIG(x) = (13 + 4|x|) U32 relative (the map from e's
# relative error to the sigmoid's has gain <= 1); f32 results below 2^-126 may flush to 0.
TANH_ERROR = 2.0**-18
F32_TINY = 2.0**-126


def _sigmoid_error(x) -> np.ndarray:
    return (13 + 4 * x) * U32


def act_fwd_error(x, kind) -> np.ndarray:
    """Bound on |f32 act_fwd(x) - exact|. GELU: 0.5 x (1 + tanh), |x| times the tanh error; SiLU:
    x * sigmoid(x), the sigmoid's error and one rounding, relative; Tanh: the tanh error."""
    x = np.abs(np.asarray(x, np.float64))
    code = _act_code(kind)
    if code == 2:
        return (TANH_ERROR + 16 * U32) * x
    if code == 3:
        return (_sigmoid_error(x) + 3 * U32) * np.abs(act_fwd(x, 3)) + 2 * F32_TINY * (1 + x)
    if code == 4:
        return np.full_like(x, TANH_ERROR + 16 * U32)
    return np.zeros_like(x)


def act_grad_error(x, kind) -> np.ndarray:
    """Bound on |f32 act_grad(x) - exact|. GELU: the derivative of its gradient expression with
    respect to tanh is at most 0.5 + |x| + |x|^3 in magnitude. SiLU: s(x) (1 + x s(-x)) with both
    sigmoids within SIG relative and four roundings, bounded on the magnitudes s (1 + |x| s(-x)).
    Tanh: 1 - t^2 moves by at most 2 |dt| (|t| <= 1), plus two roundings."""
    xs = np.asarray(x, np.float64)
    x = np.abs(xs)
    code = _act_code(kind)
    if code == 2:
        return (TANH_ERROR + 16 * U32) * (1 + x + x**3)
    if code == 3:
        s, sm = _sigmoid(xs), _sigmoid(-xs)
        return 2.01 * (_sigmoid_error(x) + 4 * U32) * s * (1 + x * sm) + 2 * F32_TINY * (1 + x)
    if code == 4:
        return np.full_like(x, 2 * (TANH_ERROR + 16 * U32) + 4 * U32)
    return np.zeros_like(x)


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


def transposed(x):
    """Each matrix of a stack [..., M, N] transposed: [..., N, M]."""
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
        "scores": lambda: (head("qkv", 0), transposed(head("qkv", 1))),
        "values": lambda: (square("P"), head("qkv", 2)),
        "dv": lambda: (transposed(square("P")), head("dO")),
        "dp": lambda: (head("dO"), transposed(head("qkv", 2))),
        "dq": lambda: (square("dS"), head("qkv", 1)),
        "dk": lambda: (transposed(square("dS")), head("qkv", 0)),
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
    S = q @ transposed(k)
    P = attn_softmax_fwd(S, scale)
    dP = g @ transposed(v)
    dS = attn_softmax_bwd(P, dP, scale)
    return {
        "S": S,
        "P": P,
        "O": attn_merge(P @ v),
        "dP": dP,
        "dS": dS,
        "dqkv": attn_merge(dS @ k, transposed(dS) @ q, transposed(P) @ g),
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
