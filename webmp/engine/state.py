"""The GPU's training-state words and metrics records: their layout, and the one codec for both.

`State` in shaders/common/common.wgsl and the record written by shaders/optim/scaler.wgsl are rows
of 32-bit words, each a u32 or an f32. STATE_FIELDS and METRIC_FIELDS list them in word order; the plan
carries both lists (its state.fields and metrics.fields), and both runtimes decode what they read
by the plan's lists (web/runner.js, webmp/engine/runtime.py, webmp/train/loop.py). Everything else
(the plan's initial state, checkpoints, the server's upload check, tests) goes through
`encode_state`, `decode_state` and `decode_records` here, by field name, never by word offset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

WordKind = Literal["u32", "f32"]
Fields = Sequence[tuple[str, WordKind]]

STATE_FIELDS: list[tuple[str, WordKind]] = [
    ("scale", "f32"),
    ("growth_tracker", "u32"),
    ("hysteresis_left", "u32"),
    ("iteration", "u32"),
    ("opt_step", "u32"),
    ("data_pos", "u32"),
    ("skipped_total", "u32"),
    ("min_scale_events", "u32"),
    ("first_min_scale_iter", "u32"),
    ("apply", "u32"),
    ("lr", "f32"),
    ("grad_mul", "f32"),
    ("bc1", "f32"),
    ("bc2", "f32"),
    ("loss", "f32"),
    ("grad_norm", "f32"),
    ("found_inf", "u32"),
    ("micro", "u32"),
    ("pad1", "u32"),
    ("pad2", "u32"),
]
METRIC_FIELDS: list[tuple[str, WordKind]] = [
    ("step", "u32"),
    ("loss", "f32"),
    ("scale", "f32"),
    ("skipped", "u32"),
    ("lr", "f32"),
    ("grad_norm", "f32"),
    ("found_inf", "u32"),
    ("min_scale_event", "u32"),
]
STATE_BYTES = 4 * len(STATE_FIELDS)
NO_STEP = 0xFFFFFFFF  # step word of a metrics-ring slot never written


def encode_words(values: Mapping[str, float | int], fields: Fields = STATE_FIELDS) -> bytes:
    """One row of words from {field: value}; fields not given are 0. Unknown names are an error."""
    known = {name for name, _ in fields}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}; known: {sorted(known)}")
    words = np.zeros(len(fields), np.uint32)
    for i, (name, kind) in enumerate(fields):
        if name in values:
            v = values[name]
            words[i] = np.float32(v).view(np.uint32) if kind == "f32" else np.uint32(int(v))
    return words.tobytes()


def encode_state(values: Mapping[str, float | int]) -> bytes:
    """The state buffer's bytes from {field: value} (missing fields 0)."""
    return encode_words(values, STATE_FIELDS)


def decode_records(raw: bytes, fields: Fields = METRIC_FIELDS) -> list[dict[str, float | int]]:
    """Every whole row of words in `raw` as {field: value}, f32 fields as Python floats."""
    n = len(raw) // (4 * len(fields))
    words = np.frombuffer(raw, np.uint32, count=n * len(fields)).reshape(n, len(fields))
    floats = words.view(np.float32)
    return [
        {
            name: float(floats[r, i]) if kind == "f32" else int(words[r, i])
            for i, (name, kind) in enumerate(fields)
        }
        for r in range(n)
    ]


def decode_state(raw: bytes, fields: Fields = STATE_FIELDS) -> dict[str, float | int]:
    """{field: value} of the state buffer (raw may be longer than the state words); fields: a
    plan's state.fields."""
    nbytes = 4 * len(fields)
    if len(raw) < nbytes:
        raise ValueError(f"state buffer holds {len(raw)} bytes, the state is {nbytes}")
    return decode_records(raw[:nbytes], fields)[0]


def initial_state(scale: float, hysteresis: int) -> bytes:
    """State before the first step: the initial loss scale, a full hysteresis budget, and bias
    corrections of 1 (read only after the first applied step sets them)."""
    return encode_state({"scale": scale, "hysteresis_left": hysteresis, "bc1": 1.0, "bc2": 1.0})
