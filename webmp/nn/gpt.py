"""The built-in character GPT (model 'gpt') as a network of layers: a token embedding with learned
positions, n_layer pre-LayerNorm blocks, each two residual blocks (LayerNorm then causal
self-attention; LayerNorm then Linear 4D, GELU, Linear D), a final LayerNorm and the head over the
vocabulary (tied: the embedding's table transposed, no bias), with GPT-2's initialisation.

The model's plan (webmp/models/gpt.py) is this network's, its parameters under the GPT's names
(gpt_names: wte, Wqkv0, ..., as its checkpoints have them).
"""

from __future__ import annotations

from .layers import GELU, CausalSelfAttention, Embedding, LayerNorm, Linear
from .network import Network, Residual, TokenInput


def gpt_network(vocab: int, d_model: int, n_layer: int, n_head: int, context: int, tie_head: bool) -> Network:
    """The GPT of this shape as a network (init "gpt2"). Built as a preset, without the limits a
    network file has (MAX_LAYERS, MAX_PARAMS): TrainConfig bounds the GPT's size, and a config far
    too large for a device is still sized (webmp.models.plan_buffers) to be refused by its memory."""
    D = d_model
    layers: list = [Embedding(dim=D)]
    for _ in range(n_layer):
        layers += [
            Residual(layers=[LayerNorm(), CausalSelfAttention(heads=n_head)]),
            Residual(layers=[LayerNorm(), Linear(out=4 * D), GELU(), Linear(out=D)]),
        ]
    head = Linear(out=vocab, tied=True) if tie_head else Linear(out=vocab)
    layers += [LayerNorm(), head]
    return Network.model_construct(
        input=TokenInput(tokens=vocab, context=context), layers=layers, loss="next_token", init="gpt2"
    )


def gpt_names(n_layer: int, tie_head: bool) -> dict[str, str]:
    """{the network's parameter path: the GPT's name}, in trace order (webmp.models.gpt's
    gpt_param_shapes order): layers.0.weight wte, layers.1.layers.1.qkv.weight Wqkv0, ..."""
    names = {"layers.0.weight": "wte", "layers.0.positions": "wpe"}
    for l in range(n_layer):
        att, mlp = f"layers.{1 + 2 * l}.layers", f"layers.{2 + 2 * l}.layers"
        names |= {
            f"{att}.0.weight": f"ln1_g{l}",
            f"{att}.0.bias": f"ln1_b{l}",
            f"{att}.1.qkv.weight": f"Wqkv{l}",
            f"{att}.1.qkv.bias": f"bqkv{l}",
            f"{att}.1.proj.weight": f"Wo{l}",
            f"{att}.1.proj.bias": f"bo{l}",
            f"{mlp}.0.weight": f"ln2_g{l}",
            f"{mlp}.0.bias": f"ln2_b{l}",
            f"{mlp}.1.weight": f"W1{l}",
            f"{mlp}.1.bias": f"b1{l}",
            f"{mlp}.3.weight": f"W2{l}",
            f"{mlp}.3.bias": f"b2{l}",
        }
    final = 1 + 2 * n_layer
    names |= {f"layers.{final}.weight": "lnf_g", f"layers.{final}.bias": "lnf_b"}
    if not tie_head:
        names |= {f"layers.{final + 1}.weight": "Whead", f"layers.{final + 1}.bias": "bhead"}
    return names
