"""Text generation with a token network (`webmp sample`, the page's sampling): the network's forward
pass over one window, in a plan of its own (a SamplePlan, webmp/engine/plan.py) that the runtimes
replay once per token with no host work in between.

The plan's buffers: the overflow flags, a stand-in for the metrics ring, every parameter's f32
master (a checkpoint's) under its name and, for the matrices the matmuls read, its working copy
h_<name> packed on the host (pack_h: numpy rounds to nearest even, as the training plan packs its
initial copies and as adamw_copy stores them), the token buffer `seq` (the prompt's ids, then the
generated ones) and its count `seq_len`, idx [T], then the forward pass's activations. One
program, sample_step, adds one token:
  sample_window  idx = the last <= T tokens of seq (positions from 0, padding after: attention is
                 causal, so padding changes no earlier row);
  the forward    the training plan's nodes (SampleNet: a TokenNet of one window, R = T rows,
                 dropout off), the same kernels and constants as a batch_size 1 train_step;
  sample_next    a draw from the last real row's logits, appended to seq (webmp/ops/sample.py).
The gpt's plan (webmp/models/gpt.py, build_gpt_sample_plan) is this one over gpt_network, under the
gpt's names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..engine.plan import PLAN_FORMAT, SamplePlan, SampleSpec, memory_by_category, pack_h
from ..engine.tiles import TileTable
from ..nn.network import Network, ParamShape
from .common import Init, ModelBuilder, Param, check_params
from .net_seq import TokenNet

SAMPLE_STEP = "sample_step"
TOKENS_PER_SUBMIT = 64  # program replays a submit: few submits, and no long-running command buffer


def build_net_sample_plan(
    cfg: TrainConfig,
    vocab: Sequence[str],
    path: str,
    tiles: TileTable | None = None,
    *,
    params: dict[str, np.ndarray],
    prompt: Sequence[int],
    tokens: int,
    temperature: float,
    seed: int,
    tokens_per_submit: int = TOKENS_PER_SUBMIT,
    net: Network | None = None,
    names: Mapping[str, str] | None = None,
) -> tuple[SamplePlan, bytes]:
    """The plan generating `tokens` tokens after the token ids `prompt` with the token network `net`
    (default cfg.model_spec) and its parameters `params` (f32, by layer path: layers.0.weight, ...,
    or by the names `names` gives a layer path's parameters and values; a checkpoint's masters),
    vocabulary `vocab` (token id -> character), on prelude `path`."""
    net = net or cfg.model_spec
    if net is None or not net.is_tokens:
        raise ValueError("sampling needs a token network (model_spec with input {tokens, context})")
    if len(vocab) != net.classes:
        raise ValueError(f"a vocabulary of {len(vocab)} characters for a network of {net.classes} tokens")
    settings = SampleRequest(prompt, tokens, temperature, seed, tokens_per_submit, net.classes)
    g = SampleNet(SampleBuilder(cfg, path, tiles), net, params, settings, names or {})
    return g.sample_plan(vocab)


class SampleRequest:
    """What a sampling plan generates: `tokens` after the token ids `prompt` (checked against the
    vocabulary of V), at `temperature`, drawn from `seed`, `tokens_per_submit` replays a submit
    (webmp.sample.job.SampleSettings checks a person's settings before they get here)."""

    def __init__(
        self,
        prompt: Sequence[int],
        tokens: int,
        temperature: float,
        seed: int,
        tokens_per_submit: int,
        V: int,
    ):
        ids = np.asarray(prompt, np.int64)
        if ids.ndim != 1 or len(ids) < 1 or ids.min() < 0 or ids.max() >= V:
            raise ValueError(f"the prompt must be at least one token id in 0 .. {V - 1}")
        if tokens < 1 or tokens_per_submit < 1:
            raise ValueError(
                f"tokens ({tokens}) and tokens_per_submit ({tokens_per_submit}) must be positive"
            )
        self.prompt, self.tokens, self.temperature, self.seed = ids, tokens, temperature, seed
        self.tokens_per_submit = tokens_per_submit
        self.capacity = len(ids) + tokens


class SampleBuilder(ModelBuilder):
    """A ModelBuilder whose parameters are given f32 masters and their working copies packed on the
    host: no gradients, moments or optimizer."""

    def param(
        self, name: str, shape: Sequence[int], init: Init, *, copy: bool = False, decay: bool = False
    ) -> Param:
        value = init()
        entry: Param = {
            "name": name, "shape": list(shape), "master": self.pb.f32(name, shape, "master_weights", value),
            "grad": "", "m": "", "v": "", "copy": None, "decay": decay,
        }  # fmt: skip
        if copy:
            rows, cols = shape
            packed = pack_h(value, self.path)
            entry["copy"] = self.pb.h("h_" + name, rows, cols, category="working_weights", init=packed)
        self.params.append(entry)
        return entry


class SampleNet(TokenNet):
    """A token network's sampling plan: the constructor declares the buffers up to idx (the
    parameters as the network's nodes place them, named by `named`), sample_plan the program."""

    def __init__(
        self,
        mb: SampleBuilder,
        net: Network,
        params: dict[str, np.ndarray],
        settings: SampleRequest,
        names: Mapping[str, str],
    ):
        self.names = names
        check_params(params, {self.named(n): tuple(p.shape) for n, p in net.param_shapes().items()})
        self.mb, self.pb, self.net, self.given, self.settings = mb, mb.pb, net, params, settings
        self.V, self.T = net.classes, net.context
        self.Bt, self.R = 1, net.context  # one window
        pb = self.pb
        pb.u32("flags", (4,), "other")
        # the runtimes stage a plan's metrics buffer; this plan has no metrics or state, and this word
        # stands in for both (never read)
        pb.u32("no_metrics", (1,), "other")
        self.place_nodes()
        pb.u32("seq", (settings.capacity,), "data", settings.prompt)
        pb.u32("seq_len", (1,), "data", [len(settings.prompt)])
        pb.u32("idx", (self.T,), "activations")

    def named(self, name: str) -> str:
        return self.names.get(name, name)

    def initial(self, name: str, p: ParamShape) -> Init | None:
        given = self.given[name]
        return lambda: np.asarray(given, np.float32)

    def sample_plan(self, vocab: Sequence[str]) -> tuple[SamplePlan, bytes]:
        """Program sample_step and the plan that replays it."""
        pb, s, P, T = self.pb, self.settings, SAMPLE_STEP, self.T
        ops.sample_window(pb, P, seq="seq", seq_len="seq_len", idx="idx", T=T, capacity=s.capacity)
        self.forward(P, "flags", False, None)
        ops.sample_next(
            pb, P, logits="logits", seq="seq", seq_len="seq_len", V=self.V, T=T, capacity=s.capacity,
            temperature=s.temperature, seed=s.seed,
        )  # fmt: skip
        sample: SampleSpec = {
            "program": P,
            "seq": "seq",
            "seq_len": "seq_len",
            "flags": "flags",
            "prompt_tokens": len(s.prompt),
            "tokens": s.tokens,
            "tokens_per_submit": s.tokens_per_submit,
            "temperature": s.temperature,
            "seed": s.seed,
            "vocab": list(vocab),
        }
        cfg, kp = self.mb.cfg, pb.kernel_plan(state="no_metrics", metrics="no_metrics")
        plan: SamplePlan = {
            **kp,
            "format": PLAN_FORMAT,
            "config": cfg.model_dump(),
            "precision": cfg.precision,
            "f16_path": None if pb.path == "fp32" else pb.path,
            "prelude": pb.prelude,
            "blob_bytes": len(pb.blob),
            "sample": sample,
            "memory": memory_by_category(kp["buffers"]),
        }
        return plan, bytes(pb.blob)
