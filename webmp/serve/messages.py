"""Messages between the page (web/run.js) and the server (webmp/serve/), validated with pydantic.

Over a run's WebSocket the page sends JSON objects with a `type` and the `run_id`:

  hello    the page's adapter, features, limits and f16 path, before the first step
  records  metrics records, one per step, decoded from the GPU ring per plan["metrics"]["fields"];
           the last message of a read also carries the gradient-range lens's counts read with them
           (`histograms`: per layer of plan["histograms"], in its bucket layout), which the server
           checks against the plan, appends to histograms.jsonl and answers with each layer's
           shares against f16's range
  summary  the final GPU state words, the browser-evaluated test counts and, for a plan whose
           eval sums the validation loss (plan["eval"]["loss_buffer"]), that sum (NaN or Infinity
           when the model diverged: summary.json then holds it, as a native run's does)
  failed   what went wrong (device lost, a plan that does not fit, a WebGPU error)
  stopped  the user stopped the run

and the server answers each with `ack` or `error` (a rejected message is dropped, nothing is
written). An ack of `records` carries `"stop": true` once a Stop was asked of the run from
elsewhere (a following page, POST /api/runs/{id}/stop): the page then stops as its own Stop does.

Pages following a run (GET-only viewers, WS /api/runs/{id}/follow) get `records` messages (the
records so far in chunks, then each new batch) and `status` messages (status, message,
last_step, stop_requested, connected: a page holds the training socket); the socket closes after
the status of an ended run.

Floats that are not finite travel as the strings "NaN", "Infinity", "-Infinity"
(JSON has no literal for them); pydantic turns those back into floats.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
    model_validator,
)

from ..engine.state import METRIC_FIELDS, STATE_FIELDS, Fields
from ..train.rundir import NON_FINITE, from_json_safe, json_safe  # noqa: F401 (re-exported)

MAX_MESSAGE_BYTES = 256 * 1024  # one WebSocket text frame; the page sends records in chunks
MAX_RECORDS_PER_MESSAGE = 500  # at ~200 bytes a record this stays well under the size limit
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
RUN_ID_RE = re.compile(RUN_ID_PATTERN)
Offer = Literal["native", "emulated"]  # whether the page's adapter has shader-f16

U32 = Annotated[int, Field(ge=0, lt=2**32, strict=True)]


def _f32_range(value: float) -> float:
    if math.isfinite(value) and abs(value) > 3.4028234663852886e38:
        raise ValueError("a finite value beyond f32's range (|x| <= 3.4e38): the GPU cannot have sent it")
    return value


# an f32 word: "NaN" / "Infinity" strings accepted, finite values within f32's range
F32 = Annotated[float, Field(allow_inf_nan=True), AfterValidator(_f32_range)]
RunId = Annotated[str, StringConstraints(pattern=RUN_ID_PATTERN)]
Text = Annotated[str, StringConstraints(max_length=2000)]

_WORD_TYPES = {"u32": U32, "f32": F32}


def _nan_or_inf(value: Any) -> Any:
    return {"NaN": math.nan, "Infinity": math.inf}.get(value, value) if isinstance(value, str) else value


def _not_negative(value: float) -> float:
    if value < 0:
        raise ValueError("a summed loss is >= 0 (or NaN or Infinity)")
    return value


# A summed loss: a JSON number >= 0, or the strings "NaN" / "Infinity" (a diverged model, e.g.
# fp16-noscale); no other strings, no booleans.
LossSum = Annotated[
    Annotated[float, Field(strict=True, allow_inf_nan=True)],
    BeforeValidator(_nan_or_inf),
    AfterValidator(_not_negative),
]


def _words_model(name: str, fields: Fields) -> type[BaseModel]:
    """A model with one required field per (name, 'u32'|'f32') word of a GPU struct."""
    words: dict[str, Any] = {n: (_WORD_TYPES[kind], ...) for n, kind in fields}
    return create_model(name, __config__=ConfigDict(extra="forbid"), **words)


if TYPE_CHECKING:  # built from the field lists at run time; a type checker sees plain models
    Record = BaseModel
    GpuState = BaseModel
else:
    Record = _words_model("Record", METRIC_FIELDS)
    GpuState = _words_model("GpuState", STATE_FIELDS)


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: RunId


class Hello(_Message):
    type: Literal["hello"]
    f16_path: Literal["native", "emulated", "fp32", "bf16"]
    start_step: U32
    adapter: dict[str, Text | int | None] = Field(max_length=16)
    features: list[Annotated[str, StringConstraints(max_length=64)]] = Field(max_length=64)
    limits: dict[str, float] = Field(max_length=64)


MAX_HISTOGRAM_LAYERS = 64
MAX_HISTOGRAM_BUCKETS = 128  # webmp.ops.GRAD_HIST_MAX_BUCKETS


class Histograms(BaseModel):
    """The lens's counts after step `step` (0-based; its record is stored or in the same message):
    one list of u32 counters per layer of plan["histograms"]. Their number, lengths and totals are
    checked against the run's plan by the server (webmp.serve.reports.RunLens.check)."""

    model_config = ConfigDict(extra="forbid")
    step: U32
    counts: list[Annotated[list[U32], Field(min_length=1, max_length=MAX_HISTOGRAM_BUCKETS)]] = Field(
        min_length=1, max_length=MAX_HISTOGRAM_LAYERS
    )


