"""What a benchmark ran on, for every bench JSON (and so for docs/benchmarks.md, which names it beside
each table): the host (CPU model and clock from /proc/cpuinfo, CPU count, Python and library
versions), the WebGPU adapter (name, driver, backend, features) and webmp (version, commit)."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .. import __version__

CHECKOUT = Path(__file__).resolve().parents[2]  # the repository, when webmp runs from one


def now() -> str:
    """The local time with its UTC offset, to the second (ISO 8601)."""
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def cpu_info(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """The first processor's model name, family and model numbers and clock (MHz) from `cpuinfo`
    (Linux), else what platform knows (None where nothing says); the logical CPU count."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the end of the first processor's block
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    family, model = fields.get("cpu family"), fields.get("model")
    try:
        mhz: float | None = round(float(fields["cpu MHz"]))
    except (KeyError, ValueError):
        mhz = None
    return {
        "cpu_model": fields.get("model name") or platform.processor() or None,
        "cpu_id": f"family {family} model {model}" if family and model else None,
        "cpu_mhz": mhz,
        "cpus": os.cpu_count(),
    }


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def host_info() -> dict:
    import numpy as np

    return {
        "machine": platform.machine(),
        **cpu_info(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "wgpu": _version("wgpu"),
        "torch": _version("torch"),
    }


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(CHECKOUT), *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def webmp_info() -> dict:
    """webmp's version, and the commit of the checkout it runs from (None when installed elsewhere)
    with whether tracked files differ from it."""
    commit = _git("rev-parse", "HEAD") if (CHECKOUT / ".git").exists() else None
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"version": __version__, "commit": commit, "modified": bool(status) if commit else None}


def adapter_info(gpu) -> dict:
    info = gpu.adapter.info
    return {
        "name": gpu.name,
        "device": info.get("device"),
        "driver": info.get("description"),
        "backend": info.get("backend_type"),
        "type": info.get("adapter_type"),
        "vendor": info.get("vendor"),
        "shader_f16": gpu.has_f16,
        "timestamp_query": "timestamp-query" in gpu.device.features,
        "vk_icd": os.environ.get("VK_ICD_FILENAMES"),
    }


def run_info() -> dict:
    """date, host and webmp: what every bench JSON records of where and when it ran."""
    return {"date": now(), "host": host_info(), "webmp": webmp_info()}
