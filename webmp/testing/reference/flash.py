"""float64 reference and error bounds of the fused (flash-style) causal attention kernels
(webmp/ops/flash.py, shaders/attention/flash*.wgsl), and of the three-kernel form they are compared
with (webmp/ops/attention.py: products, softmaxes), both from the values the kernels read.

The exact values are kernels.attention's (O, dqkv) with the row log-sum-exp and Dsum added. The
bounds follow the kernels' rounding points:
  three-kernel form  S f32 -> P stored h -> O = P V f32, stored h; dP f32 -> dS stored h -> dQ, dK
                     f32, stored h; dV = P^T dO from the stored P;
  fused form         s f32 -> unnormalised weights exp((s - m_tile) SCALE) f32, rescaled by
                     alpha = exp((m_old - m) SCALE) f32 when the running max grows, O = o / l stored
                     h; backward P recomputed exp((s - lse) SCALE) f32, dS f32, dQ, dK, dV f32,
                     stored h; Dsum = dO . O from the stored O.
So on the f16 paths the fused form has two h roundings fewer per element chain (P and dS), and on
fp32 the forms differ by f32 reassociation and exp/log ulps only. A bound between the two forms is
the sum of their bounds against the exact values (triangle inequality).
"""

from __future__ import annotations

import math

import numpy as np

from .kernels import (
    U32,
    attention,
    attn_heads,
    attn_merge,
    attn_softmax_bwd_error,
    attn_softmax_fwd,
    attn_softmax_fwd_error,
    bmm_error,
    causal,
    dot_error,
    store_error,
    store_tiny,
    transposed,
)


def stored(exact, f32_err, path: str) -> np.ndarray:
    """Bound on a value computed in f32 within f32_err of `exact`, then stored in the activation
    format of `path` (one more rounding: relative store_error, absolute store_tiny)."""
    return f32_err * (1 + store_error(path)) + store_error(path) * np.abs(exact) + store_tiny(path)


def flash_attention(qkv, dO, O_stored, *, B: int, T: int, H: int, d: int) -> dict:
    """kernels.attention's exact values plus lse [B*H*T] (m + log(sum_k exp((s_k - m) / sqrt(d))) *
    sqrt(d), the row's log-sum-exp in units of raw scores) and Dsum [B*H*T] (rowsum(dO * O_stored):
    the kernel's f32 sum of the stored O, exact here) and Dsum_abs (the sum of its terms' magnitudes)."""
    want = attention(qkv, dO, B=B, T=T, H=H, d=d)
    S, vis, scale = want["S"], causal(T), 1 / math.sqrt(d)
    z = np.where(vis, S, -np.inf)
    m = z.max(-1)
    l = np.where(vis, np.exp(scale * (z - m[..., None])), 0).sum(-1)
    want["lse"] = (m + np.log(l) / scale).reshape(-1)
    g, o = attn_heads(dO, B, T, H, d), attn_heads(O_stored, B, T, H, d)
    want["Dsum"] = (g * o).sum(-1).reshape(-1)
    want["Dsum_abs"] = np.abs(g * o).sum(-1).reshape(-1)  # what its f32 sum's error scales with
    return want


def _rescale_rel(S, S_err, scale: float, bc: int) -> np.ndarray:
    """phi [..., T, 1]: relative error a row's weights gain from the online rescaling, first order.
    A key of tile t is multiplied by the rounded alpha of every later tile the row visits: each
    alpha' = exp(fl(fl(m_old - m) * SCALE)) errs by (6 + 8.1 |a_u|) U32 (as one exp of the
    softmax's, kernels.attn_softmax_fwd_error) and its product with l and o by 2 U32, and the |a_u|
    of one row add up to at most SCALE times the row's range of scores (the running max only grows),
    over at most ceil((i + 1) / bc) tiles."""
    T = S.shape[-1]
    vis = causal(T)
    E = np.where(vis, np.broadcast_to(np.asarray(S_err, np.float64), S.shape), 0.0)
    hi = np.where(vis, S + E, -np.inf).max(-1, keepdims=True)
    lo = np.where(vis, S - E, np.inf).min(-1, keepdims=True)
    tiles = np.ceil(np.arange(1, T + 1) / bc)[:, None]
    return (8 * tiles + 8.1 * scale * (1 + U32) * (hi - lo)) * U32


