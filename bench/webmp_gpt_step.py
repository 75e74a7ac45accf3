"""webmp's GPT training step at given dims, timed as `webmp bench` times it (webmp.bench.step.bench_step:
blocks of our real step loop, then a wait), printed as one JSON object. The webmp half of
bench/tinygrad_side_by_side.sh. Tiles come from $WEBMP_TUNE_CACHE (the per-adapter tune cache)."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import wgpu

from webmp.bench.machine import run_info
from webmp.bench.step import bench_corpus, bench_step, model_settings, step_plan
from webmp.engine.runtime import default_gpu
from webmp.presets import SIZES
from webmp.tune import native as tune


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--precision", default="mixed", choices=["mixed", "fp32"])
    a = p.parse_args()

    gpu = default_gpu()
    preset = SIZES["default"]
    model = next(m for m in preset["step_models"] if m["name"] == "gpt")
    model = {
        **model,
        "config": dict(
            model="gpt",
            n_layer=a.n_layer,
            n_head=a.n_head,
            d_model=a.d_model,
            context=a.context,
            batch_size=a.batch_size,
        ),
    }
    settings = model_settings(preset, model)
    t0 = time.perf_counter()
    corpus = bench_corpus(None)  # the default corpus, as `webmp bench` and `webmp train --model gpt`
    data_s = time.perf_counter() - t0
    plan, blob, plan_s = step_plan(gpu, model, corpus, a.precision, settings["log_every"])
    row, first, _ = bench_step(gpu, "gpt", plan, blob, settings, lambda *_: None, plan_s)
    out = {
        "tool": "webmp",
        **run_info(),  # date, host (CPU model and count), webmp (version, commit)
        "adapter": gpu.name,
        "wgpu": wgpu.__version__,
        "python": platform.python_version(),
        "tune_cache": str(tune.cache_path()),
        "tuned_classes": len(tune.load_cache().get(gpu.name, {})),
        "vocab": plan["layers"][0],
        "data_s": round(data_s, 3),
        "step": row,
        "first_step": first,
    }
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
