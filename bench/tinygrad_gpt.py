"""webmp's character GPT trained with tinygrad on its WEBGPU device, for the side-by-side step time.

Standalone: runs in a venv with tinygrad 0.14 (and dawn-python for libwebgpu_dawn), never imports
webmp. The model is webmp's default GPT (webmp/models/gpt.py): token + position embedding,
n_layer pre-LayerNorm blocks (causal self-attention of n_head heads with a fused qkv projection
and an output projection, all with biases; a 4x GELU MLP), final LayerNorm, head tied to the token
embedding (no head bias); GPT-2 initialisation; AdamW (webmp's gpt defaults: lr 2e-3, betas 0.9 /
0.999, eps 1e-8, weight decay 0.1 on matrices and embeddings only) in float32, on random token
batches. The step (forward, backward, optimizer) is a TinyJit, so steps after the first two are
replays. Prints one JSON object.

  DEV=WEBGPU WEBGPU_PATH=.../pydawn/lib/libwebgpu_dawn_x86_64.so CC=<clang> python bench/tinygrad_gpt.py

(see bench/tinygrad_side_by_side.sh for the environment).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version

from tinygrad import Context, Device, Tensor, TinyJit, dtypes, nn


def adapter_info() -> dict:
    """The adapter tinygrad's WEBGPU device asks Dawn for (same instance and options as
    tinygrad's WebGpuDevice, which releases its own adapter after creating the device)."""
    from tinygrad.runtime import ops_webgpu as w
    from tinygrad.runtime.autogen import webgpu

    backend = w.backend_types.get(os.environ.get("WEBGPU_BACKEND", ""), 0)
    opts = webgpu.WGPURequestAdapterOptions(
        powerPreference=webgpu.WGPUPowerPreference_HighPerformance, backendType=backend
    )
    adapter = w.InstanceRequestAdapter(w.instance, opts)
    info = webgpu.WGPUAdapterInfo()
    webgpu.wgpuAdapterGetInfo(adapter, info)

    def s(v) -> str:
        return ctypes.string_at(v.data, v.length).decode(errors="replace") if v.data and v.length else ""

    names = webgpu.enum_WGPUBackendType  # value -> name
    out = {
        "vendor": s(info.vendor),
        "architecture": s(info.architecture),
        "device": s(info.device),
        "description": s(info.description),
        "backend": names.get(info.backendType, str(info.backendType)),
    }
    webgpu.wgpuAdapterRelease(adapter)
    return out


