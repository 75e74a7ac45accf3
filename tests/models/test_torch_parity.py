"""Parity with PyTorch from identical initial weights: the same model built in PyTorch, its initial
parameters written to a safetensors file in webmp's names and layout and given to `webmp train
--init-weights`, both trained on the same batches in the same order with the same AdamW (decay on
matrices only), learning-rate schedule and loss scaler (torch.amp.GradScaler); the per-step losses
and loss scales compared. Skipped where PyTorch is not installed (scripts/setup.sh installs the CPU
build where pip finds one).

Tolerances, from what differs between the two:
- fp32: only the order of f32 additions (matmul sums, reductions); each step's rounding differences
  are ~1e-7 relative and AdamW does not amplify them over these few steps: losses within 2e-6
  relative (measured: at most 2.7e-7 over 60 steps), every final weight within 5e-6 norm-wise
  (measured: at most 6.6e-7), but the GPT's key bias (see the GPT test).
- mixed: both round matmul operands and stored activations to f16, but not at the same points
  (PyTorch's CPU autocast keeps LayerNorm and GELU inputs in f16 where webmp computes them in f32
  from f16 storage, and stores weight gradients in f16 where webmp accumulates them in f32), so a
  step's loss differs by a few f16 roundings (2^-11 = 4.9e-4 relative each): within 4 * 2^-11
  (measured: at most 1.5e-4 over 60 steps). At a loss scale that never overflows in either (1024,
  doubling every 10 clean steps), the scale trajectories are identical.
- bf16: against autocast(dtype=torch.bfloat16), no GradScaler (webmp's bf16 keeps the scale at 1).
  The rounding points agree on every matmul's operands and output (Linear, conv, SDPA's Q, K, V
  and O) and on LayerNorm/GELU/SiLU outputs (bf16 in, bf16 out in autocast; webmp computes them in
  f32 from bf16 storage and stores bf16); both compute the loss in f32. They differ on the
  residual stream (autocast: f32 embedding + bf16 branch = f32, so the GPT's stream stays f32;
  webmp stores it in bf16 after each add), the bias (autocast rounds it to bf16 inside addmm;
  webmp adds it in f32 before one bf16 store), the attention probabilities (CPU flash attention
  rounds the unnormalised exp(s - max) to bf16 before P V and divides by the f32 sum after; webmp
  rounds the normalised P), the activation gradients (autocast rounds dA = dY Wᵀ to bf16 before
  the GELU/SiLU derivative and again after; webmp multiplies in f32 and rounds once) and the weight
  and bias gradients (autocast's are bf16 matmul outputs, bf16-exact in the f32 .grad; webmp's stay
  f32). With a unit roundoff of 2^-8 (3.9e-3) every rounding is 8x coarser than f16's, so the
  bound is one bf16 ulp, 2^-7 = 7.8e-3 relative (measured over 60 steps, 40 for the GPTs: mlp
  7.8e-4, mlp-ln 1.2e-3, gpt 2.0e-4, layers gpt 3.9e-4, 6.7 to 38x inside). These bound the
  trajectories, not the rounding points: after a few steps each engine's bf16 losses are as far
  from PyTorch's fp32 trajectory as from each other (e.g. mlp-ln: webmp 9.3e-4, PyTorch 1.1e-3
  from fp32). At step 0, where the shared rounding points show, mlp-ln's two bf16 losses are
  5.5e-6 apart while each is 2.3e-4 from fp32; the GPT's step-0 losses are all within 3e-6 of
  each other and of fp32.
The GPT from webmp.nn layers (model net, a token input) holds to the same bounds from PyTorch's
default initialisation (embeddings N(0, 1)): measured fp32 1.5e-7 (losses) and 2.8e-7 (weights),
mixed 4.6e-5 over 40 steps.
"""

from __future__ import annotations

import numpy as np
import pytest
from seq_reference import gpt_spec

from webmp.config import TrainConfig
from webmp.data.tables import batch_rows, load_digits
from webmp.data.text import load_text
from webmp.testing import reference as ref

torch = pytest.importorskip("torch")

from parity import assert_same_weights, compare, torch_train, trained, webmp_train  # noqa: E402  (torch first)


