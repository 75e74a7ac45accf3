"""What the tests against PyTorch share (models/test_torch_parity.py for the built-in models,
models/test_net_parity.py for networks of webmp.nn layers, models/test_torch_layout.py and
train/test_export.py): training a torch model as webmp trains a config, training webmp from given
initial weights, comparing the two (tolerances: the docstring of test_torch_parity.py), and the
torch twin of a webmp.nn Network (webmp.nn.torch_layout's equivalent Sequential). Imported only
where torch is installed."""

from __future__ import annotations

import numpy as np
import torch
from safetensors.numpy import save_file

from webmp import nn
from webmp.config import TrainConfig
from webmp.nn import layers as L
from webmp.testing import reference as ref
from webmp.train.loop import Trainer

F16_ULP = 2.0**-11
BF16_ULP = 2.0**-7  # one bf16 ulp, relative (twice the unit roundoff 2^-8)
TOL = {"fp32": 2e-6, "mixed": 4 * F16_ULP, "bf16": BF16_ULP}
AUTOCAST = {"mixed": torch.float16, "bf16": torch.bfloat16}


def torch_train(cfg: TrainConfig, net, decayed, batches, loss_fn) -> list[tuple[float, float]]:
    """(loss, scale) of each step of `net` trained as webmp trains `cfg`: AdamW with decay on
    `decayed` only, webmp's learning-rate schedule (reference.lr_at), GradScaler with the config's
    scaler settings under autocast to f16 in mixed; autocast to bf16 without a scaler in bf16
    (webmp's bf16 keeps the scale at 1)."""
    mixed = cfg.precision == "mixed"
    if cfg.precision not in ("fp32", *AUTOCAST):
        raise ValueError(f"no PyTorch twin for precision {cfg.precision!r}")
    others = [p for p in net.parameters() if all(p is not q for q in decayed)]
    groups = [{"params": decayed, "weight_decay": cfg.weight_decay}, {"params": others, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    scaler = torch.amp.GradScaler(
        "cpu",
        init_scale=cfg.init_scale,
        growth_factor=cfg.growth_factor,
        backoff_factor=cfg.backoff_factor,
        growth_interval=cfg.growth_interval,
        enabled=mixed,
    )
    schedule = {
        "LR": cfg.lr,
        "WARMUP": cfg.warmup,
        "SCHEDULE": int(cfg.schedule == "cosine"),
        "TOTAL": cfg.steps,
        "LR_MIN": cfg.min_lr,
    }
    out = []
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = ref.lr_at(step, schedule)
        opt.zero_grad()
        x, y = batches(step)
        with torch.autocast("cpu", dtype=AUTOCAST.get(cfg.precision), enabled=cfg.precision in AUTOCAST):
            logits = net(x)
        loss = loss_fn(logits.float(), y)
        scale = scaler.get_scale() if mixed else 1.0
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        out.append((loss.item(), scale))
    return out


def webmp_train(cfg: TrainConfig, weights: dict, tmp_path, **kw) -> Trainer:
    save_file(
        {k: np.ascontiguousarray(v, np.float32) for k, v in weights.items()}, tmp_path / "init.safetensors"
    )
    t = Trainer(
        cfg.model_copy(update={"init_weights": str(tmp_path / "init.safetensors")}),
        out=tmp_path / "run",
        progress=False,
        log=None,
        **kw,
    )
    t.run()
    return t


def compare(t: Trainer, theirs: list[tuple[float, float]], precision: str) -> None:
    ours = t.run_dir.read_metrics()
    assert [r["step"] for r in ours] == list(range(len(theirs)))
    assert [r["scale"] for r in ours] == [s for _, s in theirs], "the loss scales differ"
    assert not any(r["skipped"] for r in ours)
    worst = max(abs(r["loss"] - loss) / loss for r, (loss, _) in zip(ours, theirs, strict=True))
    print(f"{precision}: worst relative loss difference {worst:.3g} over {len(ours)} steps")
    assert worst <= TOL[precision]


def assert_same_weights(ours: dict, theirs: dict) -> None:
    """fp32: every trained parameter within 5e-6 of PyTorch's, norm-wise (f32 addition order only)."""
    worst = {name: float(np.linalg.norm(ours[name] - w) / np.linalg.norm(w)) for name, w in theirs.items()}
    print(f"weights: worst relative difference {max(worst.values()):.3g} ({max(worst, key=worst.get)})")
    assert max(worst.values()) <= 5e-6, worst


def trained(t: Trainer, like: dict) -> dict:
    return {k: np.frombuffer(t.runtime.read(k), np.float32).reshape(v.shape) for k, v in like.items()}


class Residual(torch.nn.Sequential):
    """webmp's residual block: x + its layers' output (torch_layout's equivalent)."""

    def forward(self, x):
        return x + super().forward(x)


class Embedding(torch.nn.Module):
    """webmp's embedding (torch_layout's equivalent): weight [V, D] rows by token, plus the learned
    positions [T, D] (nn.Embedding's init for both)."""

    def __init__(self, V: int, T: int, D: int, positions: bool):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(V, D))
        self.positions = torch.nn.Parameter(torch.randn(T, D)) if positions else None

    def forward(self, idx):
        x = torch.nn.functional.embedding(idx, self.weight)
        return x if self.positions is None else x + self.positions[: idx.shape[1]]


class CausalSelfAttention(torch.nn.Module):
    """webmp's causal_self_attention (torch_layout's equivalent): fused qkv, causal SDPA, proj."""

    def __init__(self, D: int, heads: int, bias: bool):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = torch.nn.Linear(D, 3 * D, bias=bias), torch.nn.Linear(D, D, bias=bias)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(D, dim=-1))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(B, T, D))