class Block:
    def __init__(self, d: int, n_head: int, n_layer: int):
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        resid = 0.02 / math.sqrt(2 * n_layer)  # GPT-2: the projections into the residual stream
        for lin, std in ((self.qkv, 0.02), (self.fc1, 0.02), (self.proj, resid), (self.fc2, resid)):
            lin.weight = Tensor.normal(*lin.weight.shape, std=std)
            assert lin.bias is not None
            lin.bias = Tensor.zeros(*lin.bias.shape)

    def __call__(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        H = self.n_head
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.reshape(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        o = q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(o)
        return x + self.fc2(self.fc1(self.ln2(x)).gelu())


class GPT:
    def __init__(self, vocab: int, d: int, n_layer: int, n_head: int, context: int):
        self.wte = Tensor.normal(vocab, d, std=0.02)
        self.wpe = Tensor.normal(context, d, std=0.02)
        self.blocks = [Block(d, n_head, n_layer) for _ in range(n_layer)]
        self.ln_f = nn.LayerNorm(d)

    def __call__(self, idx: Tensor) -> Tensor:
        B, T = idx.shape
        x = self.wte[idx] + self.wpe[:T]
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.T  # tied head, no bias


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--vocab", type=int, default=108)
    p.add_argument("--steps", type=int, default=20, help="timed steps after warm-up")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps (TinyJit captures at the 2nd)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    a = p.parse_args()

    t_start = time.perf_counter()
    dev = Device.DEFAULT
    Tensor.manual_seed(0)
    model = GPT(a.vocab, a.d_model, a.n_layer, a.n_head, a.context)
    params = nn.state.get_parameters(model)
    # AdamW per block (and one for the embeddings and final LayerNorm), each split into the decayed
    # matrices and embeddings (ndim 2) and the undecayed biases and LayerNorm gains/shifts: the same
    # update as one AdamW over all parameters, but tinygrad 0.14's scheduler stops at "cycle
    # detected in assign graph" when one optimizer holds parameters of both blocks (1 layer is
    # fine; one AdamW per parameter works too: 264 kernels a step instead of 220 at L2 D16)
    groups = [nn.state.get_parameters(b) for b in model.blocks]
    rest = [t for t in params if not any(t is u for g in groups for u in g)]
    groups.append(rest)
    opts = []
    for g in groups:
        opts.append(
            nn.optim.AdamW(
                [t for t in g if t.ndim == 2],
                lr=a.lr,
                b1=0.9,
                b2=0.999,
                eps=1e-8,
                weight_decay=a.weight_decay,
            )
        )
        opts.append(
            nn.optim.AdamW(
                [t for t in g if t.ndim != 2], lr=a.lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0
            )
        )
    n_params = sum(t.numel() for t in params)

    # a few random batches made on the device up front; the step cycles through them
    batches = []
    for _ in range(4):
        tok = Tensor.randint(a.batch_size, a.context + 1, low=0, high=a.vocab, dtype=dtypes.int32)
        x, y = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
        batches.append((x.realize(), y.realize()))
    Tensor.realize(*params)
    Device[dev].synchronize()
    t_setup = time.perf_counter() - t_start

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Context(TRAINING=1):
            for o in opts:
                o.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y)
            loss.backward()
            Tensor.realize(loss, *[t.grad for t in params if t.grad is not None])
            for o in opts:
                o.step()
            return loss

    first: list[float] = []
    for i in range(a.warmup):
        t0 = time.perf_counter()
        loss = step(*batches[i % len(batches)])
        Device[dev].synchronize()
        first.append(time.perf_counter() - t0)
    loss0 = loss.item()

    per_step = []
    for i in range(a.steps):
        t0 = time.perf_counter()
        loss = step(*batches[i % len(batches)])
        Device[dev].synchronize()
        per_step.append(time.perf_counter() - t0)
    # a block of steps with one wait at the end (as webmp's bench times its loop)
    t0 = time.perf_counter()
    for i in range(a.steps):
        loss = step(*batches[i % len(batches)])
    Device[dev].synchronize()
    block = (time.perf_counter() - t0) / max(a.steps, 1)
    loss1 = loss.item()

    out = {
        "tool": "tinygrad",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "tinygrad_version": version("tinygrad"),
        "dawn_python_version": version("dawn-python"),
        "python": platform.python_version(),
        "device": dev,
        "adapter": adapter_info() if dev == "WEBGPU" else None,
        "shader_f16": "shader-f16" in str(getattr(Device[dev], "arch", "")),
        "dims": {
            "n_layer": a.n_layer,
            "n_head": a.n_head,
            "d_model": a.d_model,
            "context": a.context,
            "batch_size": a.batch_size,
            "vocab": a.vocab,
            "tie_head": True,
            "params": n_params,
        },
        "precision": "float32 (params, activations, AdamW state)",
        "setup_s": round(t_setup, 3),
        "first_step_s": round(first[0], 3),
        "warmup_steps_s": [round(t, 3) for t in first],
        "time_to_first_step_s": round(t_setup + first[0], 3),
        "steps": a.steps,
        "step_s_median": round(statistics.median(per_step), 5),
        "step_s_min": round(min(per_step), 5),
        "step_s_block_mean": round(block, 5),
        "tokens_per_s": round(a.batch_size * a.context / statistics.median(per_step), 1),
        "loss_after_warmup": round(loss0, 4),
        "loss_end": round(loss1, 4),
    }
    out["kernels_per_step"] = len(step.captured.linear.src) if step.captured is not None else None
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