def flash_fwd_error(qkv, *, B: int, T: int, H: int, d: int, bc: int, path: str) -> dict:
    """Bounds of the fused forward: "P" [B, H, T, T] on the kernel's effective normalised weights
    (w'_j / l', which O' = o' / l' applies to v), "O" [B*T, D] on the stored O, "lse" [B*H*T] on
    the f32 lse. The weights' bound is the softmax kernel's (the scores' f32 error, the two
    roundings of each exp argument, exp's ulps, the sum, the division: attn_softmax_fwd_error with
    the f32 SCALE within U32 of 1/sqrt(d)) plus phi (_rescale_rel) in each weight and in the sum.
    O's f32 error is bmm_error(P, V) with P within that bound, then one store. lse = m + log(l') /
    SCALE: l' within rho = sum_k p_k (theta_k + phi) + dot_error(n) relative (theta_k < 1e-2 as the
    softmax bound asserts, bounded here by its own weights' relative bound), WGSL's log within
    2^-21 absolute on [0.5, 2] and 3 ulps elsewhere (l' is in [1, n]: <= 2^-21 + 6 U32 log n), the
    division and SCALE 3 U32 relative of log(l') / SCALE, the addition 2 U32 of |lse|, and m the
    largest score within its f32 error."""
    D, scale = H * d, 1 / math.sqrt(d)
    q, k, v = (attn_heads(qkv, B, T, H, d, i) for i in range(3))
    S = q @ transposed(k)
    e_S = bmm_error(q, transposed(k))
    P = attn_softmax_fwd(S, scale)
    vis = causal(T)
    phi = _rescale_rel(S, e_S, scale, bc)
    e_P = attn_softmax_fwd_error(S, scale, e_S, U32)
    rel_in = np.expm1(scale * (1 + U32) * 2 * np.where(vis, e_S, 0).max(-1, keepdims=True))
    e_P = e_P + np.where(vis, P * (1 + rel_in) * 2.02 * phi, 0.0)
    O = P @ v
    e_O = stored(O, bmm_error(P, v, da=e_P), path)
    rel_p = np.where(vis, e_P / np.maximum(P, 1e-300), 0.0)
    n = np.arange(1, T + 1)[:, None]
    rho = (P * rel_p).sum(-1, keepdims=True) + np.vectorize(dot_error)(n)
    lse = flash_attention(qkv, np.zeros((B * T, D)), np.zeros((B * T, D)), B=B, T=T, H=H, d=d)["lse"]
    lse = lse.reshape(B, H, T, 1)
    e_log = rho / (1 - rho) + 2.0**-21 + 6 * U32 * np.log(n)
    e_m = np.where(vis, e_S, 0).max(-1, keepdims=True)
    e_lse = (e_log + 3 * U32 * np.log(n)) / scale * (1 + 4 * U32) + 2.01 * U32 * np.abs(lse) + e_m
    return {"P": e_P, "O": attn_merge(e_O), "O_heads": e_O, "lse": e_lse.reshape(-1), "S": e_S}


