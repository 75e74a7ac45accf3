"""`webmp bench --cold-start`: the first step natively and in a headless Chromium page, each in a new
process with a Mesa shader cache of its own, cold then warm."""

from __future__ import annotations

import os

import pytest


@pytest.mark.slow
def test_cold_start_runs_natively_and_in_the_page_with_a_cache_of_its_own():
    """On a small MLP: four new processes (native and page, cold then warm), each pair with its own
    Mesa cache directory, which the cold run fills where the kernels compile through Mesa: natively,
    and in the page with the lavapipe Chromium ($WEBGPU_CHROME, shared/tools/webgpu-cpu: its
    adapter calls itself SwiftShader but runs on lavapipe). Debian's own Chromium runs the kernels on
    SwiftShader, yet may write to Mesa's cache for its own rendering (seen: 1.3 MB on a fresh
    machine), so nothing is asserted of that cache but that the warm run found it."""
    from webmp.bench import cold as bench_cold

    r = bench_cold.cold_start({"hidden": [16], "batch_size": 16}, log=lambda *a: None)
    rows = {(x["where"], x["cache"]): x for x in r["rows"]}
    assert set(rows) == {(w, c) for w in ("native", "page") for c in ("cold", "warm")}
    for row in rows.values():
        assert row["kernels"] > 10
        assert 0 < row["first_step_s"] <= row["plan_to_first_step_s"]
    for where in ("native", "page"):
        assert rows[(where, "warm")]["cache_bytes_after"] >= rows[(where, "cold")]["cache_bytes_after"]
    assert rows[("native", "cold")]["cache_bytes_after"] > 0
    if os.environ.get("WEBGPU_CHROME"):
        assert rows[("page", "cold")]["cache_bytes_after"] > 0
    assert r["page_cold_target"]["value"] == rows[("page", "cold")]["plan_to_first_step_s"]
    assert "plan to the first finished step" in bench_cold.format_cold_start(r)
