"""Helpers shared by the kernel test modules (tests/kernels/: test_matmul.py, test_rows.py,
test_optim.py, test_eval.py, test_attention.py, test_embedding.py) and a few model tests: seeded
inputs per case, the bound of a stored value, a registry of cached kernel runs, and the
native-vs-emulated bit comparison.

The kernel tests check every kernel against its numpy reference, on each storage path (native f16,
emulated f16, fp32), at shapes that are not multiples of any tile or workgroup size. Kernels run
through webmp.testing.probe (the plan builder and runtime training uses). References
(webmp.testing.reference) give the exact float64 value of each operation on the values the kernel reads;
each test bounds |GPU - exact| elementwise by the arithmetic the kernel does:
  - an f32 sum of n terms errs by at most dot_error(n) * sum|terms|, ~ 2 (n + 1) U32;
  - a store in the activation format adds < 1 ulp: 2 U16 = 2^-10 relative for f16 (WGSL lets a
    conversion round to either neighbour), 2^-24 absolute for f16 subnormals, 2 U32 for fp32.
So in the f16 paths the store term, ~1e-3 relative, dominates; in fp32 the bounds are ~1e-6.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from webmp import ops
from webmp.engine.runtime import default_gpu
from webmp.testing import reference as ref
from webmp.testing.probe import run_op
from webmp.testing.reference import store_error, store_tiny

FLAG_H_STORE, FLAG_MASTER_GRAD, FLAG_LOSS = 1, 2, 4
NO_LABEL = 0xFFFFFFFF


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

    def native_matches_emulated(self):
        """The test that both f16 paths give the same bits on every case registered so far: a test
        module ends with `test_native_matches_emulated = CASES.native_matches_emulated()`."""

        @pytest.mark.parametrize("name", sorted(self.runs))
        def test_native_matches_emulated(name, gpu):
            """Both f16 paths do the same f32 arithmetic in the same order on the same f16 values; they
            differ only in the conversion builtin that stores (vec2<f16>(v) vs pack2x16float), and both
            round operands with the same integer f16_round. On this adapter the two store conversions
            round alike, so every output is bit-identical, as prelude_emulated.wgsl promises. (WGSL lets
            each conversion pick either neighbour, so an adapter could differ by 1 f16 ulp in stores.)"""
            if not gpu.has_f16:
                pytest.skip("this adapter lacks 'shader-f16': nothing to compare the emulated path with")
            assert_same_bits(name, self.run(name, "native")[1], self.run(name, "emulated")[1])

        return test_native_matches_emulated


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
