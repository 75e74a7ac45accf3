"""Checkpoints: every buffer a step reads from one step to the next, as safetensors + JSON metadata.

Saved: master weights, working (f16) copies, both Adam moments and the GPU state words (loss scale,
growth counter, hysteresis counter, iteration, optimizer step, data position, skipped count). The
GPU state holds the data-order position, so resuming replays exactly the same batches.

Resuming does not need runtime logic: `resume_blob` writes the checkpoint's contents into the plan's
initial-contents blob, and either runtime starts from it as from a fresh plan. A new run's initial
weights from a file (`--init-weights`: `load_initial_weights`, `initial_weights_blob`) go in the same
way: only the parameters (masters and working copies), the optimizer and scaler starting fresh.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load, save

from ..engine.plan import Plan, pack_h
from ..engine.state import STATE_FIELDS, decode_state
from ..models.attention_form import plan_attention_form
from ..nn.network import Network
from ..nn.torch_layout import from_torch, looks_like_torch
from .rundir import atomic_write, dumps

CHECKPOINT_FORMAT = "webmp-checkpoint/1"
TENSORS = "checkpoint.safetensors"
META = "checkpoint.json"


# checkpoint.json's copies of the state words (its fields: the words they repeat), checked on load
SCALER_WORDS = (
    "scale",
    "growth_tracker",
    "hysteresis_left",
    "skipped_total",
    "min_scale_events",
    "first_min_scale_iter",
)
META_WORDS = {"step": "iteration", "optimizer_step": "opt_step", "data_pos": "data_pos"}


def state_facts(state: dict[str, float | int]) -> dict:
    """What checkpoint.json repeats of the GPU state words, for a person reading it."""
    return {
        "step": state["iteration"],
        "scaler": {k: state[k] for k in SCALER_WORDS},
        **{key: state[word] for key, word in META_WORDS.items() if key != "step"},
    }


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
    state = decode_state(contents[plan["state"]["buffer"]], plan["state"]["fields"])
    meta = {
        "format": CHECKPOINT_FORMAT,
        **state_facts(state),
        "precision": plan["precision"],
        "f16_path": plan["f16_path"],
        "config": plan["config"],
        **({"attention": form} if (form := plan_attention_form(plan)) else {}),
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
    """A checkpoint's buffers (their bytes) and checkpoint.json, checked (read_checkpoint)."""
    tensors, meta = read_checkpoint(directory)
    return {n: a.tobytes() for n, a in tensors.items()}, meta


