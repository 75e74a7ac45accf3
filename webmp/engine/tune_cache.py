"""The tune cache on disk: JSON at $WEBMP_TUNE_CACHE, default ~/.cache/webmp/tune.json,
{adapter name: {shape class or reserved key: entry}} (webmp.engine.tiles says what the entries are).

Several processes share it: `webmp bench --tune` passes, a server storing its pages' choices, every
run reading it. Readers take no lock: each write replaces the whole file at once (a temp file in
the same folder, flushed, renamed over it), so a reader sees the old file or the new one. Writers
merge under a lock file beside it (`update_cache`): each reads the file as it is now, changes its own
entries and writes, so two passes at once keep both passes' entries. A file that is not a cache
(not JSON, a kill mid-write by an older webmp, an edit gone wrong) is set aside beside it (renamed
`tune.json.damaged-<time>`), reported once, and the run goes on with the default tiles.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

Entry = dict[str, Any]
LOCK_TIMEOUT_S = 120.0  # a writer holds the lock for one read and one write


class TuneCacheWarning(UserWarning):
    """The tune cache was damaged and set aside; the defaults are used for what it held."""


def cache_path() -> Path:
    env = os.environ.get("WEBMP_TUNE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "webmp" / "tune.json"


def _lock(path: Path) -> FileLock:
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S)


def cache_problem(cache: Any) -> str | None:
    """What makes `cache` (parsed JSON) no tune cache, or None: {adapter: {key: {name: value}}}
    with values numbers or strings."""
    if not isinstance(cache, dict):
        return f"the top level is a {type(cache).__name__}, not an object of adapters"
    for adapter, entries in cache.items():
        if not isinstance(entries, dict):
            return f"adapter {adapter!r}: a {type(entries).__name__}, not an object of shape classes"
        for key, entry in entries.items():
            if not isinstance(entry, dict):
                return f"adapter {adapter!r}, {key!r}: a {type(entry).__name__}, not an object"
            for name, value in entry.items():
                if isinstance(value, bool) or not isinstance(value, (int, str)):
                    return (
                        f"adapter {adapter!r}, {key!r}: {name} = {value!r} is neither an integer nor a name"
                    )
    return None


def _read(path: Path) -> tuple[dict[str, dict[str, Entry]], str | None]:
    """(the cache, None), or ({}, why) when the file is damaged; ({}, None) when there is none."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, None
    try:
        cache = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return {}, f"not JSON ({e})"
    problem = cache_problem(cache)
    return ({}, problem) if problem else (cache, None)


def _set_aside(path: Path, why: str) -> None:
    """Renames the damaged file beside itself (kept for a person to look at) and says so."""
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    try:
        path.replace(aside)
        where = f"set aside as {aside}"
    except OSError as e:  # read-only folder: leave it, the defaults still serve
        where = f"left in place (cannot rename it: {e.strerror})"
    warnings.warn(
        f"webmp: the tune cache {path} is damaged: {why}; {where}; the default tiles are used "
        "(`webmp bench --tune` measures them anew)",
        TuneCacheWarning,
        stacklevel=3,
    )


def load_cache() -> dict[str, dict[str, Entry]]:
    """The cache as it is now ({} when there is none). A damaged file is set aside (under the
    writers' lock, read again there: another process may have set it aside or replaced it)."""
    path = cache_path()
    cache, problem = _read(path)
    if problem is None:
        return cache
    with _lock(path):
        cache, problem = _read(path)
        if problem is not None:
            _set_aside(path, problem)
    return cache


def _write(path: Path, cache: Mapping[str, Mapping[str, Entry]]) -> None:
    """The whole file at once: a temp file in the same folder, flushed to disk, renamed over it."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(cache, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def update_cache(adapter: str, entries: Mapping[str, Entry]) -> Path:
    """Sets these entries of the adapter's, keeping everything else the file holds now."""
    path = cache_path()
    with _lock(path):
        cache, problem = _read(path)
        if problem is not None:
            _set_aside(path, problem)
        mine = cache.setdefault(adapter, {})
        mine.update({key: dict(entry) for key, entry in entries.items()})
        _write(path, cache)
    return path