def sequential(net: nn.Network) -> torch.nn.Sequential:
    """The torch model equivalent to `net` (webmp.nn.torch_layout), with torch's default init; a
    tied head shares the embedding's weight."""
    model = torch.nn.Sequential(*_modules(net.layers, net.in_shape))
    if net.tied_head:
        model[-1].weight = model[0].weight
    return model


def _modules(layers, shape) -> list:
    out = []
    for i, layer in enumerate(layers):
        out.append(_module(layer, shape))
        shape = layer.out_shape(f"layers.{i}", shape)
    return out


def _module(layer, shape):
    if isinstance(layer, L.Embedding):
        return Embedding(shape.vocab, shape[0], layer.dim, layer.positions)
    if isinstance(layer, L.CausalSelfAttention):
        return CausalSelfAttention(shape[-1], layer.heads, layer.bias)
    if isinstance(layer, L.Linear):
        return torch.nn.Linear(shape[-1], layer.out, bias=layer.bias)
    if isinstance(layer, L.Conv2d):
        k, s, p = layer.kernel, layer.stride, layer.padding
        return torch.nn.Conv2d(shape[0], layer.out, k, stride=s, padding=p, bias=layer.bias)
    if isinstance(layer, L.MaxPool2d):
        return torch.nn.MaxPool2d(layer.kernel, layer.step, layer.padding)
    if isinstance(layer, L.AvgPool2d):
        return torch.nn.AvgPool2d(layer.kernel, layer.step, layer.padding)
    if isinstance(layer, L.LayerNorm):
        return torch.nn.LayerNorm(shape[-1], eps=layer.eps)
    if isinstance(layer, L.RMSNorm):
        return torch.nn.RMSNorm(shape[-1], eps=layer.eps)
    if isinstance(layer, L.Dropout):
        return torch.nn.Dropout(layer.p)
    if isinstance(layer, L.GELU):
        return torch.nn.GELU(approximate="tanh")
    if hasattr(layer, "layers"):  # a residual block
        return Residual(*_modules(layer.layers, shape))
    simple = {
        L.Flatten: torch.nn.Flatten,
        L.ReLU: torch.nn.ReLU,
        L.SiLU: torch.nn.SiLU,
        L.Tanh: torch.nn.Tanh,
    }
    return simple[type(layer)]()


def state_arrays(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """A torch model's state_dict as numpy arrays (what webmp.nn.torch_layout takes)."""
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
