"""Helpers shared by the kernel test modules (test_kernels.py, test_embedding.py): seeded inputs per
case, the bound of a stored value, a registry of cached kernel runs, and the native-vs-emulated
bit comparison."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from webmp import ops
from webmp.engine.runtime import default_gpu
from webmp.testing import reference as ref
from webmp.testing.probe import run_op
from webmp.testing.reference import store_error, store_tiny


def rng_for(name: str, path: str) -> np.random.Generator:
    """Inputs depend on the case and on f16 vs fp32 only, so both f16 paths see the same data."""
    return np.random.default_rng(zlib.crc32(f"{name}/{path == 'fp32'}".encode()))


def rand_h(rng, shape, path, scale=1.0):
    """Normal values representable in the path's activation format."""
    return ref.round_h(scale * rng.standard_normal(shape), path)


def stored_bound(exact, f32_err, path):
    """Bound for a value computed in f32 (error f32_err) and then stored in the activation format."""
    return f32_err * (1 + store_error(path)) + store_error(path) * np.abs(exact) + store_tiny(path)


def optimizer_pipelines(plan) -> dict[str, int]:
    """Distinct kernels (pipelines) of each optimizer family in a plan's train_step."""
    kernels = {k["name"]: k for k in plan["kernels"]}
    used = {d["kernel"] for d in plan["programs"]["train_step"]}
    families = ("grad_stats", "adamw_copy", "adamw")
    return {f: sum(kernels[k]["entry"] == f for k in used) for f in families}


class Cases:
    """Every kernel run is a registered function of the path, cached, so the reference tests and the
    native-vs-emulated comparison share one GPU run per (case, path). `case(name)` registers
    fn(name, path) -> (inputs, outputs); `run(name, path)` returns them."""

    def __init__(self) -> None:
        self.runs: dict[str, Callable[[str], Any]] = {}
        self.run = functools.cache(self._run)

    def case(self, name: str):
        def register(fn):
            self.runs[name] = functools.partial(fn, name)
            return fn

        return register

    def _run(self, name: str, path: str):
        return self.runs[name](path)


def _flatten(out, prefix=""):
    for k, v in out.items():
        if isinstance(v, dict) and not any(isinstance(x, (float, int)) for x in v.values()):
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def assert_same_bits(name: str, native: dict, emulated: dict) -> None:
    """The outputs of the two f16 paths hold the same bits (floats compared as bits, so -0 != +0)."""
    native, emulated = dict(_flatten(native)), dict(_flatten(emulated))
    assert native.keys() == emulated.keys()
    for key in native:
        a, b = native[key], emulated[key]
        if isinstance(a, dict):
            assert a == b, f"{name} {key}"
            continue
        if a.dtype == np.float32:
            diff = a.view(np.uint32) != b.view(np.uint32)
            if diff.any():
                worst = np.abs(a[diff].astype(np.float64) - b[diff]).max()
                raise AssertionError(f"{name} {key}: {int(diff.sum())} values differ, by up to {worst:.3g}")
        else:
            assert np.array_equal(a, b), f"{name} {key}"


def enlarged_gpt_params(V: int, D: int, L: int, H: int, T: int, seed: int, tie_head: bool = True) -> dict:
    """gpt_init's parameters with the matrices x15 and every LayerNorm parameter and bias random and
    non-trivial: attention far from uniform, clear margins between logits (GPT tests)."""
    rng = np.random.default_rng(seed)
    p = ref.gpt_init(V, D, L, H, T, rng, tie_head)
    for k, v in p.items():
        if v.ndim == 2:
            p[k] = (v * 15).astype(np.float32)
        elif "_g" in k:
            p[k] = (1 + 0.3 * rng.standard_normal(v.shape)).astype(np.float32)
        else:
            p[k] = (0.2 * rng.standard_normal(v.shape)).astype(np.float32)
    return p


def softmax_run(logits, labels, scale: float, path: str, gpu=None) -> dict:
    """softmax_xent on [B, C] f32 logits with u32 labels at loss scale `scale`: its loss_rows,
    dlogits (padded) and flags."""
    B, C = logits.shape
    return run_op(
        ops.softmax_xent,
        {"logits": logits.astype(np.float32), "labels": labels.astype(np.uint32), "state": {"scale": scale}},
        {"loss_rows": (B,), "dlogits": ((B, C), "padded"), "flags": (4,)},
        B=B,
        C=C,
        path=path,
        gpu=gpu or default_gpu(),
    )
