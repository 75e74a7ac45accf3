"""Test tiers, set once per folder: each folder's conftest.py says which marks all its tests carry and
which of its files are slow throughout (`Tier`). `make check` runs `-m "not slow and not browser"`;
a file slow throughout is then not even collected (importing hypothesis, schemathesis or torch
costs each process seconds), so a fast test there would never run in the fast tier."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest


class Tier:
    def __init__(self, conftest: str, marks: Sequence[str] = (), slow_files: Sequence[str] = ()):
        self.folder = Path(conftest).resolve().parent
        self.marks = tuple(marks)
        self.slow_files = frozenset(slow_files)
        missing = sorted(f for f in self.slow_files if not (self.folder / f).is_file())
        if missing:
            raise FileNotFoundError(f"{self.folder}: the tier names files that are not there: {missing}")

    def mark(self, items: list[pytest.Item]) -> None:
        """pytest_collection_modifyitems: the folder's marks on its tests, `slow` on its slow files'."""
        for item in items:
            if item.path.parent != self.folder:
                continue
            for name in self.marks:
                item.add_marker(getattr(pytest.mark, name))
            if item.path.name in self.slow_files:
                item.add_marker(pytest.mark.slow)

    def ignore(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """pytest_ignore_collect: the slow files are not collected when the run deselects slow tests."""
        if collection_path.name in self.slow_files and "not slow" in (config.option.markexpr or ""):
            return True
        return None
