"""Training configuration: one validated object shared by the CLI, the Python API and the server."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Precision = Literal["mixed", "fp32", "fp16-noscale"]
F16Choice = Literal["native", "emulated", "auto"]
MLP_MODELS = ("mlp", "mlp-ln")
# Defaults that differ by model, applied to the fields a config leaves out. The GPT's train in about
# four minutes on a 2-core CPU adapter (lavapipe): 600 steps of 16 windows of 64 characters.
MODEL_DEFAULTS: dict[str, dict[str, object]] = {
    "gpt": {"steps": 600, "batch_size": 16, "lr": 2e-3, "warmup": 60, "min_lr": 2e-4, "weight_decay": 0.1},
}
F32_NORMAL_MIN = 2.0**-126  # the smallest normal f32 (GPUs may flush subnormals to 0)
F32_MAX = 3.4028234663852886e38
BETA_F32_MAX = 1 - 2.0**-25  # from here up an f32 rounds to 1
# The fields only some models read; every other field applies to all of them.
MODEL_FIELDS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("hidden", "act", "init_gain", "dataset", "input_scale"), MLP_MODELS),
    **dict.fromkeys(("n_layer", "n_head", "d_model", "context", "tie_head", "val_tokens"), ("gpt",)),
}


# Counters the GPU keeps in 32 bits (webmp.engine.state's words).
U32_FIELDS = ("steps", "growth_interval", "hysteresis", "warmup", "checkpoint_every", "val_tokens")
# Sizes beyond any adapter a WebGPU device offers; the adapter's own limits are checked when the
# plan is built (webmp.engine.runtime.GPU.check_plan), these catch typos before any work.
SIZE_LIMITS = {
    "hidden": 1 << 16, "d_model": 1 << 14, "n_head": 1 << 10, "n_layer": 1 << 10, "context": 1 << 13,
    "batch_size": 1 << 20, "log_every": 1 << 16,
}  # fmt: skip
SIZE_WHY = {
    "hidden": "a layer's width",
    "d_model": "the residual stream's width",
    "n_head": "attention heads",
    "n_layer": "transformer blocks",
    "context": "the attention scores grow with its square",
    "batch_size": "rows a step",
    "log_every": "the GPU's metrics ring holds log_every records",
}


class TrainConfig(BaseModel):
    """Every field is a `webmp train` flag (underscores as dashes); its docstring is the flag's help."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)

    # model and data
    model: Literal["mlp", "mlp-ln", "gpt"] = "mlp"
    """mlp: Linear layers with an activation between them; mlp-ln adds LayerNorm after each hidden Linear;
    gpt: a character-level transformer (pre-LayerNorm, GPT-2 style) on a text corpus"""
    hidden: list[int] = Field(default_factory=lambda: [256, 256])
    """hidden layer widths, comma-separated"""
    act: Literal["gelu", "relu"] = "gelu"
    """activation after each hidden layer"""
    init_gain: float = 1.0
    """multiplies PyTorch's default Linear init"""
    dataset: Literal["digits"] = "digits"
    """built-in training data (without --data): scikit-learn's 8x8 digits (10 classes), a fixed split"""
    data: str | None = None
    """training data file: for the MLPs .npz (arrays x, y) or .csv (last column the label), split 80/20
    like digits, without it the built-in dataset; for gpt any UTF-8 text (characters are the tokens,
    the last 10 % validation), without it the running Python's standard library sources"""
    init_weights: str | None = None
    """initial parameters from a safetensors file instead of drawing them from seed: one float tensor per
    parameter, named and shaped as this model's (weights [in, out]; a webmp checkpoint.safetensors
    works too, its optimizer state left out); the optimizer and loss scaler start fresh"""
    # the GPT's shape (ignored by the MLPs)
    n_layer: int = 2
    """gpt: transformer blocks"""
    n_head: int = 4
    """gpt: attention heads; d_model / n_head, the head size, must be even"""
    d_model: int = 128
    """gpt: width of the residual stream (the MLP block is 4x as wide)"""
    context: int = 64
    """gpt: context length in characters (training windows and sampling)"""
    tie_head: bool = True
    """gpt: the output head is the token embedding's transpose (no head bias)"""
    val_tokens: int = 32768
    """gpt: validation characters evaluated at the end (the first ones of the split; 0 = all)"""
    input_scale: float = 1.0
    """multiplies the normalised features"""
    # precision
    precision: Precision = "mixed"
    """mixed: f16 matmuls, fp32 master weights, dynamic loss scaling; fp32: the same kernels in f32, no
    scaling; fp16-noscale: f16 without loss scaling"""
    f16: F16Choice = "auto"
    """f16 path: native needs the adapter's shader-f16 feature, emulated packs f16 into u32 words; auto
    picks native when the adapter has it"""
    # optimisation
    steps: int = 1000
    """training steps, overflow-skipped ones included"""
    batch_size: int = 64
    """examples per step (gpt: context windows per step)"""
    lr: float = 1e-3
    """peak learning rate (AdamW)"""
    schedule: Literal["cosine", "constant"] = "cosine"
    """learning rate after warmup: cosine decay to min_lr, or constant"""
    warmup: int = 50
    """linear warmup steps"""
    min_lr: float = 0.0
    """final learning rate of the cosine schedule"""
    weight_decay: float = 0.01
    """AdamW's decoupled weight decay, on weight matrices only: the MLPs' Linear weights, every matrix of
    the gpt (token and position embeddings and an untied head included); never biases or LayerNorm
    parameters. (torch.optim.AdamW decays every parameter it is given.)"""
    beta1: float = 0.9
    """AdamW's first-moment decay"""
    beta2: float = 0.999
    """AdamW's second-moment decay"""
    eps: float = 1e-8
    """AdamW's denominator epsilon"""
    clip_norm: float = 0.0
    """max global gradient norm, applied after unscaling (0 = no clipping)"""
    # dynamic loss scaling (PyTorch GradScaler defaults; hysteresis 1 = PyTorch behaviour; the floor
    # min_scale is webmp's own)
    init_scale: float = 65536.0
    """initial loss scale"""
    growth_factor: float = 2.0
    """multiplies the scale after growth_interval clean steps"""
    backoff_factor: float = 0.5
    """multiplies the scale when an overflow backs it off (see hysteresis); the step is skipped"""
    growth_interval: int = 2000
    """clean (overflow-free) steps before the scale grows"""
    hysteresis: int = 1
    """overflows tolerated before the scale backs off (1 = PyTorch)"""
    min_scale: float = 1.0
    """floor of the loss scale; an overflow at this scale is a min-scale event, which stops the run under
    the default min_scale_policy (raise). Not in PyTorch: GradScaler has no floor, its scale can fall
    below 1"""
    min_scale_policy: Literal["raise", "warn"] = "raise"
    """on a min-scale event: raise stops the run naming the step and last checkpoint; warn goes on"""
    # bookkeeping
    seed: int = 0
    """seeds the initial weights and the data order"""
    log_every: int = 50
    """steps between metric readbacks from the GPU"""
    checkpoint_every: int = 500
    """steps between checkpoints (0 = only at the end)"""

    @model_validator(mode="before")
    @classmethod
    def _model_defaults(cls, data):
        """Fill the fields left out with the model's defaults (MODEL_DEFAULTS)."""
        if isinstance(data, dict):
            extra = MODEL_DEFAULTS.get(data.get("model", "mlp"), {})
            data = {**extra, **data}
        return data

    @field_validator(
        "steps", "batch_size", "log_every", "growth_interval", "hysteresis", "n_layer", "n_head", "d_model",
        "context",
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

    @field_validator(*U32_FIELDS)
    @classmethod
    def _u32(cls, v, info):
        if v >= 2**32:
            raise ValueError(
                f"{info.field_name} must be below 2^32 = 4294967296 (a 32-bit counter on the GPU), got {v}"
            )
        return v

    @field_validator(*SIZE_LIMITS)
    @classmethod
    def _size(cls, v, info):
        limit = SIZE_LIMITS[info.field_name]
        values = v if isinstance(v, list) else [v]
        if any(x > limit for x in values):
            raise ValueError(
                f"{info.field_name} must be at most {limit} ({SIZE_WHY[info.field_name]}), got {v}"
            )
        return v

    @field_validator("warmup", "checkpoint_every", "seed", "val_tokens")
    @classmethod
    def _non_negative(cls, v, info):
        if v < 0:
            raise ValueError(f"{info.field_name} must be >= 0, got {v}")
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
        rows = self.batch_size * (self.context if self.model == "gpt" else 1)
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
        return self.precision == "mixed"


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
