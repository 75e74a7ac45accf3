"""Text generation with a token network (`webmp sample`, the page's sampling): the network's forward
pass in a plan of its own (a SamplePlan, webmp/engine/plan.py) that the runtimes replay once per
token, on the plan's schedule, with no host work in between.

The plan's buffers: the overflow flags, a stand-in for the metrics ring, every parameter's f32
master (a checkpoint's) under its name and, for the matrices the matmuls read, its working copy
h_<name> packed on the host (pack_h: numpy rounds to nearest even, as the training plan packs its
initial copies and as adamw_copy stores them), the token buffer `seq` (the prompt's ids, then the
generated ones) and its count `seq_len`, idx [T], then the forward pass's activations. Each
program adds one token; with n = seq_len the tokens held, the newest at position n - 1:
  sample_step  (the window) sample_window: idx = the last <= T tokens of seq (positions from 0,
               padding after: attention is causal, so padding changes no earlier row); the training
               plan's forward nodes over that window (R = T rows, dropout off: the same kernels and
               constants as a batch_size 1 train_step); sample_next: a draw from the last real
               row's logits, appended to seq (webmp/ops/sample.py).
  sample_row   (one position, while n <= T) the forward pass of the newest token's row alone:
               its embedding row read from seq (embed_row: the window's embed_fwd row), each
               per-position layer on one row (SampleBuilder.row_tiles), and for each attention
               layer one dispatch a head (attention_row) that puts the q, k, v row into its cache
               (the window's qkv buffer, row n - 1) and attends over cache rows 0 .. n - 1, the
               head on one row, sample_next. The kernels read n from seq_len on the GPU. Few
               dispatches matter here: a token's work is small, and each dispatch has a fixed
               cost (~40 us on lavapipe).
While n <= T the window holds every token at its own position, so the k and v rows of earlier
positions do not change from token to token: the cache rows written by the window program of the
prompt and by the one-position programs since are the window's own. Every kernel of the row
program computes an element as the window's computes that element of the newest row (the matmul
cores sum in k order whatever M, and attn_row.wgsl sums as they do; the softmax row is the
window's row function): the same logits,
bit for bit up to the sign of zero where a sum of stale-row terms 0 * v meets a zero (no later
operation tells the two apart), so the same tokens (tests/models/test_net_sample.py compares the
logits at every step). Once n > T the window slides, every position changes and the cache is
void: those tokens run the window program.

The schedule (SampleSpec.schedule): the window program for the first token (it computes every row
of the prompt's window, so it fills the caches), the row program for the tokens drawn at
n = P + 1 .. T (P the prompt's length), the window program for the rest. kv_cache=False: the
window program for every token (the sampler before the cache; the same tokens).
The gpt's plan (webmp/models/gpt.py, build_gpt_sample_plan) is this one over gpt_network, under the
gpt's names.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from .. import ops
from ..config import TrainConfig
from ..engine.plan import PLAN_FORMAT, SamplePlan, SampleRun, SampleSpec, memory_by_category, pack_h
from ..engine.tiles import ROW_TILES, Tiles, TileTable
from ..nn import layers as L
from ..nn.network import Network, ParamShape
from .attention_form import scores_bytes
from .common import Init, ModelBuilder, Param, check_params
from .net_nodes import Node, NormNode, Value
from .net_seq import AttentionNode, EmbeddingNode, TiedHeadNode, TokenNet

SAMPLE_STEP = "sample_step"  # the window's forward pass
SAMPLE_ROW = "sample_row"  # the newest position's, over the caches
ROW = "row."  # the row program's values: the window's buffer names with this prefix
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
    kv_cache: bool = True,
    net: Network | None = None,
    names: Mapping[str, str] | None = None,
    fp8_scale: np.ndarray | None = None,
) -> tuple[SamplePlan, bytes]:
    """The plan generating `tokens` tokens after the token ids `prompt` with the token network `net`
    (default cfg.model_spec) and its parameters `params` (f32, by layer path: layers.0.weight, ...,
    or by the names `names` gives a layer path's parameters and values; a checkpoint's masters),
    vocabulary `vocab` (token id -> character), on prelude `path`; kv_cache=False: the window
    program for every token (module docstring). An fp8 run's model casts as its training plan's
    evaluation does, at the scales `fp8_scale` (its checkpoint's; None: 1, a new run's)."""
    net = net or cfg.model_spec
    if net is None or not net.is_tokens:
        raise ValueError("sampling needs a token network (model_spec with input {tokens, context})")
    if len(vocab) != net.classes:
        raise ValueError(f"a vocabulary of {len(vocab)} characters for a network of {net.classes} tokens")
    settings = SampleRequest(prompt, tokens, temperature, seed, tokens_per_submit, net.classes)
    g = SampleNet(SampleBuilder(cfg, path, tiles), net, params, settings, names or {})
    return g.sample_plan(vocab, kv_cache, fp8_scale)


def sample_schedule(prompt_tokens: int, tokens: int, T: int, kv_cache: bool = True) -> list[SampleRun]:
    """Which program draws each token, as runs of consecutive tokens: the window for the first, the
    one-position program for those drawn at n = prompt_tokens + 1 .. T (with kv_cache), the window
    for the rest."""
    rows = max(0, min(tokens - 1, T - prompt_tokens)) if kv_cache else 0
    schedule: list[SampleRun] = []
    for program, count in ((SAMPLE_STEP, 1), (SAMPLE_ROW, rows), (SAMPLE_STEP, tokens - 1 - rows)):
        if count and schedule and schedule[-1]["program"] == program:
            schedule[-1]["tokens"] += count
        elif count:
            schedule.append({"program": program, "tokens": count})
    return schedule


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
    host: no gradients, moments or optimizer. While `one_row` (SampleNet's row pass) its products
    of one row take the tiles of `row_tiles` (the same bits whatever the tiles: the cores sum in k
    order)."""

    one_row = False
    window_rows = 1  # T: the rows of the window's products

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

    def matmul(self, program: str, variant: str, **kw: Any) -> None:
        if not (self.one_row and kw["M"] == 1):
            return super().matmul(program, variant, **kw)
        shape = (kw["N"], kw["K"], kw.get("trans_a", 0), kw.get("trans_b", 0))
        ops.matmul(self.pb, program, variant, tiles=self.row_tiles(variant, *shape), **kw)

    def row_tiles(self, variant: str, N: int, K: int, trans_a: int = 0, trans_b: int = 0) -> Tiles:
        """A one-row product's tiles: ROW_TILES for the per-position layers with a bias (matmul_fwd,
        most of the row program's time); the others take the tiles of the window's product of that
        shape, so that they share its pipelines where the sizes are read at run time (a pipeline
        is ~0.15 s of lavapipe's compile, and these products are small)."""
        if variant == "matmul_fwd":
            return ROW_TILES
        return self.tiles.for_shape(self.path, self.window_rows, N, K, trans_a, trans_b)