class Records(_Message):
    type: Literal["records"]
    records: list[Record] = Field(min_length=1, max_length=MAX_RECORDS_PER_MESSAGE)
    histograms: Histograms | None = None  # the lens's counts read with these records


class Summary(_Message):
    """The end of a run. Implausible counts are refused: more correct than counted."""

    type: Literal["summary"]
    state: GpuState
    test_correct: U32
    test_count: Annotated[int, Field(gt=0, lt=2**32, strict=True)]
    # plan["eval"]["loss_buffer"]'s f32 word (a language model's validation loss summed over
    # test_count characters); absent for plans without one
    val_loss_sum: LossSum | None = None
    wall_seconds: Annotated[float, Field(ge=0)]
    steps_run: U32
    readbacks: U32

    @model_validator(mode="after")
    def _plausible(self) -> Summary:
        if self.test_correct > self.test_count:
            raise ValueError(f"test_correct {self.test_correct} exceeds test_count {self.test_count}")
        return self


class Failed(_Message):
    type: Literal["failed"]
    message: Text


class Stopped(_Message):
    type: Literal["stopped"]
    step: U32


PageMessage = Hello | Records | Summary | Failed | Stopped


class _Envelope(BaseModel):
    message: Annotated[PageMessage, Field(discriminator="type")]


def parse_page_message(data: Any) -> PageMessage:
    """The validated message (raises pydantic.ValidationError)."""
    return _Envelope(message=data).message


# --- non-finite floats in JSON ---------------------------------------------------------------------

# --- REST bodies ---------------------------------------------------------------------------------


RunStatus = Literal["created", "running", "disconnected", "finished", "failed", "stopped"]


LABEL_FILE = "label.json"  # a run's name and note, as the page set them (any run in the runs directory)


class Label(BaseModel):
    """A run's name and note (POST /api/runs/{id}/label): text a person typed, one line for the name."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, StringConstraints(max_length=80, pattern=r"^[^\x00-\x1f\x7f]*$")] = ""
    note: Annotated[str, StringConstraints(max_length=2000)] = ""


def read_label(run_dir: Path) -> Label:
    """The run's label.json (an unreadable or damaged one: no label; it is the page's, not the run's)."""
    try:
        return Label.model_validate_json((run_dir / LABEL_FILE).read_text())
    except (OSError, ValueError):
        return Label()


class RunInfo(BaseModel):
    """What GET /api/runs and /api/runs/{id} return: a browser run, or a run directory that `webmp
    train` wrote under the server's runs directory (kind 'native', read-only: webmp/serve/native_runs.py)."""

    id: str
    kind: Literal["browser", "native"] = "browser"
    status: RunStatus
    message: str = ""
    steps: int
    last_step: int  # highest step stored in metrics.jsonl, -1 if none
    records: int
    checkpoint_step: int | None  # steps completed by the last uploaded checkpoint
    f16_path: str | None
    adapter: str | None
    page_url: str
    config: dict
    created: float  # when the run was created (Unix time, seconds)
    final_loss: float | None  # the last record's loss (None before the first record)
    stop_requested: bool = False  # a Stop asked by another page or the API, not yet done by the training page
    connected: bool = False  # a page holds the run's training socket (a created run it is preparing)
    # a browser run that trained and can continue from its checkpoint (stopped, failed, or its page
    # left): the page offers Resume for it
    resumable: bool = False
    # a model that generates text (the gpt, a network with a token input): a finished run samples
    generates_text: bool = False
    name: str = ""  # the run's name and note (Label), empty until a page gives them
    note: str = ""


