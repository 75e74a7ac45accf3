"""Ready-made settings in one place: the loss-scaling demonstration, the page's presets and the bench's
sizes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# Why loss scaling matters (webmp/train/demo.py, docs/loss-scaling.md, the page's "fp16 without scaling
# fails" preset): a deep, narrow MLP with small initial weights, whose first layers' gradients fall
# below f16's subnormal range without a loss scale.
LOSS_SCALING_DEMO: dict[str, object] = {
    "hidden": [64] * 6, "init_gain": 0.3, "steps": 600, "checkpoint_every": 0, "log_every": 50,
}  # fmt: skip


class Preset(BaseModel):
    """A ready-made config the form offers: the overrides of its model's defaults."""

    name: str
    title: str
    description: str
    config: dict[str, Any]


# What the presets show is measured: tests/serve/test_rest.py checks each is a valid browser config,
# tests/train/test_train.py::test_loss_scaling_matters the fp16-noscale failure (LOSS_SCALING_DEMO, the
# numbers in docs/loss-scaling.md), tests/browser/test_browser_form.py runs "loss scaling at work" in a page.
PRESETS = [
    Preset(
        name="loss-scaling",
        title="Loss scaling at work",
        description="mixed precision starting at a loss scale of 2^32: the first 10 steps overflow f16 and "
        "are skipped while the scale backs off to 2^22; then it grows every 20 clean steps, overflows at "
        "2^23 and backs off again (the saw-tooth of the loss-scale chart)",
        config={"precision": "mixed", "init_scale": 2.0**32, "growth_interval": 20, "steps": 300,
                "log_every": 10, "checkpoint_every": 0},
    ),
    Preset(
        name="fp16-noscale",
        title="fp16 without scaling fails",
        description="a deep narrow MLP with small initial weights in f16 without loss scaling: the first "
        "layers' gradients fall below f16's smallest subnormal (2^-24) and flush to zero, so those layers "
        "never train and test accuracy stays far below fp32's (docs/loss-scaling.md); choose precision "
        "mixed to see the same run train",
        config={**LOSS_SCALING_DEMO, "precision": "fp16-noscale"},
    ),
    Preset(
        name="gpt",
        title="GPT (character model)",
        description="a 2-layer character-level transformer on the server's Python standard library "
        "sources, its defaults (600 steps: about four minutes on a CPU adapter); it generates text when done",
        config={"model": "gpt"},
    ),
]  # fmt: skip

# The number formats side by side on one model: a preset per (model, format), each the model's settings
# with only the precision changed, so that the runs panel's compare view puts their memory by category,
# step time and final loss next to each other.
FORMATS = {
    "fp32": "fp32: the same kernels in f32, no loss scaling; what the 16-bit formats are compared against",
    "mixed": "mixed: f16 weights and activations, f32 master weights, dynamic loss scaling",
    "bf16": "bf16: bfloat16 weights and activations (f32's exponent range, 8-bit significand), f32 master "
    "weights, no loss scaling; on any adapter (no shader-f16)",
    "fp8": "fp8: bf16 storage, and the hidden Linear layers' matmuls on fp8 operands (E4M3 inputs and "
    "weights, E5M2 gradients) at per-tensor scales from an amax history (delayed scaling), f32 master "
    "weights, no loss scaling",
}
FORMAT_MODELS = {
    "digits": ("digits MLP", "the default MLP on the digits", {}),
    "gpt-small": (
        "small GPT",
        "a 1-layer character transformer, 64 wide, context 32, 200 steps",
        {"model": "gpt", "n_layer": 1, "d_model": 64, "n_head": 2, "context": 32, "steps": 200,
         "log_every": 20},
    ),
}  # fmt: skip


def format_presets() -> list[Preset]:
    """A preset per FORMAT_MODELS model and FORMATS format; the digits MLP's fp32 one is named "fp32"
    (the loss-scaling demo's baseline)."""
    out = []
    for model, (title, what, config) in FORMAT_MODELS.items():
        for fmt, how in FORMATS.items():
            out.append(
                Preset(
                    name="fp32" if (model, fmt) == ("digits", "fp32") else f"{model}-{fmt}",
                    title=f"{title} in {fmt}",
                    description=f"{what} in {how}; choose the other formats' presets for the same model "
                    "and compare the runs in the runs panel",
                    config={**config, "precision": fmt},
                )
            )
    return out


PRESETS += format_presets()


