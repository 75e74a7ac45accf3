"""Training configuration: one validated object shared by the CLI, the Python API and the server.

Each field's facts sit beside its type, default and docstring, in its `Meta`: the CLI's flags, the
page's form, the resume rules and the browser refusal are generated from it, and its limits checked.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from functools import cache
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.fields import FieldInfo

from .nn.network import Network

Precision = Literal["mixed", "fp32", "fp16-noscale", "bf16", "fp8"]
F16Choice = Literal["native", "emulated", "auto"]
MLP_MODELS = ("mlp", "mlp-ln")
GPT_ONLY = ("gpt",)
NET_ONLY = ("net",)
TABLE_MODELS = (*MLP_MODELS, "net")  # the models that train on a table (Dataset)
# Defaults that differ by model, applied to the fields a config leaves out. The GPT's train in about
# four minutes on a 2-core CPU adapter (lavapipe): 600 steps of 16 windows of 64 characters.
MODEL_DEFAULTS: dict[str, dict[str, object]] = {
    "gpt": {"steps": 600, "batch_size": 16, "lr": 2e-3, "warmup": 60, "min_lr": 2e-4, "weight_decay": 0.1},
}
F32_NORMAL_MIN = 2.0**-126  # the smallest normal f32 (GPUs may flush subnormals to 0)
F32_MAX = 3.4028234663852886e38
BETA_F32_MAX = 1 - 2.0**-25  # from here up an f32 rounds to 1
# The page's form groups (their titles and order are the form's: webmp.serve.form.GROUP_TITLES).
FormGroup = Literal["model", "precision", "optimizer", "run"]


@dataclass(frozen=True)
class Size:
    """A size beyond any adapter a WebGPU device offers (the adapter's own limits are checked when the
    plan is built, webmp.engine.runtime.GPU.check_plan): this catches typos before any work."""

    limit: int
    why: str  # what the number counts, for the error message


@dataclass(frozen=True)
class Meta:
    """What a TrainConfig field is besides its type, default and docstring (its flag's help): its
    place in the page's form, the models that read it, whether a browser run or a resume may change
    it, its GPU-side limits and its flag's metavar. Every field carries one: `Annotated[T, Meta(...)]`."""

    group: FormGroup  # the form's group that shows it
    _: KW_ONLY
    label: str | None = None  # the form's label; the name with spaces if None
    common: bool = False  # shown before the group's "more settings"
    form_after: str | None = None  # the form shows it right after this field, not in declaration order
    models: tuple[str, ...] | None = None  # the models that read it; None: all of them
    browser: str | None = None  # why a browser run cannot set it (it must keep its default); None: it can
    locked: bool = False  # a resumed run must keep the checkpoint's value
    u32: bool = False  # a counter the GPU keeps in 32 bits (webmp.engine.state's words)
    size: Size | None = None
    metavar: str | None = None  # the flag's, where it says more than its type's


def find_meta(field: FieldInfo) -> Meta | None:
    """The field's Meta, if its annotation carries one."""
    return next((m for m in field.metadata if isinstance(m, Meta)), None)


@cache
def field_meta(model: type[BaseModel]) -> dict[str, Meta]:
    """Each field's Meta, in declaration order; raises TypeError naming a field without one."""
    metas = {name: find_meta(field) for name, field in model.model_fields.items()}
    missing = [name for name, meta in metas.items() if meta is None]
    if missing:
        raise TypeError(
            f"{model.__qualname__}: {', '.join(missing)} without a Meta (Annotated[T, Meta(group, ...)]: "
            "the form, the resume rules and the limits read it)"
        )
    return {name: meta for name, meta in metas.items() if meta is not None}


BROWSER_INIT = (
    "browser runs draw their initial weights from the seed; a weights file (--init-weights) is for "
    "native `webmp train`"
)


class TrainConfig(BaseModel):
    """Every field is a `webmp train` flag (underscores as dashes); its docstring is the flag's help."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)

    # model and data
    model: Annotated[Literal["mlp", "mlp-ln", "gpt", "net"], Meta("model", common=True, locked=True)] = "mlp"
    """mlp: Linear layers with an activation between them; mlp-ln adds LayerNorm after each hidden Linear;
    gpt: a character-level transformer (pre-LayerNorm, GPT-2 style) on a text corpus; net: the network
    of --model-spec (webmp.nn layers)"""
    model_spec: Annotated[
        Network | None,
        Meta("model", label="network", common=True, models=NET_ONLY, locked=True, metavar="FILE.json"),
    ] = None  # fmt: skip
    """a network of your own (model net, implied): a JSON file {"input": [C, H, W] or [features],
    "layers": [{"type": "conv2d", "out": 16, "kernel": 3, "padding": 1}, {"type": "relu"}, ...]} whose
    last layer is a linear layer with one output per class, or a sequence model on text {"input":
    {"tokens": V, "context": T}, "layers": [{"type": "embedding", "dim": 64}, ...]} whose last layer
    has one output per character (schema: webmp.nn.network_schema())"""
    hidden: Annotated[
        list[int],
        Meta("model", label="hidden widths", common=True, models=MLP_MODELS, locked=True,
             size=Size(1 << 16, "a layer's width")),
    ] = Field(default_factory=lambda: [256, 256])  # fmt: skip
    """hidden layer widths, comma-separated"""
    act: Annotated[Literal["gelu", "relu"], Meta("model", models=MLP_MODELS, locked=True)] = "gelu"
    """activation after each hidden layer"""
    init_gain: Annotated[float, Meta("model", models=MLP_MODELS, locked=True)] = 1.0
    """multiplies PyTorch's default Linear init"""
    dataset: Annotated[Literal["digits"], Meta("model", models=TABLE_MODELS, locked=True)] = "digits"
    """built-in training data (without --data): scikit-learn's 8x8 digits (10 classes), a fixed split"""
    data: Annotated[str | None, Meta("model", common=True, locked=True, metavar="PATH")] = None
    """training data file: for the MLPs .npz (arrays x, y) or .csv (last column the label), split 80/20
    like digits, without it the built-in dataset; for gpt (and a network with a token input) any UTF-8
    text (characters are the tokens, the last 10 % validation), without it the running Python's
    standard library sources; a browser run names a file uploaded to its server by its hash,
    sha256:<64 hex digits>"""
    init_weights: Annotated[
        str | None, Meta("model", browser=BROWSER_INIT, locked=True, metavar="PATH")
    ] = None  # fmt: skip
    """initial parameters from a safetensors file instead of drawing them from seed: one float tensor per
    parameter, named and shaped as this model's (weights [in, out]; a webmp checkpoint.safetensors
    works too, its optimizer state left out); the optimizer and loss scaler start fresh"""
    # the GPT's shape (ignored by the MLPs)
    n_layer: Annotated[
        int,
        Meta("model", label="layers", common=True, models=GPT_ONLY, locked=True,
             size=Size(1 << 10, "transformer blocks")),
    ] = 2  # fmt: skip
    """gpt: transformer blocks"""
    n_head: Annotated[
        int,
        Meta("model", label="heads", common=True, models=GPT_ONLY, locked=True,
             size=Size(1 << 10, "attention heads")),
    ] = 4  # fmt: skip
    """gpt: attention heads; d_model / n_head, the head size, must be even"""
    d_model: Annotated[
        int,
        Meta("model", label="width (d_model)", common=True, models=GPT_ONLY, locked=True,
             size=Size(1 << 14, "the residual stream's width")),
    ] = 128  # fmt: skip
    """gpt: width of the residual stream (the MLP block is 4x as wide)"""
    context: Annotated[
        int,
        Meta("model", common=True, models=GPT_ONLY, locked=True,
             size=Size(1 << 13, "the attention scores grow with its square")),
    ] = 64  # fmt: skip
    """gpt: context length in characters (training windows and sampling)"""
    tie_head: Annotated[bool, Meta("model", label="tied head", models=GPT_ONLY, locked=True)] = True
    """gpt: the output head is the token embedding's transpose (no head bias)"""
    val_tokens: Annotated[int, Meta("model", models=GPT_ONLY, u32=True)] = 32768
    """gpt and token networks: validation characters evaluated at the end (the first ones of the
    split; 0 = all)"""
    attention: Annotated[Literal["auto", "fused", "unfused"], Meta("model", models=("gpt", "net"))] = "auto"
    """gpt and token networks: causal self-attention as three kernels (unfused: the scores S = Q Kᵀ,
    f32 [batch x heads x context, context], their softmax P, kept for the backward pass, and P V) or
    as fused flash-style kernels (fused: an online softmax over key tiles, P recomputed in the
    backward pass from the saved row log-sum-exp: no context² buffer, at the cost of computing the
    scores twice); auto: unfused unless the tune cache measured fused faster for the shape, or S
    would not fit the adapter's largest buffer. The run's log says which and why"""
    input_scale: Annotated[float, Meta("model", form_after="init_gain", models=TABLE_MODELS, locked=True)] = (
        1.0
    )
    """multiplies the normalised features"""
    # precision
    precision: Annotated[Precision, Meta("precision", common=True, locked=True)] = "mixed"
    """mixed: f16 matmuls, fp32 master weights, dynamic loss scaling; fp32: the same kernels in f32, no
    scaling; fp16-noscale: f16 without loss scaling; bf16: matmul operands and stored activations in
    bf16 (f32's range, 8 bits of precision), no loss scaling, on any adapter (no shader-f16 needed); fp8:
    bf16 storage, and the hidden Linear layers' matmuls on fp8 operands (inputs and weights E4M3,
    output gradients E5M2) with per-tensor delayed scaling (the --fp8-* flags), no loss scaling unless
    --fp8-loss-scale dynamic"""
    f16: Annotated[F16Choice, Meta("precision", label="f16 path")] = "auto"
    """f16 path: native needs the adapter's shader-f16 feature, emulated packs f16 into u32 words; auto
    picks native when the adapter has it"""
    fp8_margin: Annotated[int, Meta("precision", label="fp8 margin", locked=True)] = 0
    """fp8: scale = fp8_max / amax / 2^margin, rounded down to a power of two (Transformer Engine's
    DelayedScaling margin)"""
    fp8_amax_history: Annotated[
        int,
        Meta("precision", label="fp8 amax history", locked=True, size=Size(1 << 16, "steps of amax kept")),
    ] = 1024
    """fp8: steps of each tensor's amax kept (DelayedScaling's amax_history_len)"""
    fp8_amax_algo: Annotated[
        Literal["max", "most_recent"], Meta("precision", label="fp8 amax", locked=True)
    ] = "max"
    """fp8: the amax a scale is computed from: the history's max, or the last step's (amax_compute_algo)"""
    fp8_keep_ends: Annotated[bool, Meta("precision", label="fp8 keeps ends in bf16", locked=True)] = True
    """fp8: the first and last Linear layers of an MLP or network stay in bf16 (the usual recipe; the gpt's
    embedding and head are never fp8); --no-fp8-keep-ends quantises every Linear layer"""
    fp8_loss_scale: Annotated[
        Literal["off", "dynamic"], Meta("precision", label="fp8 loss scale", locked=True)
    ] = "off"
    """fp8: dynamic: the loss scaler (init_scale, growth and backoff as in mixed) on top of the per-tensor
    scales; off: none, and a step whose gradients are not finite is skipped, as in bf16"""
    # optimisation
    steps: Annotated[int, Meta("optimizer", common=True, u32=True)] = 1000
    """training steps, overflow-skipped ones included"""
    batch_size: Annotated[
        int, Meta("optimizer", common=True, locked=True, size=Size(1 << 20, "rows a step"))
    ] = 64
    """examples per step (gpt: context windows per step); with grad_accum N, per micro-batch"""
    grad_accum: Annotated[
        int,
        Meta("optimizer", label="gradient accumulation", form_after="batch_size", locked=True,
             size=Size(1 << 8, "micro-batches a step: the plan holds the step's dispatches once for each")),
    ] = 1  # fmt: skip
    """micro-batches per optimizer step: the gradients of N batches of batch_size are summed on the
    GPU (f32) and applied once, as one batch of N x batch_size would be (its rows in order, the loss
    divided by N x batch_size, one overflow verdict and loss-scale update a step); activations are
    those of one micro-batch"""
    zero: Annotated[
        Literal[0, 1],
        Meta("optimizer", label="sharded optimizer state (ZeRO)", form_after="grad_accum",
             browser="a browser run is one rank: there is no optimizer state to shard"),
    ] = 0  # fmt: skip
    """1: under MPI with N ranks, each rank keeps and updates the masters and Adam moments of about
    1/N of the parameters (whole parameters, balanced by bytes; ZeRO stage 1): the gradients are
    reduce-scattered, each rank runs AdamW on its own, the updated working copies are all-gathered;
    the weights stay bit-identical to the unsharded run; checkpoints are whole. One rank: nothing to
    shard"""
    recompute: Annotated[
        Literal["none", "blocks"], Meta("optimizer", label="recompute activations", models=GPT_ONLY)
    ] = "none"
    """gpt: blocks keeps only the residual stream between blocks and recomputes a block's other
    activations (LayerNorm outputs, qkv, attention probabilities, MLP hidden) right before its backward
    pass, with the same kernels in the same order: the same curve bit for bit, the activations of one
    block instead of all, one more forward pass of the blocks (but the last) a step"""
    lr: Annotated[float, Meta("optimizer", label="learning rate", common=True)] = 1e-3
    """peak learning rate (AdamW)"""
    schedule: Annotated[Literal["cosine", "constant"], Meta("optimizer")] = "cosine"
    """learning rate after warmup: cosine decay to min_lr, or constant"""
    warmup: Annotated[int, Meta("optimizer", u32=True)] = 50
    """linear warmup steps"""
    min_lr: Annotated[float, Meta("optimizer", label="min learning rate")] = 0.0
    """final learning rate of the cosine schedule"""
    weight_decay: Annotated[float, Meta("optimizer")] = 0.01
    """AdamW's decoupled weight decay, on weight matrices only: the MLPs' Linear weights, every matrix of
    the gpt (token and position embeddings and an untied head included); never biases or LayerNorm
    parameters. (torch.optim.AdamW decays every parameter it is given.)"""
    beta1: Annotated[float, Meta("optimizer")] = 0.9
    """AdamW's first-moment decay"""
    beta2: Annotated[float, Meta("optimizer")] = 0.999
    """AdamW's second-moment decay"""
    eps: Annotated[float, Meta("optimizer")] = 1e-8
    """AdamW's denominator epsilon"""
    clip_norm: Annotated[float, Meta("optimizer")] = 0.0
    """max global gradient norm, applied after unscaling (0 = no clipping)"""
    # dynamic loss scaling (PyTorch GradScaler defaults; hysteresis 1 = PyTorch behaviour; the floor
    # min_scale is webmp's own)
    init_scale: Annotated[float, Meta("precision", common=True)] = 65536.0
    """initial loss scale"""
    growth_factor: Annotated[float, Meta("precision")] = 2.0
    """multiplies the scale after growth_interval clean steps"""
    backoff_factor: Annotated[float, Meta("precision")] = 0.5
    """multiplies the scale when an overflow backs it off (see hysteresis); the step is skipped"""
    growth_interval: Annotated[int, Meta("precision", u32=True)] = 2000
    """clean (overflow-free) steps before the scale grows"""
    hysteresis: Annotated[int, Meta("precision", u32=True)] = 1
    """overflows tolerated before the scale backs off (1 = PyTorch)"""
    min_scale: Annotated[float, Meta("precision")] = 1.0
    """floor of the loss scale; an overflow at this scale is a min-scale event, which stops the run under
    the default min_scale_policy (raise). Not in PyTorch: GradScaler has no floor, its scale can fall
    below 1"""
    min_scale_policy: Annotated[Literal["raise", "warn"], Meta("precision")] = "raise"
    """on a min-scale event: raise stops the run naming the step and last checkpoint; warn goes on"""
    # bookkeeping
    seed: Annotated[int, Meta("run", common=True, locked=True)] = 0
    """seeds the initial weights and the data order"""
    log_every: Annotated[
        int, Meta("run", common=True, size=Size(1 << 16, "the GPU's metrics ring holds log_every records"))
    ] = 50
    """steps between metric readbacks from the GPU"""
    checkpoint_every: Annotated[int, Meta("run", u32=True)] = 500
    """steps between checkpoints (0 = only at the end)"""

    @model_validator(mode="before")
    @classmethod
    def _model_defaults(cls, data):
        """Fill the fields left out with the model's defaults (MODEL_DEFAULTS)."""
        if isinstance(data, dict):
            if data.get("model_spec") is not None and "model" not in data:
                data = {**data, "model": "net"}
            extra = MODEL_DEFAULTS.get(data.get("model", "mlp"), {})
            data = {**extra, **data}
        return data

    @model_validator(mode="after")
    def _network_for_net(self) -> TrainConfig:
        if (self.model == "net") != (self.model_spec is not None):
            raise ValueError(
                "model net trains the network of model_spec (--model-spec FILE.json); give both or neither"
            )
        return self

    @field_validator(
        "steps", "batch_size", "grad_accum", "log_every", "growth_interval", "hysteresis", "n_layer",
        "n_head", "d_model", "context", "fp8_amax_history",
    )  # fmt: skip
    @classmethod
    def _positive_int(cls, v, info):
        if v <= 0:
            raise ValueError(f"{info.field_name} must be positive, got {v}")
        return v

    @field_validator("lr", "init_scale", "min_scale", "init_gain", "input_scale")
    @classmethod
    def _positive_float(cls, v, info):
        if not v > 0 or v != v or v == float("inf"):
            raise ValueError(f"{info.field_name} must be a positive finite number, got {v}")
        if v > F32_MAX:
            raise ValueError(
                f"{info.field_name} must be at most 3.4e38 (the GPU holds it in f32, where {v:g} is "
                f"infinite), got {v:g}"
            )
        return v

    @field_validator("*")
    @classmethod
    def _limits(cls, v, info):
        """The GPU's 32-bit counters (Meta.u32) and the sizes no adapter offers (Meta.size)."""
        meta = field_meta(cls)[info.field_name]
        if meta.u32 and v >= 2**32:
            raise ValueError(
                f"{info.field_name} must be below 2^32 = 4294967296 (a 32-bit counter on the GPU), got {v}"
            )
        values = v if isinstance(v, list) else [v]
        if meta.size is not None and any(x > meta.size.limit for x in values):
            raise ValueError(
                f"{info.field_name} must be at most {meta.size.limit} ({meta.size.why}), got {v}"
            )
        return v

    @field_validator("warmup", "checkpoint_every", "seed", "val_tokens")
    @classmethod
    def _non_negative(cls, v, info):
        if v < 0:
            raise ValueError(f"{info.field_name} must be >= 0, got {v}")
        return v

    @field_validator("fp8_margin")
    @classmethod
    def _fp8_margin(cls, v):
        if not 0 <= v <= 64:
            raise ValueError(f"fp8_margin must be between 0 and 64 (powers of two of headroom), got {v}")
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v):
        if v >= 2**32:
            raise ValueError(f"seed must fit in 32 bits (0 .. 4294967295), got {v}")
        return v

    @field_validator("min_lr", "weight_decay", "clip_norm")
    @classmethod
    def _non_negative_float(cls, v, info):
        if not v >= 0 or v == float("inf"):
            raise ValueError(f"{info.field_name} must be a finite number >= 0, got {v}")
        return v

    @field_validator("data", "init_weights")
    @classmethod
    def _file(cls, v, info):
        if v is not None and not v.strip():
            raise ValueError(f"{info.field_name} must be the path of a file, got an empty string")
        return v

    @field_validator("hidden")
    @classmethod
    def _hidden(cls, v):
        if not v or any(h <= 0 for h in v):
            raise ValueError(f"hidden must be a non-empty list of positive widths, got {v}")
        return v

    @field_validator("backoff_factor")
    @classmethod
    def _backoff(cls, v):
        if not 0 < v < 1:
            raise ValueError(f"backoff_factor must be in (0, 1), got {v}")
        return v

    @field_validator("growth_factor")
    @classmethod
    def _growth(cls, v):
        if not 1 < v < float("inf"):
            raise ValueError(f"growth_factor must be > 1, got {v}")
        return v

    @field_validator("beta1", "beta2")
    @classmethod
    def _beta(cls, v, info):
        if not 0 <= v < 1:
            raise ValueError(f"{info.field_name} must be in [0, 1), got {v}")
        if v >= BETA_F32_MAX:
            raise ValueError(
                f"{info.field_name} must be below 1 - 2^-25: f32, the GPU's precision, rounds {v} to 1, "
                "which makes Adam's bias correction 0"
            )
        return v

    @field_validator("eps")
    @classmethod
    def _eps(cls, v):
        if not F32_NORMAL_MIN <= v <= F32_MAX:
            raise ValueError(
                f"eps must be a positive number in f32's normal range (1.2e-38 .. 3.4e38; the GPU holds "
                f"it in f32 and may flush smaller ones to 0), got {v}"
            )
        return v

    @model_validator(mode="after")
    def _consistent(self):
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) must not exceed lr ({self.lr})")
        if self.min_scale > self.init_scale:
            raise ValueError(f"min_scale ({self.min_scale}) must not exceed init_scale ({self.init_scale})")
        rows = self.batch_size * self.grad_accum * self.window
        if self.steps * rows >= 2**32:
            raise ValueError(
                f"steps x rows a step ({self.steps} x {rows}) must stay below 2^32: the data position "
                "is a 32-bit counter on the GPU"
            )
        if self.model == "gpt" and (self.d_model % self.n_head or (self.d_model // self.n_head) % 2):
            raise ValueError(
                f"d_model ({self.d_model}) must be n_head ({self.n_head}) times an even head size"
            )
        return self

    @property
    def loss_scaling(self) -> bool:
        return self.precision == "mixed" or (self.precision == "fp8" and self.fp8_loss_scale == "dynamic")

    @property
    def skips_unscaled_overflow(self) -> bool:
        """bf16 (and fp8 with --fp8-loss-scale off): no loss scale, but a step whose gradients are not
        finite is skipped (its overflow check, as mixed's, without the scale's backoff)."""
        return self.precision == "bf16" or (self.precision == "fp8" and self.fp8_loss_scale == "off")

    @property
    def trains_on_text(self) -> bool:
        """Whether the model trains on a text corpus: the gpt, or a network with a token input."""
        return self.model == "gpt" or (self.model_spec is not None and self.model_spec.is_tokens)

    @property
    def effective_batch(self) -> int:
        """Examples an optimizer step: batch_size x grad_accum."""
        return self.batch_size * self.grad_accum

    @property
    def accumulation_line(self) -> str:
        """The logs' sentence on gradient accumulation (native and page alike: the plan carries it)."""
        return (
            f"gradient accumulation: {self.grad_accum} micro-batches of {self.batch_size} an optimizer step "
            f"(effective batch {self.effective_batch}), activations of one micro-batch"
        )

    @property
    def window(self) -> int:
        """Loss rows an example: the context of the gpt or of a token network, else 1."""
        if self.model == "gpt":
            return self.context
        return self.model_spec.context if self.model_spec is not None and self.model_spec.is_tokens else 1


# Every field's Meta, checked here: a field without one is an import error.
FIELD_META = field_meta(TrainConfig)
SCHEDULE_FIELDS = ("steps", "lr", "schedule", "warmup", "min_lr")  # the learning-rate schedule's inputs


def resumed_config(saved: dict, given: dict) -> tuple[TrainConfig, list[str]]:
    """The config a resumed run continues with: the checkpoint's own (`saved`), with only the
    fields the user gave (`given`) changed; and one line per change, saying what it does to the
    learning-rate schedule when it touches it. Raises pydantic's ValidationError."""
    old = TrainConfig(**saved)
    new = TrainConfig(**{**old.model_dump(), **given})
    changes = []
    for name in TrainConfig.model_fields:
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            why = ""
            if name in SCHEDULE_FIELDS:
                why = f" (from here on, the {new.schedule} schedule of a {new.steps}-step run)"
            changes.append(f"{name}: {a!r} -> {b!r}{why}")
    return new, changes


def config_error_message(err) -> str:
    """One line per invalid field, naming it: for CLI and HTTP errors."""
    lines = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "config"
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"invalid {field}: {msg}")
    return "\n".join(lines)
