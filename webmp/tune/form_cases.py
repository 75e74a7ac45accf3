"""The tuners' two choices of form, on random data and without wgpu: the row kernels' (tiles.ROWS_KEY:
a workgroup or a thread a row) and how the GPT's backward pass reads its weights (tiles.WEIGHTS_KEY).

`row_forms` and `weight_forms` lay each form of their choice into a PlanBuilder as a program of its own
(`FormSpec.program`) writing outputs of its own; every form computes the same thing. `faster_form` is
the rule both tuners apply to what they measured: the faster form, provided the forms' outputs are the
same bytes on this adapter, else the default. webmp.tune.native runs the programs through wgpu-py
(`FormCase`); webmp.tune.page hands them to the page, which runs them on its own adapter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine.plan import PlanBuilder, pack_h
from ..engine.tiles import (
    ATTENTION_KEY,
    DEFAULT_ROWS,
    DEFAULT_WEIGHTS,
    ROWS_KEY,
    WEIGHT_FORMS,
    WEIGHTS_KEY,
    TileTable,
)
from ..ops import (
    ROW_FORMS,
    attention_matmul,
    attention_shape,
    attn_softmax_bwd,
    attn_softmax_fwd,
    flash_attention_bwd,
    flash_attention_fwd,
    layernorm_bwd,
    layernorm_fwd,
    matmul,
    transpose_h,
)


@dataclass(frozen=True)
class FormSpec:
    what: str  # the cache entry the choice goes to: ROWS_KEY or WEIGHTS_KEY
    default: str  # the form an adapter gets unless a tuner chose another
    outputs: Mapping[str, Sequence[str]]  # form -> the buffers its program writes, in one order for all

    @property
    def forms(self) -> list[str]:
        return list(self.outputs)

    def program(self, form: str) -> str:
        return f"{self.what}:{form}"


def row_forms(
    pb: PlanBuilder, M: int = 1024, N: int = 128, T: int = 64, Z: int = 64, seed: int = 0
) -> FormSpec:
    """The four row kernels at the default GPT's shape, once per form: layernorm_fwd and layernorm_bwd
    over [M, N], attn_softmax_fwd and attn_softmax_bwd at T for Z batch-heads."""
    path, w = pb.path, f"{ROWS_KEY}:"
    rng = np.random.default_rng(seed)
    pb.h(w + "Z", M, N, init=pack_h(rng.normal(0.5, 2.0, (M, N)), path))
    pb.h(w + "dY", M, N, init=pack_h(rng.normal(0.0, 1.0, (M, N)), path))
    pb.f32(w + "gamma", (N,), "other", 1 + 0.2 * rng.standard_normal(N))
    pb.f32(w + "beta", (N,), "other", 0.2 * rng.standard_normal(N))
    pb.f32(w + "S", (Z * T, T), "activations", 12 * rng.standard_normal((Z * T, T)))
    pb.f32(w + "dP", (Z * T, T), "activations", rng.standard_normal((Z * T, T)))
    outputs = {}
    for form in ROW_FORMS:
        o = {k: f"{w}{k}_{form}" for k in ("Y", "stats", "dZ", "P", "dS")}
        pb.h(o["Y"], M, N)
        pb.f32(o["stats"], (M, 2), "activations")
        pb.h(o["dZ"], M, N)
        pb.h(o["P"], Z * T, T)
        pb.h(o["dS"], Z * T, T)
        program = f"{ROWS_KEY}:{form}"
        ln: dict[str, Any] = dict(Z=w + "Z", gamma=w + "gamma", M=M, N=N, rows=form)
        layernorm_fwd(pb, program, beta=w + "beta", Y=o["Y"], stats=o["stats"], **ln)
        layernorm_bwd(pb, program, dY=w + "dY", stats=o["stats"], dZ=o["dZ"], **ln)
        attn: dict[str, Any] = dict(B=Z, T=T, H=1, d=16, rows=form)
        attn_softmax_fwd(pb, program, S=w + "S", P=o["P"], **attn)
        attn_softmax_bwd(pb, program, P=o["P"], dP=w + "dP", dS=o["dS"], **attn)
        outputs[form] = list(o.values())
    return FormSpec(ROWS_KEY, DEFAULT_ROWS, outputs)


def weight_forms(
    pb: PlanBuilder, table: TileTable, M: int = 1024, N: int = 128, K: int = 512, seed: int = 0
) -> FormSpec:
    """The GPT's largest input-gradient product at its default size, dY [M, N] = dZ [M, K] Wᵀ with
    W [N, K] (W1's: 1024 x 128 x 512), both ways (tiles.WEIGHT_FORMS): "as_stored" the A·Bᵀ
    product on W, "transposed" transpose_h into Wt [K, N] and the A·B product on it; each product
    with the tiles `table` gives its class (tune those first: the choice depends on them)."""
    path, w = pb.path, f"{WEIGHTS_KEY}:"
    rng = np.random.default_rng(seed)
    pb.h(w + "dZ", M, K, init=pack_h(rng.uniform(-1, 1, (M, K)), path))
    pb.h(w + "W", N, K, init=pack_h(rng.uniform(-1, 1, (N, K)), path))
    pb.h(w + "Wt", K, N)
    out = {form: f"{w}dY_{form}" for form in WEIGHT_FORMS}
    for name in out.values():
        pb.h(name, M, N)
    dims: dict[str, Any] = {"A": w + "dZ", "M": M, "N": N, "K": K}
    as_stored, transposed = (f"{WEIGHTS_KEY}:{form}" for form in WEIGHT_FORMS)
    tiles = table.for_shape(path, M, N, K, 0, 1)
    matmul(pb, as_stored, "matmul_plain", B=w + "W", C=out["as_stored"], trans_b=1, tiles=tiles, **dims)
    transpose_h(pb, transposed, X=w + "W", Y=w + "Wt", rows=N, cols=K)
    tiles = table.for_shape(path, M, N, K, 0, 0)
    matmul(pb, transposed, "matmul_plain", B=w + "Wt", C=out["transposed"], tiles=tiles, **dims)
    return FormSpec(WEIGHTS_KEY, DEFAULT_WEIGHTS, {form: [name] for form, name in out.items()})


def attention_forms(
    pb: PlanBuilder, table: TileTable, B: int = 16, T: int = 64, H: int = 4, d: int = 32, seed: int = 0
) -> FormSpec:
    """Causal self-attention forward and backward at the default GPT's shape (context T), both ways
    (tiles.ATTENTION_FORMS): "unfused" the three-kernel form (the products on the tiles `table`
    gives their classes, the row kernels in its form), "fused" flash_attention_fwd / _bwd. Their
    outputs differ by rounding (webmp/ops/flash.py), so the choice is the faster (faster_attention)."""
    path, w = pb.path, f"{ATTENTION_KEY}:"
    rng = np.random.default_rng(seed)
    R, D, rows = B * T, H * d, B * H * T
    pb.h(w + "qkv", R, 3 * D, init=pack_h(rng.standard_normal((R, 3 * D)), path))
    pb.h(w + "dO", R, D, init=pack_h(rng.standard_normal((R, D)), path))
    att: dict[str, Any] = dict(B=B, T=T, H=H, d=d)
    outputs = {}
    for form in ("unfused", "fused"):
        program, o = f"{ATTENTION_KEY}:{form}", {k: f"{w}{k}_{form}" for k in ("O", "dqkv")}
        pb.h(o["O"], R, D)
        pb.h(o["dqkv"], R, 3 * D)
        if form == "fused":
            lse, Dsum = pb.f32(w + "lse", (rows,), "activations"), pb.f32(w + "Dsum", (rows,), "activations")
            flash_attention_fwd(pb, program, qkv=w + "qkv", O=o["O"], lse=lse, **att)
            flash_attention_bwd(
                pb, program, qkv=w + "qkv", O=o["O"], dO=w + "dO", lse=lse, Dsum=Dsum, dqkv=o["dqkv"], **att
            )
        else:
            _unfused_attention(pb, program, table, w, o, att)
        outputs[form] = list(o.values())
    return FormSpec(ATTENTION_KEY, "unfused", outputs)


def _unfused_attention(pb: PlanBuilder, program: str, table: TileTable, w: str, o: dict, att: dict) -> None:
    """attention_forms' three-kernel program: scores, softmax, values; dv, dp, softmax backward, dq, dk."""
    path, T, d, rows = pb.path, att["T"], att["d"], att["B"] * att["H"] * att["T"]
    S, P, dS = pb.f32(w + "S", (rows, T), "activations"), pb.h(w + "P", rows, T), pb.h(w + "dS", rows, T)
    steps: list[tuple[str, dict[str, Any]]] = [
        ("scores", {"qkv": w + "qkv", "S": S}),
        ("softmax_fwd", {}),
        ("values", {"P": P, "qkv": w + "qkv", "O": o["O"]}),
        ("dv", {"P": P, "dO": w + "dO", "dqkv": o["dqkv"]}),
        ("dp", {"dO": w + "dO", "qkv": w + "qkv", "dP": S}),
        ("softmax_bwd", {}),
        ("dq", {"dS": dS, "qkv": w + "qkv", "dqkv": o["dqkv"]}),
        ("dk", {"dS": dS, "qkv": w + "qkv", "dqkv": o["dqkv"]}),
    ]
    for variant, bufs in steps:
        if variant == "softmax_fwd":
            attn_softmax_fwd(pb, program, S=S, P=P, rows=table.row_kernels, **att)
        elif variant == "softmax_bwd":
            attn_softmax_bwd(pb, program, P=P, dP=S, dS=dS, rows=table.row_kernels, **att)
        else:
            tiles = table.for_shape(path, *attention_shape(variant, T, d))
            attention_matmul(pb, program, variant, tiles=tiles, **bufs, **att)


def faster_attention(seconds: Mapping[str, float]) -> dict:
    """{"form", "seconds"}: the faster attention form. Unlike the other forms' rule, their outputs
    are not compared bit for bit: they differ by rounding by design, and each is checked against
    float64 by the tests (tests/kernels/test_flash.py)."""
    return {"form": min(seconds, key=lambda f: seconds[f]), "seconds": dict(seconds)}


def same_outputs(outputs: Mapping[str, Sequence[bytes]]) -> bool:
    """Whether every form's outputs (form -> their bytes, in FormSpec.outputs' order) are the same."""
    return len({tuple(o) for o in outputs.values()}) == 1


def faster_form(spec: FormSpec, identical: bool, seconds: Mapping[str, float]) -> dict:
    """{"form", "seconds"}: the form with the fewest seconds a pass, provided the forms gave the same
    bytes on this adapter; else the default, with seconds None (what is not the same cannot be chosen)."""
    if not identical:
        return {"form": spec.default, "seconds": None}
    return {"form": min(spec.forms, key=lambda f: seconds[f]), "seconds": dict(seconds)}