# --- the page's tuning pass (webmp.tune.page) ----------------------------------------------------

Name = Annotated[str, StringConstraints(max_length=256)]
SubgroupSize = Annotated[int, Field(ge=1, le=1024, strict=True)]


class AdapterSignature(BaseModel):
    """What a browser reports about its adapter (GPUAdapterInfo and the feature names): the key of
    the page's tuned matmul tiles (webmp.tune.page.adapter_key)."""

    model_config = ConfigDict(extra="forbid")
    vendor: Name
    architecture: Name
    device: Name
    description: Name
    subgroup_min_size: SubgroupSize | None = None
    subgroup_max_size: SubgroupSize | None = None
    features: list[Annotated[str, StringConstraints(max_length=64)]] = Field(max_length=64)


class TuneRequest(BaseModel):
    """POST /api/tune: a tuning plan for a training config's matmuls on the page's adapter."""

    model_config = ConfigDict(extra="forbid")
    adapter: AdapterSignature
    # the device's limits, WebGPU's names (maxComputeWorkgroupSizeX, ...): the tile choices must fit
    limits: dict[Annotated[str, StringConstraints(max_length=64)], Annotated[float, Field(ge=0)]] = Field(
        max_length=64
    )
    config: dict[str, Any] = Field(max_length=64)  # TrainConfig fields, checked as POST /api/runs does
    f16: Offer
    # tile choices tried per class, its untuned default first (matmul_cases.CANDIDATES has 17 more)
    max_candidates: Annotated[int, Field(ge=1, le=18, strict=True)] = 6


class TuneCaseResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    case: Annotated[int, Field(ge=0, lt=100_000, strict=True)]
    seconds: Annotated[float, Field(gt=0, le=3600)]  # for `reps` dispatches of the case's time program
    reps: Annotated[int, Field(ge=1, le=100_000, strict=True)]
    output: Annotated[str, StringConstraints(max_length=65536)]  # the check program's output, base64


class TuneResults(BaseModel):
    """POST /api/tune/results: one shape class's measurements and check outputs."""

    model_config = ConfigDict(extra="forbid")
    request: TuneRequest
    shape_class: Annotated[str, StringConstraints(max_length=64)]
    results: list[TuneCaseResult] = Field(min_length=1, max_length=32)


class TuneVerdict(BaseModel):
    """What POST /api/tune/results answers: the class's choice (stored for the adapter's key)."""

    adapter_key: str
    shape_class: str
    tiles: dict[str, Any] | None  # the fastest choice whose output passed the check; None: none did
    gflops: float | None
    default_gflops: float | None
    tried: int
    wrong: list[int]  # cases whose output failed the check against float64


class TuneFormResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    form: Annotated[str, StringConstraints(max_length=32)]
    seconds: Annotated[float, Field(gt=0, le=3600)]  # for `reps` passes over the form's program
    reps: Annotated[int, Field(ge=1, le=100_000, strict=True)]
    digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]  # of its outputs (web/tune.js)


class TuneFormResults(BaseModel):
    """POST /api/tune/forms/results: one form choice's measurements, every form of it."""

    model_config = ConfigDict(extra="forbid")
    request: TuneRequest
    what: Annotated[str, StringConstraints(max_length=32)]  # "rows" or "weights" (FormSpec.what)
    results: list[TuneFormResult] = Field(min_length=1, max_length=8)


class TuneFormVerdict(BaseModel):
    """What POST /api/tune/forms/results answers: the choice's form (stored for the adapter's key)."""

    adapter_key: str
    what: str
    form: str  # the faster form where every form's outputs were the same, else the default
    seconds: dict[str, float] | None  # a pass of each form; None where the outputs differed
    identical: bool


class AdapterTiles(BaseModel):
    """What POST /api/adapters answers: the adapter's key, the classes and forms tuned for it so far."""

    adapter_key: str
    tuned: dict[str, dict[str, Any]]
    forms: dict[str, str] = {}  # the form choices made for it so far ("rows", "weights"): their form
    shipped: str | None = None  # the shipped table of its class (webmp.engine.adapters), or None
    # helper devices that compile a run's first kernels beside its own (webmp.engine.precompile), at
    # most: the page takes one fewer than its CPU cores up to this; and why
    compile_helpers: int = 0
    compile_helpers_why: str = ""
