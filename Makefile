# The two commands of the README, plus the fast tier for development. Each installs what it needs
# first (scripts/setup.sh).
.PHONY: train test check lint setup benchmarks

train:
	@bash scripts/setup.sh train && . scripts/env.sh && webmp train $(ARGS)

# the whole suite (browser and slow tests included), after the linters, on two processes as
# `make check` (whole files to each, the heaviest first: tests/conftest.py). On a host whose two
# vCPUs behave as one core's hyperthreads (docs/benchmarks.md "fifth pass"): 1391 tests in 20 min 45 s
# on two processes, where one process had taken 33 min 41 s for 1367 (its Mesa cache less warm)
test:
	@bash scripts/setup.sh test && . scripts/env.sh && $(MAKE) --no-print-directory lint && \
	  python3 -m pytest -n 2 --dist loadfile $(ARGS)

# before every commit: linters, types, and the tests that are neither slow nor browser (the
# emulated f16 path's cases are slow where the adapter has shader-f16: tests/conftest.py), on two
# processes (pytest-xdist; each has its own WebGPU device): under a minute here. Each test folder's
# conftest.py sets its tier (tests/tiers.py): the browser folder's tests are all browser tests, and
# the files slow throughout are not even collected here.
check:
	@bash scripts/setup.sh test && . scripts/env.sh && $(MAKE) --no-print-directory lint && \
	  python3 -m pytest -q -n 2 --dist loadfile -m "not slow and not browser" -p no:schemathesis $(ARGS)

lint:
	python3 -m ruff check .
	python3 -m ruff format --check .
	python3 -m mypy

setup:
	@bash scripts/setup.sh test

# docs/benchmarks.md from fresh runs on this machine (bench/benchmarks.sh: the default-size bench,
# tuned first, the cold starts, the data-parallel step, tinygrad beside where its venv is): 8 min 20 s
# of both cores here without tinygrad (its side by side adds ~3 min), so run it with nothing else on
# the machine
benchmarks:
	@bash scripts/setup.sh test && bash bench/benchmarks.sh $(ARGS)
