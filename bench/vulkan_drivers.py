"""Step time of the default MLP and the default GPT on each of several Vulkan drivers, alternating
them (a driver is a Vulkan ICD file; each measurement runs in its own process with VK_ICD_FILENAMES
set to it), with an empty tune cache: docs/benchmarks.md "Vulkan driver". For example Debian 12's
Mesa 22.3 lavapipe, unpacked beside the installed backports' Mesa 25:

    apt-get download mesa-vulkan-drivers=22.3.6-1+deb12u2 && dpkg-deb -x mesa-vulkan-drivers_*.deb m22
    sed "s#/usr/lib#$PWD/m22/usr/lib#" m22/usr/share/vulkan/icd.d/lvp_icd.x86_64.json > lvp22.json
    python bench/vulkan_drivers.py lvp22.json /usr/share/vulkan/icd.d/lvp_icd.json  # Mesa 25 names it so
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

STEPS = {"mlp": 200, "gpt": 6}  # timed after 3 warm-up steps (the first compiles the pipelines)


def measure(model: str) -> dict:
    """This process's adapter and the mean wall ms a step of `model`'s default config."""
    from webmp.bench.step import _wall
    from webmp.config import TrainConfig
    from webmp.data.text import load_training_data
    from webmp.engine.runtime import Runtime, default_gpu
    from webmp.engine.tiles import TileTable
    from webmp.models import build_plan

    gpu = default_gpu()
    cfg = TrainConfig(model=model)
    plan, blob = build_plan(cfg, load_training_data(cfg), "native", TileTable.for_adapter(gpu.name))
    rt = Runtime(plan, blob, gpu)
    for _ in range(3):
        rt.run("train_step")
    wall = _wall(lambda: [rt.run("train_step") for _ in range(STEPS[model])], rt)
    return {"adapter": gpu.name, "model": model, "ms_per_step": wall / STEPS[model] * 1e3}


def main(icds: list[str], repeats: int = 2) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "WEBMP_TUNE_CACHE": os.path.join(tmp, "tune.json"), "XDG_RUNTIME_DIR": "/tmp"}
        for rep in range(repeats):
            for icd in icds:
                for model in STEPS:
                    out = subprocess.run(
                        [sys.executable, __file__, "--measure", model],
                        env={**env, "VK_ICD_FILENAMES": icd}, capture_output=True, text=True, check=True,
                    )  # fmt: skip
                    row = {"icd": icd, "repeat": rep, **json.loads(out.stdout.splitlines()[-1])}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    for icd in icds:
        for model in STEPS:
            ms = [r["ms_per_step"] for r in rows if r["icd"] == icd and r["model"] == model]
            print(f"{icd}: {model} {min(ms):.1f} ms a step (best of {len(ms)})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        print(json.dumps(measure(sys.argv[2])))
    else:
        main(sys.argv[1:])