def linear_weights(net) -> dict:
    """webmp's MLP parameters from a Sequential of Linear (LayerNorm, GELU) modules: W{l} [in, out]
    (PyTorch's weight transposed), b{l}, ln_g{l}, ln_b{l}."""
    lin = [m for m in net if isinstance(m, torch.nn.Linear)]
    lns = [m for m in net if isinstance(m, torch.nn.LayerNorm)]
    out = {}
    for l, m in enumerate(lin):
        out |= {f"W{l}": m.weight.detach().numpy().T, f"b{l}": m.bias.detach().numpy()}
    for l, m in enumerate(lns):
        out |= {f"ln_g{l}": m.weight.detach().numpy(), f"ln_b{l}": m.bias.detach().numpy()}
    return out


@pytest.mark.parametrize("model", ["mlp", "mlp-ln"])
@pytest.mark.parametrize("precision", ["fp32", "mixed", "bf16"])
def test_mlp_trains_as_pytorch_does(tmp_path, model, precision):
    cfg = TrainConfig(
        model=model, hidden=[48, 32], batch_size=32, steps=60, log_every=10, checkpoint_every=0,
        precision=precision, lr=3e-3, warmup=5, init_scale=1024.0, growth_interval=10,
    )  # fmt: skip
    torch.manual_seed(0)
    data = load_digits()
    dims = [data.features, *cfg.hidden, data.classes]
    modules: list = []
    for l in range(len(dims) - 1):
        modules.append(torch.nn.Linear(dims[l], dims[l + 1]))
        if l < len(dims) - 2:
            modules += [torch.nn.LayerNorm(dims[l + 1])] if model == "mlp-ln" else []
            modules.append(torch.nn.GELU(approximate="tanh"))
    net = torch.nn.Sequential(*modules)
    weights = linear_weights(net)
    t = webmp_train(cfg, weights, tmp_path)
    x, y = torch.tensor(data.train_x), torch.tensor(data.train_y.astype(np.int64))

    def batches(step):
        rows = torch.tensor(batch_rows(step * cfg.batch_size, cfg.batch_size, len(data.train_y), cfg.seed))
        return x[rows], y[rows]

    decayed = [m.weight for m in net if isinstance(m, torch.nn.Linear)]
    theirs = torch_train(cfg, net, decayed, batches, torch.nn.functional.cross_entropy)
    compare(t, theirs, precision)
    if precision == "fp32":
        theirs = linear_weights(net)
        assert_same_weights(trained(t, theirs), theirs)


class GPT(torch.nn.Module):
    """webmp's GPT (README "A character-level GPT"): pre-LayerNorm blocks with fused qkv, causal
    attention, a 4x tanh-GELU MLP, a final LayerNorm and a head tied to the token embedding."""

    def __init__(self, V: int, D: int, H: int, L: int, T: int):
        super().__init__()
        self.H = H
        self.wte, self.wpe = torch.nn.Embedding(V, D), torch.nn.Embedding(T, D)
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln1, b.qkv, b.o = torch.nn.LayerNorm(D), torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
            b.ln2, b.fc1, b.fc2 = torch.nn.LayerNorm(D), torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)
            self.blocks.append(b)
        self.lnf = torch.nn.LayerNorm(D)
        for name, p in self.named_parameters():  # GPT-2's initialisation, as webmp's gpt_init
            if name.endswith("weight") and p.ndim == 2:
                std = 0.02 / (2 * L) ** 0.5 if name.endswith(("o.weight", "fc2.weight")) else 0.02
                torch.nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, idx):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            q, k, v = b.qkv(b.ln1(x)).split(x.shape[-1], dim=-1)
            q, k, v = (t.view(B, T, self.H, -1).transpose(1, 2) for t in (q, k, v))
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + b.o(o.transpose(1, 2).reshape(B, T, -1))
            x = x + b.fc2(torch.nn.functional.gelu(b.fc1(b.ln2(x)), approximate="tanh"))
        return self.lnf(x) @ self.wte.weight.T

    def webmp_weights(self) -> dict:
        """webmp's parameter names (models.gpt.gpt_param_shapes), matrices [in, out]."""
        out = {
            "wte": self.wte.weight,
            "wpe": self.wpe.weight,
            "lnf_g": self.lnf.weight,
            "lnf_b": self.lnf.bias,
        }
        for l, b in enumerate(self.blocks):
            out |= {
                f"ln1_g{l}": b.ln1.weight, f"ln1_b{l}": b.ln1.bias, f"Wqkv{l}": b.qkv.weight.T,
                f"bqkv{l}": b.qkv.bias, f"Wo{l}": b.o.weight.T, f"bo{l}": b.o.bias, f"ln2_g{l}": b.ln2.weight,
                f"ln2_b{l}": b.ln2.bias, f"W1{l}": b.fc1.weight.T, f"b1{l}": b.fc1.bias,
                f"W2{l}": b.fc2.weight.T, f"b2{l}": b.fc2.bias,
            }  # fmt: skip
        return {k: v.detach().numpy() for k, v in out.items()}

    def decayed(self) -> list:
        """Every matrix, the embeddings included (webmp's GPT_DECAY)."""
        return [p for p in self.parameters() if p.ndim == 2]