class SampleNet(TokenNet):
    """A token network's sampling plan: the constructor declares the buffers up to idx (the
    parameters as the network's nodes place them, named by `named`), sample_plan the programs.
    While mb.one_row (row_program) the nodes emit the newest position's forward pass: their values
    are one row, in buffers named ROW + the window's name (`named`), and the embedding and the
    attention are the row nodes below."""

    mb: SampleBuilder

    def __init__(
        self,
        mb: SampleBuilder,
        net: Network,
        params: dict[str, np.ndarray],
        settings: SampleRequest,
        names: Mapping[str, str],
    ):
        self.names, self.mb = names, mb
        check_params(params, {self.named(n): tuple(p.shape) for n, p in net.param_shapes().items()})
        self.pb, self.net, self.given, self.settings = mb.pb, net, params, settings
        self.V, self.T = net.classes, net.context
        self.Bt, self.R = 1, net.context  # one window
        mb.window_rows = net.context
        pb = self.pb
        pb.u32("flags", (4,), "other")
        # the runtimes stage a plan's metrics buffer; this plan has no metrics or state, and this word
        # stands in for both (never read)
        pb.u32("no_metrics", (1,), "other")
        self.place_nodes()
        pb.u32("seq", (settings.capacity,), "data", settings.prompt)
        pb.u32("seq_len", (1,), "data", [len(settings.prompt)])
        pb.u32("idx", (self.T,), "activations")

    def node_type(self, layer: L.Layer) -> type[Node]:
        row_nodes: dict[type, type[Node]] = {
            L.Embedding: RowEmbeddingNode,
            L.CausalSelfAttention: RowAttentionNode,
            L.LayerNorm: RowNormNode,
        }
        if isinstance(layer, L.Linear) and layer.tied:
            return RowTiedHeadNode
        return row_nodes.get(type(layer)) or super().node_type(layer)

    def named(self, name: str) -> str:
        """The window's buffer for `name` (as the names give it), and in the row pass ROW + it (a
        name given again, as the nodes do, stays the same)."""
        if not self.mb.one_row or name.startswith(ROW):
            return self.names.get(name, name)
        return ROW + self.names.get(name, name)

    def value(self, buffer: str, shape: tuple[int, ...]) -> Value:
        if not self.mb.one_row:
            return super().value(buffer, shape)
        if len(shape) != 2:
            raise ValueError(f"a token network's values are [T, D] per window, not {shape}")
        return Value(buffer, shape, 1, shape[-1])

    @contextmanager
    def window(self) -> Iterator[None]:
        """Within the row pass: names and values are the window's (a cache, the window's embedding)."""
        was, self.mb.one_row = self.mb.one_row, False
        try:
            yield
        finally:
            self.mb.one_row = was

    def initial(self, name: str, p: ParamShape) -> Init | None:
        given = self.given[name]
        return lambda: np.asarray(given, np.float32)

    def draw(self, program: str, logits: str, rows: int) -> None:
        s = self.settings
        ops.sample_next(
            self.pb, program, logits=logits, seq="seq", seq_len="seq_len", V=self.V, T=rows,
            capacity=s.capacity, temperature=s.temperature, seed=s.seed,
        )  # fmt: skip

    def window_program(self) -> None:
        """sample_step: the window, the forward pass over it, the draw from its last real row."""
        P = SAMPLE_STEP
        ops.sample_window(
            self.pb, P, seq="seq", seq_len="seq_len", idx="idx", T=self.T, capacity=self.settings.capacity
        )
        self.forward(P, "flags", False, None)
        self.draw(P, "logits", self.T)

    def row_program(self) -> None:
        """sample_row: the newest row's forward pass (its embedding read from seq), the draw from
        its logits."""
        P = SAMPLE_ROW
        self.mb.one_row = True
        try:
            self.forward(P, "flags", False, None)
            logits = self.named("logits")
        finally:
            self.mb.one_row = False
        self.draw(P, logits, 1)

    def sample_plan(
        self, vocab: Sequence[str], kv_cache: bool, fp8_scale: np.ndarray | None = None
    ) -> tuple[SamplePlan, bytes]:
        """The programs the schedule runs and the plan that replays them."""
        pb, s = self.pb, self.settings
        schedule = sample_schedule(len(s.prompt), s.tokens, self.T, kv_cache)
        self.window_program()
        if any(run["program"] == SAMPLE_ROW for run in schedule):
            self.row_program()
        if self.mb.fp8 is not None:
            self.mb.fp8.size(fp8_scale)
        sample: SampleSpec = {
            "schedule": schedule,
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


class RowEmbeddingNode(EmbeddingNode):
    """In the row pass: the newest token's embedding row, read from seq (embed_row: the window's
    embed_fwd row, the same bits)."""

    g: SampleNet

    def forward(self, x, program, flags, training):
        if not self.mb.one_row:
            return super().forward(x, program, flags, training)
        y = self.out(x)
        T, D = self.out_shape
        ops.embed_row(
            self.pb, program, seq="seq", seq_len="seq_len", wte=self.params["weight"]["master"],
            wpe=self.tables()[0], X=y.buffer, T=T, D=D, capacity=self.g.settings.capacity, flags=flags,
        )  # fmt: skip
        return y, None


class RowNormNode(NormNode):
    """In the row pass a LayerNorm right after the residual add into its input takes the add into
    its own dispatch (layernorm_fwd's `add`: the same bits; a dispatch costs more than a row's work)."""

    def residual_add(self, x, program, flags):
        if not self.mb.one_row:
            return None
        added = self.pb.take_last(program, "add_h", {"Y": x.buffer, "flags": flags})
        return None if added is None else added["A"]


class RowTiedHeadNode(TiedHeadNode):
    """In the row pass the head reads the window program's transposed table: the weights do not
    change while sampling, and the schedule runs the window program first (sample_schedule)."""

    g: SampleNet

    def transposed_table(self, program: str) -> str:
        if not self.mb.one_row:
            return super().transposed_table(program)
        t = "hT_" + self.table()["name"]
        if t not in self.pb.buffers:
            raise ValueError(
                "the row program was built before the window program, which transposes the table"
            )
        return t


class RowAttentionNode(AttentionNode):
    """In the row pass: the newest row's q, k, v (the qkv projection on one row), then in one
    dispatch (attention_row) put into the cache (row n - 1 of the window's qkv) and attended over
    the cache's rows (masked past n - 1: rows the window would hold too, or stale ones never
    weighted), then the output projection."""

    g: SampleNet

    def form(self) -> str:
        """The window's attention: the three-kernel form, whose softmax row the row pass repeats bit
        for bit (attn_softmax_row), unless its S would not fit the adapter (then fused, and the
        row pass's logits are the window's up to the forms' rounding): TrainConfig.attention "auto"
        without the tune cache's choice."""
        att = self.shape()
        B, T, H, d = att["B"], att["T"], att["H"], att["d"]
        fits = scores_bytes(B, T, H) <= self.mb.tiles.buffer_limit
        return "unfused" if fits or ops.flash_supported(T, H, d, B) else "fused"

    def forward(self, x, program, flags, training):
        if not self.mb.one_row:
            return super().forward(x, program, flags, training)
        g, pb, att, D = self.g, self.pb, self.shape(), x.cols
        T, H, d = att["T"], att["H"], att["d"]
        qkv = g.act(f"{self.path}.qkv", 1, 3 * D)
        self.project(program, x.buffer, "qkv", qkv, 1, 3 * D, D, flags, False)
        with g.window():
            cache = g.act(f"{self.path}.qkv", T, 3 * D)
        S, P, O = (
            g.f32(f"attention_S_h{H}", (H, T)),
            g.act(f"{self.path}.P", H, T),
            g.act(f"{self.path}.O", 1, D),
        )
        ops.attention_row(
            pb, program, qkv=qkv, cache=cache, S=S, P=P, O=O, seq_len="seq_len", T=T, H=H, d=d, flags=flags
        )
        y = self.out(x)
        self.project(program, O, "proj", y.buffer, 1, D, D, flags, False)
        return y, None
