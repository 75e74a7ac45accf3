"""Checkpoints: every buffer a step reads from one step to the next, as safetensors + JSON metadata.

Saved: master weights, working (f16) copies, both Adam moments and the GPU state words (loss scale,
growth counter, hysteresis counter, iteration, optimizer step, data position, skipped count). The
GPU state holds the data-order position, so resuming replays exactly the same batches.

Resuming does not need runtime logic: `resume_blob` writes the checkpoint's contents into the plan's
initial-contents blob, and either runtime starts from it as from a fresh plan.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load, save

from .plan import Plan
from .rundir import atomic_write, dumps
from .state import decode_state

CHECKPOINT_FORMAT = "webmp-checkpoint/1"
TENSORS = "checkpoint.safetensors"
META = "checkpoint.json"


def checkpoint_buffers(plan: Plan) -> list[str]:
    return list(plan["checkpoint_buffers"])


def _as_array(plan: Plan, name: str, raw: bytes) -> np.ndarray:
    spec = next(b for b in plan["buffers"] if b["name"] == name)
    if spec["dtype"] == "h":
        rows, cols = spec["shape"]
        dt = np.float16 if plan["f16_path"] else np.float32
        return np.frombuffer(raw, dt).reshape(rows, cols + (cols & 1)).copy()
    if spec["dtype"] == "f32":
        return np.frombuffer(raw, np.float32).reshape(spec["shape"]).copy()
    return np.frombuffer(raw, np.uint32).copy()


def save_checkpoint(
    directory: str | Path, plan: Plan, contents: dict[str, bytes], extra: dict | None = None
) -> Path:
    """Write checkpoint.safetensors and checkpoint.json atomically (temp file + rename)."""
    directory = Path(directory)
    names = checkpoint_buffers(plan)
    missing = [n for n in names if n not in contents]
    if missing:
        raise ValueError(f"checkpoint is missing buffers: {missing}")
    tensors = {n: _as_array(plan, n, contents[n]) for n in names}
    state = decode_state(contents[plan["state"]["buffer"]])
    meta = {
        "format": CHECKPOINT_FORMAT,
        "step": state["iteration"],
        "scaler": {
            k: state[k]
            for k in (
                "scale",
                "growth_tracker",
                "hysteresis_left",
                "skipped_total",
                "min_scale_events",
                "first_min_scale_iter",
            )
        },
        "optimizer_step": state["opt_step"],
        "data_pos": state["data_pos"],
        "precision": plan["precision"],
        "f16_path": plan["f16_path"],
        "config": plan["config"],
        **(extra or {}),
    }
    raw = save(tensors, metadata={"format": CHECKPOINT_FORMAT})
    meta["tensors_sha256"] = hashlib.sha256(raw).hexdigest()  # checked on load: flipped bytes
    atomic_write(directory / TENSORS, raw)
    atomic_write(directory / META, (dumps(meta, indent=2) + "\n").encode())
    return directory / TENSORS


def checkpoint_dir(path: str | Path) -> Path:
    """The run directory of a checkpoint given as its directory or its .safetensors file."""
    path = Path(path)
    return path.parent if path.name == TENSORS else path


def read_checkpoint_meta(path: str | Path) -> dict:
    """checkpoint.json of a run directory (or of a checkpoint.safetensors' directory), checked for
    the format; FileNotFoundError / ValueError in one line otherwise."""
    directory = checkpoint_dir(path)
    if not (directory / TENSORS).is_file():
        raise FileNotFoundError(f"no {TENSORS} in {directory}")
    try:
        meta = json.loads((directory / META).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{directory / META}: unreadable checkpoint metadata ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{directory / META}: not a {CHECKPOINT_FORMAT} checkpoint")
    step, config = meta.get("step"), meta.get("config")
    if not (isinstance(step, int) and step >= 0 and isinstance(config, dict) and "f16_path" in meta):
        raise ValueError(
            f"{directory / META}: damaged: step, config or f16_path missing or of the wrong type"
        )
    return meta


def load_checkpoint(directory: str | Path) -> tuple[dict[str, bytes], dict]:
    directory = checkpoint_dir(directory)
    meta = read_checkpoint_meta(directory)
    path = directory / TENSORS
    raw = path.read_bytes()
    want = meta.get("tensors_sha256")
    if want is not None and hashlib.sha256(raw).hexdigest() != want:
        raise ValueError(
            f"{path}: its bytes do not match the SHA-256 in {META} (damaged or changed since it was written)"
        )
    try:
        tensors = load(raw)
    except Exception as e:  # safetensors raises its own error types for a damaged header
        raise ValueError(f"{path}: not a readable safetensors file ({e})") from None
    return {n: a.tobytes() for n, a in tensors.items()}, meta


def resume_blob(plan: Plan, blob: bytes, contents: dict[str, bytes]) -> tuple[Plan, bytes]:
    """A copy of (plan, blob) whose initial contents are the checkpoint's buffers."""
    plan = json.loads(json.dumps(plan))
    out = bytearray(blob)
    by_name = {b["name"]: b for b in plan["buffers"]}
    for name in checkpoint_buffers(plan):
        if name not in contents:
            raise ValueError(f"checkpoint lacks buffer {name}; it was written for a different model")
        data = contents[name]
        spec = by_name[name]
        if len(data) != spec["bytes"] and not (
            name == plan["state"]["buffer"] and len(data) <= spec["bytes"]
        ):
            raise ValueError(
                f"checkpoint buffer {name} has {len(data)} bytes, the plan expects {spec['bytes']} "
                "(different model, batch size or precision)"
            )
        spec["init"] = {"offset": len(out), "bytes": len(data)}
        out += data
        out += b"\0" * (-len(out) % 4)
    plan["blob_bytes"] = len(out)
    return plan, bytes(out)