@pytest.mark.parametrize("precision", ["fp32", "mixed", "bf16"])
def test_gpt_trains_as_pytorch_does(tmp_path, precision):
    rng = np.random.default_rng(3)
    words = ["the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ", "dog. "]
    (tmp_path / "text.txt").write_text("".join(rng.choice(words, size=600)))
    cfg = TrainConfig(
        model="gpt", data=str(tmp_path / "text.txt"), n_layer=2, n_head=2, d_model=32, context=16,
        batch_size=8, steps=40, log_every=10, checkpoint_every=0, val_tokens=256, precision=precision,
        lr=3e-3, warmup=5, init_scale=1024.0, growth_interval=10,
    )  # fmt: skip
    corpus = load_text(cfg.data)
    torch.manual_seed(0)
    net = GPT(corpus.vocab_size, cfg.d_model, cfg.n_head, cfg.n_layer, cfg.context)
    t = webmp_train(cfg, net.webmp_weights(), tmp_path)

    def batches(step):
        idx, targets = ref.gather_windows(
            corpus.train, step * cfg.batch_size, cfg.batch_size, cfg.context, cfg.seed
        )
        shape = (cfg.batch_size, cfg.context)
        return torch.tensor(idx.astype(np.int64)).view(shape), torch.tensor(targets.astype(np.int64)).view(
            shape
        )

    def loss_fn(logits, targets):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    theirs = torch_train(cfg, net, net.decayed(), batches, loss_fn)
    compare(t, theirs, precision)
    if precision == "fp32":
        # The key bias's gradient is zero in exact arithmetic (it adds q·b to a whole row of scores,
        # which softmax ignores), so both engines' values for it are rounding noise that AdamW
        # normalises into lr-sized steps: they part ways by design. Its slice is left out.
        D = cfg.d_model
        theirs = net.webmp_weights()
        ours = trained(t, theirs)
        for l in range(cfg.n_layer):
            for w in (ours, theirs):
                w[f"bqkv{l}"] = np.concatenate([w[f"bqkv{l}"][:D], w[f"bqkv{l}"][2 * D :]])
        assert_same_weights(ours, theirs)


class LayersGPT(torch.nn.Module):
    """seq_reference.gpt_spec's network: nn.Embedding token and position tables, pre-LayerNorm
    blocks (fused qkv and output projections around causal attention; a 4x tanh-GELU MLP), a final
    LayerNorm and an untied head with a bias, with PyTorch's default initialisation throughout."""

    def __init__(self, V: int, D: int, H: int, L: int, T: int):
        super().__init__()
        self.H = H
        self.wte, self.wpe = torch.nn.Embedding(V, D), torch.nn.Embedding(T, D)
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln1, b.qkv, b.proj = torch.nn.LayerNorm(D), torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
            b.ln2, b.fc1, b.fc2 = torch.nn.LayerNorm(D), torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)
            self.blocks.append(b)
        self.lnf, self.head = torch.nn.LayerNorm(D), torch.nn.Linear(D, V)

    def forward(self, idx):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            q, k, v = b.qkv(b.ln1(x)).split(x.shape[-1], dim=-1)
            q, k, v = (t.view(B, T, self.H, -1).transpose(1, 2) for t in (q, k, v))
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + b.proj(o.transpose(1, 2).reshape(B, T, -1))
            x = x + b.fc2(torch.nn.functional.gelu(b.fc1(b.ln2(x)), approximate="tanh"))
        return self.head(self.lnf(x))

    def webmp_weights(self) -> dict:
        """The layers' parameters by webmp's names (layers.N..., the trace's paths), matrices [in, out]."""
        out = {"layers.0.weight": self.wte.weight, "layers.0.positions": self.wpe.weight}
        for l, b in enumerate(self.blocks):
            a, m = f"layers.{1 + 2 * l}.layers", f"layers.{2 + 2 * l}.layers"
            out |= {
                f"{a}.0.weight": b.ln1.weight, f"{a}.0.bias": b.ln1.bias, f"{a}.1.qkv.weight": b.qkv.weight.T,
                f"{a}.1.qkv.bias": b.qkv.bias, f"{a}.1.proj.weight": b.proj.weight.T,
                f"{a}.1.proj.bias": b.proj.bias, f"{m}.0.weight": b.ln2.weight, f"{m}.0.bias": b.ln2.bias,
                f"{m}.1.weight": b.fc1.weight.T, f"{m}.1.bias": b.fc1.bias, f"{m}.3.weight": b.fc2.weight.T,
                f"{m}.3.bias": b.fc2.bias,
            }  # fmt: skip
        n = 1 + 2 * len(self.blocks)
        out |= {f"layers.{n}.weight": self.lnf.weight, f"layers.{n}.bias": self.lnf.bias}
        out |= {f"layers.{n + 1}.weight": self.head.weight.T, f"layers.{n + 1}.bias": self.head.bias}
        return {k: v.detach().numpy() for k, v in out.items()}

    def decayed(self) -> list:
        """Every matrix: the embeddings (webmp.nn.Embedding decays both tables) and the weights."""
        return [p for p in self.parameters() if p.ndim == 2]