# Preset sizes. "default" finishes in a few minutes on a 2-core CPU with lavapipe (the GPT's steps take
# most of it); "gpu" is the real benchmark (4096^3 matmuls, a 4096-wide MLP at batch 1024); "tiny" is
# for tests.
#   square, train: matmul sizes (n for n^3; batch x in x out, timed as its three products)
#   step_models: the models whose training step is timed, each a dict: "name" ("digits" and a
#     network (model_spec) train on digits, "gpt" on gpt_corpus, others on synthetic data),
#     "config" (TrainConfig fields), optionally "readbacks": True to count its readbacks, and any
#     of STEP_SETTINGS (below) to override the preset's for this model alone
#   step_rounds blocks of up to step_steps steps (about step_block_s seconds each) give the wall
#     time per step; each round then alternates at least host_pairs (our step, floor step) pairs
#     for host CPU time
#   matmul_s: seconds per timed batch of matmuls; readback_steps, log_every: the readback count
#   levers: `webmp bench --memory`'s section (webmp/bench/levers.py): the GPT's contexts, those timed
#     ({context: steps timed after a first}), the effective batch, batch_at: {context: its own
#     effective batch}, the accumulating levers' micro-batches an optimizer step, and config: the
#     step model gpt's config overridden
#   gpt_corpus: None for the default corpus (webmp.data.text.load_text(), what `webmp train --model gpt`
#     trains on), or a number of characters of random text over GPT_BENCH_ALPHABET
# A CNN on the digits as [1, 8, 8] images (a network of webmp.nn layers, model "net"): the README's,
# the page's default network and the bench's step model cnn
EXAMPLE_CNN: dict[str, Any] = {
    "input": [1, 8, 8],
    "layers": [
        {"type": "conv2d", "out": 16, "kernel": 3, "padding": 1}, {"type": "relu"},
        {"type": "maxpool2d", "kernel": 2},
        {"type": "residual", "layers": [{"type": "conv2d", "out": 16, "kernel": 3, "padding": 1},
                                        {"type": "relu"}]},
        {"type": "flatten"}, {"type": "linear", "out": 10},
    ],
}  # fmt: skip
# a deeper one: two residual blocks of two convolutions, a strided convolution (>= 96 % on the
# digits at 600 steps of 32 in both precisions: tests/models/test_net.py, the page's in
# tests/browser/test_browser_network.py)
EXAMPLE_DEEP_CNN: dict[str, Any] = {
    "input": [1, 8, 8],
    "layers": [
        {"type": "conv2d", "out": 8, "kernel": 3, "padding": 1}, {"type": "relu"},
        {"type": "residual", "layers": [{"type": "conv2d", "out": 8, "kernel": 3, "padding": 1},
                                        {"type": "relu"},
                                        {"type": "conv2d", "out": 8, "kernel": 3, "padding": 1}]},
        {"type": "relu"}, {"type": "maxpool2d", "kernel": 2},
        {"type": "residual", "layers": [{"type": "conv2d", "out": 8, "kernel": 3, "padding": 1},
                                        {"type": "relu"},
                                        {"type": "conv2d", "out": 8, "kernel": 3, "padding": 1}]},
        {"type": "relu"}, {"type": "conv2d", "out": 16, "kernel": 3, "stride": 2, "padding": 1},
        {"type": "relu"}, {"type": "flatten"}, {"type": "linear", "out": 10},
    ],
}  # fmt: skip
STEP_SETTINGS = ("step_rounds", "step_steps", "step_block_s", "host_pairs", "readback_steps", "log_every")
GPT_BENCH_ALPHABET = "abcdefghij "
SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(
        square=[32],
        train=[(16, 40, 24)],
        step_models=[
            dict(name="digits", config=dict(hidden=[32], batch_size=16), readbacks=True),
            dict(name="wide", config=dict(hidden=[48], batch_size=16)),
            dict(
                name="gpt",
                config=dict(model="gpt", n_layer=1, n_head=2, d_model=16, context=8, batch_size=4),
                readbacks=True,
            ),
            dict(name="cnn", config=dict(model_spec=EXAMPLE_CNN, batch_size=8)),
        ],
        gpt_corpus=2000,
        # two layers, so that --recompute blocks has a block to drop; one timed context covers the timing
        levers=dict(
            contexts=(16, 64), timed={16: 2}, batch=8, batch_at={64: 4}, grad_accum=4, config=dict(n_layer=2)
        ),
        step_rounds=2,
        step_steps=3,
        step_block_s=0.05,
        host_pairs=3,
        matmul_s=0.02,
        core_rows=1,  # each core timed at the first matmul shape only (the pipelines cost more than the runs)
        model_matmul_paths=1,  # the GPT's shapes on the first path only
        readback_steps=20,
        log_every=5,
    ),
    "default": dict(
        square=[256, 512],
        train=[(64, 256, 256), (128, 512, 512)],
        step_models=[
            dict(name="digits", config=dict(hidden=[256, 256], batch_size=64), readbacks=True),
            dict(name="wide", config=dict(hidden=[512, 512], batch_size=128)),
            # TrainConfig(model="gpt")'s shape; a step takes ~1 s here, so fewer of them
            dict(
                name="gpt",
                config=dict(model="gpt"),
                readbacks=True,
                host_pairs=5,
                readback_steps=20,
                log_every=5,
            ),
            dict(name="cnn", config=dict(model_spec=EXAMPLE_CNN, batch_size=64)),
        ],
        gpt_corpus=None,
        # at context 1024 the GPT's own batch of 16 (a fused step of it takes ~20 s here), timed
        # one step after the first
        levers=dict(
            contexts=(64, 256, 1024),
            timed={64: 5, 256: 5, 1024: 1},
            batch=64,
            batch_at={1024: 16},
            grad_accum=4,
            config={},
        ),
        step_rounds=3,
        step_steps=10,
        step_block_s=0.5,
        host_pairs=8,
        matmul_s=0.15,
        readback_steps=100,
        log_every=10,
    ),
    "gpu": dict(
        square=[1024, 2048, 4096],
        train=[(1024, 4096, 4096)],
        step_models=[
            dict(name="digits", config=dict(hidden=[256, 256], batch_size=64), readbacks=True),
            dict(name="wide", config=dict(hidden=[4096, 4096], batch_size=1024)),
            dict(name="gpt", config=dict(model="gpt"), readbacks=True),
            dict(name="cnn", config=dict(model_spec=EXAMPLE_CNN, batch_size=1024)),
        ],
        gpt_corpus=None,
        levers=dict(
            contexts=(64, 256, 1024), timed={64: 5, 256: 5, 1024: 5}, batch=64, grad_accum=4, config={}
        ),
        step_rounds=5,
        step_steps=20,
        step_block_s=2.0,
        host_pairs=20,
        matmul_s=0.5,
        readback_steps=100,
        log_every=10,
    ),
}
