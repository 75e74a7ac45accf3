"""float64 references for the optimizer's kernels: the loss scaler's update rule (scaler.wgsl) with
its learning-rate schedule and bias corrections, and AdamW with its error bounds."""

from __future__ import annotations

import math

import numpy as np

from .kernels import U32


def f32(x) -> float:
    """x as the f32 the GPU holds (override constants and state words are f32)."""
    return float(np.float32(x))


SCALER_DEFAULTS = {
    "SCALING": 1,
    "SKIP_OVERFLOW": 0,
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
    skip = (c["SCALING"] == 1 or c["SKIP_OVERFLOW"] == 1) and overflow
    lr = lr_at(it, c)
    clip = min(1.0, c["CLIP"] / (norm + 1e-6)) if c["CLIP"] > 0 else 1.0
    s.update(apply=0 if skip else 1, lr=lr, grad_mul=clip / scale, loss=loss, grad_norm=norm, found_inf=found)
    if not skip:
        s["opt_step"] += 1
        # 1 - e^(t ln beta) for the kernel's f32 constant ln beta: adam_bias_correction within 1 U32
        s["bc1"] = -math.expm1(s["opt_step"] * c["LOG_BETA1"])
        s["bc2"] = -math.expm1(s["opt_step"] * c["LOG_BETA2"])
    min_event = 0
    if c["SCALING"] == 0 and skip:
        s["skipped_total"] += 1
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


def grad_accum(A, G, micro: int):
    """The step's gradient sum after micro-batch `micro` (float64 of the f32 values): G on the
    first, else A + G, which the kernel computes as one f32 addition (within 1 ulp: WGSL may round
    an f32 operation to either neighbour)."""
    G = np.asarray(G, np.float64)
    return G.copy() if micro == 0 else np.asarray(A, np.float64) + G
