"""Shared fixtures: one GPU device for the session, and the precision paths to parametrise over."""

from __future__ import annotations

import os

import pytest

from webmp.engine.runtime import default_gpu

# `webmp train` (the CLI) tunes the run's matmul shapes the tune cache lacks before it starts: a few
# seconds a run, written into the tune cache. The tests' runs do not; the tests of the tuning itself
# (tests/tools/test_adapters.py) turn it on with a cache of their own.
os.environ.setdefault("WEBMP_NO_TUNE", "1")

PATHS = ["native", "emulated", "fp32"]
F16_PATHS = ["native", "emulated"]
NO_F16 = "this adapter lacks 'shader-f16': native f16 cases skipped (emulated and fp32 still run)"
# The longest files first: `make check` hands whole files to its two workers in collection order,
# and one of these arriving last kept the other worker idle for ~10 s.
HEAVY_FILES = [
    "test_rest.py", "test_train.py", "test_matmul.py", "test_sample.py", "test_attention.py",
    "test_python_api.py",
]  # fmt: skip


# Cases the fast tier (`make check`) leaves to `make test`, by node id (file::test[params] or a
# prefix of one): each took 5-10 s there, and a sibling case of each stays in the fast tier.
SLOW_CASES = (
    "tests/models/test_sample_cache.py::test_the_gpts_rows_are_its_windows[fp32-",
    "tests/models/test_sample_cache.py::test_the_gpts_rows_are_its_windows[native-False]",
    "tests/models/test_sample_cache.py::test_a_token_networks_rows_are_its_windows[fp32-",
    "tests/models/test_sample_cache.py::test_a_token_networks_rows_are_its_windows[native-tied]",
    "tests/models/test_net_sample.py::test_the_gpts_network_samples_the_gpts_text[fp32-",
    "tests/models/test_fp8_sampling.py::test_a_trained_fp8_runs_scales_reach_its_sampler",
    "tests/train/test_accumulation.py::test_four_micro_batches_of_16_train_as_one_batch_of_64[gpt]",
    "tests/train/test_accumulation.py::test_fp8_accumulates_one_amax_per_step",
    "tests/train/test_accumulation.py::test_resume_with_accumulation_is_exact",
    "tests/train/test_train.py::test_fp8_resume_is_exact[most_recent]",
)


def pytest_collection_modifyitems(items):
    for item in items:
        if item.nodeid.startswith(SLOW_CASES):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(HEAVY_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FILES)))  # stable: order within kept


@pytest.fixture(scope="session")
def gpu():
    """The process-wide device (webmp.engine.runtime.default_gpu), shared by every test."""
    try:
        return default_gpu()
    except RuntimeError as e:  # no adapter at all: say why instead of erroring in every test
        pytest.skip(str(e))


def _usable(path: str, gpu) -> str:
    if path == "native" and not gpu.has_f16:
        pytest.skip(NO_F16)
    return path


def _slow_f16_path() -> str:
    """The f16 path the fast tier (`make check`) leaves to `make test`: emulated where the adapter
    has shader-f16 (native is what it trains with), else none (native is skipped there)."""
    try:
        return "emulated" if default_gpu().has_f16 else ""
    except RuntimeError:  # no adapter: every test skips anyway
        return ""


def _paths(names: list[str]) -> list:
    slow = _slow_f16_path()
    return [pytest.param(n, marks=pytest.mark.slow) if n == slow else n for n in names]


@pytest.fixture(params=_paths(PATHS))
def path(request, gpu) -> str:
    """Each storage path: native f16, emulated f16 (u32 words), fp32."""
    return _usable(request.param, gpu)


@pytest.fixture(params=_paths(F16_PATHS))
def f16_path(request, gpu) -> str:
    """The two f16 paths."""
    return _usable(request.param, gpu)


@pytest.fixture(scope="session")
def digits():
    from webmp.data.tables import load_digits

    return load_digits()


# --- small training plans, compiled once per kernel set ------------------------------------------

SMALL = {
    "hidden": [16],
    "batch_size": 8,
    "log_every": 1,
    "steps": 100,
    "warmup": 0,
    "schedule": "constant",
    "growth_interval": 3,
}


@pytest.fixture(scope="session")
def trainer(gpu, digits):
    """make(path, **config) -> (plan, runtime) for a small MLP on digits, freshly initialised.

    Pipelines compile slowly on a CPU adapter, so runtimes are reused (webmp.testing.probe.cached_runtime):
    a config that changes only initial contents (init_scale, say) rewrites every buffer of the
    runtime already compiled for its kernels."""
    from webmp.config import TrainConfig
    from webmp.models import build_plan
    from webmp.testing.probe import cached_runtime

    def make(path, **config):
        precision = path if path in ("fp32", "bf16") else "mixed"
        cfg = TrainConfig(**{**SMALL, "precision": precision, **config})
        plan, blob = build_plan(cfg, digits, path)
        return plan, cached_runtime(plan, blob, gpu)

    return make