@pytest.mark.parametrize("precision", ["fp32", "mixed", "bf16"])
def test_a_gpt_from_layers_trains_as_pytorch_does(tmp_path, precision):
    """A 3-block GPT of webmp.nn layers (model net, a token input) against the same network in
    PyTorch, from PyTorch's default initial weights given through --init-weights, on the gpt
    test's text and windows; the module docstring's tolerances."""
    rng = np.random.default_rng(3)
    words = ["the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ", "dog. "]
    (tmp_path / "text.txt").write_text("".join(rng.choice(words, size=600)))
    corpus = load_text(tmp_path / "text.txt")
    V, D, H, L, T = corpus.vocab_size, 32, 2, 3, 16
    cfg = TrainConfig(
        model_spec=gpt_spec(V, D, H, L, T), data=str(tmp_path / "text.txt"), batch_size=8, steps=40,
        log_every=10, checkpoint_every=0, val_tokens=256, precision=precision, lr=3e-3, warmup=5,
        init_scale=1024.0, growth_interval=10,
    )  # fmt: skip
    torch.manual_seed(0)
    net = LayersGPT(V, D, H, L, T)
    weights = net.webmp_weights()
    assert set(weights) == set(cfg.model_spec.param_shapes())
    t = webmp_train(cfg, weights, tmp_path)

    def batches(step):
        idx, targets = ref.gather_windows(corpus.train, step * cfg.batch_size, cfg.batch_size, T, cfg.seed)
        return (torch.tensor(a.astype(np.int64)).view(cfg.batch_size, T) for a in (idx, targets))

    def loss_fn(logits, targets):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    theirs = torch_train(cfg, net, net.decayed(), lambda step: tuple(batches(step)), loss_fn)
    compare(t, theirs, precision)
    if precision == "fp32":
        # the key bias's slices: zero gradients in exact arithmetic (the gpt test says why)
        theirs = net.webmp_weights()
        ours = trained(t, theirs)
        for l in range(L):
            name = f"layers.{1 + 2 * l}.layers.1.qkv.bias"
            for w in (ours, theirs):
                w[name] = np.concatenate([w[name][:D], w[name][2 * D :]])
        assert_same_weights(ours, theirs)


def test_a_token_networks_torch_twin_is_the_layers_gpt():
    """webmp.nn.torch_layout for token networks: the equivalent Sequential (tests/parity.py's
    Embedding and CausalSelfAttention modules) loaded with to_torch of the layers GPT's webmp
    weights computes the layers GPT's logits (the same float32 operations: equal within a few f32
    ulps), and from_torch of its state_dict gives those weights back bit for bit."""
    from parity import sequential, state_arrays

    from webmp.nn import Network
    from webmp.nn.torch_layout import from_torch, to_torch

    V, D, H, L, T = 11, 16, 2, 2, 7
    net = Network.from_dict(gpt_spec(V, D, H, L, T))
    torch.manual_seed(0)
    gpt = LayersGPT(V, D, H, L, T)
    weights = gpt.webmp_weights()
    twin = sequential(net)
    twin.load_state_dict({k: torch.tensor(v) for k, v in to_torch(net, weights).items()}, strict=True)
    idx = torch.randint(0, V, (3, T))
    with torch.no_grad():
        want, got = gpt(idx), twin(idx)
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
    back = from_torch(net, state_arrays(twin))
    assert all(np.array_equal(back[k], weights[k]) for k in weights)