def flash_bwd_error(qkv, dO, O_stored, fwd: dict, *, B: int, T: int, H: int, d: int, path: str) -> dict:
    """Bounds of the fused backward given the forward's bounds `fwd` (flash_fwd_error): "Dsum" on
    its f32 sum against the exact dO . O (the stored O's error plus dot_error(d)), "dqkv" [B*T, 3D].
    - P'' = exp(fl(fl(s' - lse') * SCALE)): s' within e_S (the forward's own sum, recomputed), lse'
      within e_lse, two roundings of the argument a = SCALE |s - lse| and exp's (3 + 2|a|) ulps:
      P'' within P (expm1(SCALE (e_S + e_lse) (1 + U32)) + (6 + 8.1 a + a) U32) (first order);
    - dS'' = fl(fl(P'' fl(dp' - Dsum')) SCALE), dp' = dO . v in f32 (bmm_error), Dsum' within
      e_Dsum of the exact c = sum_j P_j dP_j: kernels.attn_softmax_bwd_error's input and rounding
      terms with c's error given directly;
    - dV = P''^T dO, dQ = dS'' K, dK = dS''^T Q: bmm_error with the weights' bounds, one store each."""
    scale = 1 / math.sqrt(d)
    q, k, v = (attn_heads(qkv, B, T, H, d, i) for i in range(3))
    g, o_st = attn_heads(dO, B, T, H, d), attn_heads(O_stored, B, T, H, d)
    want = attention(qkv, dO, B=B, T=T, H=H, d=d)
    P, dP, vis = want["P"], want["dP"], causal(T)
    e_D = (np.abs(g) * fwd["O_heads"]).sum(-1, keepdims=True) + dot_error(d) * (np.abs(g) * np.abs(o_st)).sum(
        -1, keepdims=True
    )
    lse = flash_attention(qkv, dO, O_stored, B=B, T=T, H=H, d=d)["lse"].reshape(B, H, T, 1)
    a = scale * np.abs(np.where(vis, want["S"], 0) - lse)
    e_lse = fwd["lse"].reshape(B, H, T, 1)
    e_P2 = np.where(vis, P * np.expm1(scale * (fwd["S"] + e_lse) * (1 + U32) + (6 + 9.1 * a) * U32), 0.0)
    e_dP = bmm_error(g, transposed(v))
    c = (P * dP).sum(-1, keepdims=True)
    diff = np.abs(dP - c)
    e_in = e_P2 * (diff + e_dP + e_D) + P * (e_dP + e_D)
    Pm = P + e_P2
    mag = Pm * (diff + e_dP + e_D)
    e_dS = np.where(vis, scale * ((1 + U32) * (e_in + 6.01 * U32 * mag) + U32 * mag) + 2.0**-126, 0.0)
    dS = want["dS"]
    e_dQ = stored(dS @ k, bmm_error(dS, k, da=e_dS), path)
    e_dK = stored(transposed(dS) @ q, bmm_error(transposed(dS), q, da=transposed(e_dS)), path)
    e_dV = stored(transposed(P) @ g, bmm_error(transposed(P), g, da=transposed(e_P2)), path)
    return {"Dsum": e_D.reshape(-1), "dqkv": attn_merge(e_dQ, e_dK, e_dV)}


def unfused_attention_error(qkv, dO, *, B: int, T: int, H: int, d: int, path: str) -> dict:
    """Bounds of the three-kernel form's O and dqkv (tests/kernels/test_attention.py's chain): the
    scores' f32 error feeds the softmax, the stored P's error the products with P and the softmax
    backward, dP's the softmax backward, the stored dS's dQ and dK; the f32 SCALE within U32."""
    want = attention(qkv, dO, B=B, T=T, H=H, d=d)
    q, k, v = (attn_heads(qkv, B, T, H, d, i) for i in range(3))
    g, t, scale = attn_heads(dO, B, T, H, d), transposed, 1 / math.sqrt(d)
    P, dS = want["P"], want["dS"]
    e_P = stored(P, attn_softmax_fwd_error(want["S"], scale, bmm_error(q, t(k)), U32), path)
    e_O = stored(P @ v, bmm_error(P, v, da=e_P), path)
    e_dV = stored(t(P) @ g, bmm_error(t(P), g, da=t(e_P)), path)
    e_dS = stored(dS, attn_softmax_bwd_error(P, want["dP"], scale, e_P, bmm_error(g, t(v)), U32), path)
    e_dQ = stored(dS @ k, bmm_error(dS, k, da=e_dS), path)
    e_dK = stored(t(dS) @ q, bmm_error(t(dS), q, da=t(e_dS)), path)
    return {"O": attn_merge(e_O), "dqkv": attn_merge(e_dQ, e_dK, e_dV)}