def read_checkpoint(directory: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """A checkpoint's tensors and checkpoint.json, checked: its format, the SHA-256 of its bytes and
    the state words against checkpoint.json; ValueError (FileNotFoundError) in one line otherwise."""
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
    state = tensors["state"].tobytes() if "state" in tensors else b""
    check_state_matches_meta(directory, state, meta)
    return tensors, meta


def check_state_matches_meta(directory: Path, raw: bytes, meta: dict) -> None:
    """ValueError when checkpoint.json's step, scaler or data position contradicts the state words
    `raw` (the tensor 'state'; an edited or mismatched checkpoint.json): a resume would start at one
    step with the GPU at another, and cut the run's metrics at the wrong line."""
    fields = STATE_FIELDS[: len(raw) // 4]  # an older checkpoint may hold fewer words (resume_blob)
    have = {name for name, _ in fields}
    if not {*SCALER_WORDS, *META_WORDS.values()} <= have:
        raise ValueError(f"{directory / TENSORS}: damaged: its state words (the tensor 'state') are missing")
    words = decode_state(raw[: 4 * len(fields)], fields)
    written = state_facts(words)
    clash = [
        f"{key} {meta.get(key)!r} vs {want!r}"
        for key, want in written.items()
        if key != "scaler" and meta.get(key) != want
    ]
    scaler = meta.get("scaler")
    scaler = scaler if isinstance(scaler, dict) else {}
    clash += [
        f"scaler.{k} {scaler.get(k)!r} vs {want!r}"
        for k, want in written["scaler"].items()
        if scaler.get(k) != want
    ]
    if clash:
        raise ValueError(
            f"{directory / META}: damaged: it contradicts the state words in {TENSORS} "
            f"({'; '.join(clash)}; checkpoint.json vs tensors)"
        )


def resume_blob(plan: Plan, blob: bytes, contents: dict[str, bytes]) -> tuple[Plan, bytes]:
    """A copy of (plan, blob) whose initial contents are the checkpoint's buffers."""
    for name in checkpoint_buffers(plan):
        if name not in contents:
            raise ValueError(f"checkpoint lacks buffer {name}; it was written for a different model")
    by_name = {b["name"]: b for b in plan["buffers"]}
    for name in checkpoint_buffers(plan):
        data, want = contents[name], by_name[name]["bytes"]
        if len(data) != want and not (name == plan["state"]["buffer"] and len(data) <= want):
            raise ValueError(
                f"checkpoint buffer {name} has {len(data)} bytes, the plan expects {want} "
                "(different model, batch size or precision)"
            )
    return _with_contents(plan, blob, {n: contents[n] for n in checkpoint_buffers(plan)})


def _with_contents(plan: Plan, blob: bytes, contents: dict[str, bytes]) -> tuple[Plan, bytes]:
    """A copy of (plan, blob) whose named buffers start with these bytes (appended to the blob)."""
    plan = json.loads(json.dumps(plan))
    out = bytearray(blob)
    by_name = {b["name"]: b for b in plan["buffers"]}
    for name, data in contents.items():
        by_name[name]["init"] = {"offset": len(out), "bytes": len(data)}
        out += data
        out += b"\0" * (-len(out) % 4)
    plan["blob_bytes"] = len(out)
    return plan, bytes(out)


def load_initial_weights(
    path: str | Path, plan: Plan, net: Network | None = None, names: Mapping[str, str] | None = None
) -> dict[str, np.ndarray]:
    """The plan's parameters from a safetensors file (`--init-weights`), as float32, each checked:
    present, of the parameter's shape, floating point, finite. A tensor that is no parameter is
    refused by name (a misspelt one would otherwise be left at its drawn value), except in a webmp
    checkpoint, whose optimizer state, working copies and GPU state are left out. Given the network
    the model is (`net`; `names`: the model's name of each layer path's parameter, default the
    path) the file may instead hold the state_dict of its equivalent PyTorch Sequential, told by
    its names (`0.weight`, not `layers.0.weight`) and converted to webmp's layouts
    (webmp.nn.torch_layout), each tensor checked under its torch name."""
    path = Path(path)
    what = f"init_weights: {path}"
    if not path.is_file():
        raise ValueError(f"{what}: cannot read it (no such file)")
    try:
        with safe_open(path, framework="numpy") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except Exception as e:  # safetensors raises its own error types (also for bf16, which numpy lacks)
        raise ValueError(f"{what}: not a readable safetensors file of numpy dtypes ({e})") from None
    is_checkpoint = metadata.get("format") == CHECKPOINT_FORMAT
    if net is not None and not is_checkpoint and looks_like_torch(list(tensors)):
        what = f"{what} (a torch state_dict)"
        converted = from_torch(net, tensors, what)  # names and shapes, in torch's layout
        for name, t in tensors.items():
            _float32(what, name, t)
        tensors = {(names or {}).get(path, path): t for path, t in converted.items()}
    shapes = {p["name"]: tuple(p["shape"]) for p in plan["params"]}
    expected = ", ".join(f"{n} {list(s)}" for n, s in shapes.items())
    missing = [n for n in shapes if n not in tensors]
    if missing:
        raise ValueError(f"{what}: lacks {', '.join(missing)}; this model's parameters are: {expected}")
    unknown = sorted(set(tensors) - set(shapes))
    if unknown and not is_checkpoint:
        raise ValueError(
            f"{what}: {', '.join(unknown)} is no parameter of this model; its parameters are: {expected}"
        )
    out = {}
    for name, shape in shapes.items():
        t = tensors[name]
        if t.shape != shape:
            raise ValueError(
                f"{what}: {name} has shape {list(t.shape)}, this model's {name} is {list(shape)} "
                "(weights are stored [in, out]: PyTorch's Linear weight transposed)"
            )
        out[name] = _float32(what, name, t)
    return out


def _float32(what: str, name: str, t: np.ndarray) -> np.ndarray:
    """A floating-point tensor as float32, refused by name when not floating point or not finite."""
    if t.dtype.kind != "f":
        raise ValueError(f"{what}: {name} is {t.dtype}, not floating point")
    with np.errstate(over="ignore"):  # a float64 beyond f32's range: counted below, by name
        w = t.astype(np.float32)
    if not np.isfinite(w).all():
        bad = int((~np.isfinite(w)).sum())
        raise ValueError(f"{what}: {name} holds {bad} non-finite values (as float32)")
    return w


def initial_weights_blob(plan: Plan, blob: bytes, weights: dict[str, np.ndarray]) -> tuple[Plan, bytes]:
    """A copy of (plan, blob) whose parameters start at `weights` (load_initial_weights): each f32
    master and its working copy in the activation format, rounded from it as the drawn ones are."""
    path = plan["f16_path"] or "fp32"
    contents = {}
    for p in plan["params"]:
        w = weights[p["name"]]
        contents[p["master"]] = w.tobytes()
        if p["copy"] is not None:
            contents[p["copy"]] = pack_h(w, path)
    return _with_contents(plan, blob, contents)
