"""How the package hangs together: no import cycle among webmp's modules (imports inside functions
included), and the parts that do not train stay free of wgpu."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "webmp"


def _module_name(path: Path) -> str:
    """'plan', 'models', 'models.mlp', ... for files under webmp/ ('' for webmp/__init__.py)."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def module_imports() -> dict[str, set[str]]:
    """{module: webmp modules it imports anywhere in its source}, from the syntax tree."""
    files = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
                targets = [mod] + [f"{mod}.{a.name}".strip(".") for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("webmp"):
                mod = node.module.removeprefix("webmp").strip(".")
                targets = [mod] + [f"{mod}.{a.name}".strip(".") for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [
                    a.name.removeprefix("webmp").strip(".") for a in node.names if a.name.startswith("webmp")
                ]
            deps.update(t for t in targets if t in files)
        graph[name] = deps - {name, ""}  # webmp/__init__.py only holds the version
    return graph


def test_no_import_cycle():
    graph = module_imports()
    assert {"plan", "runtime", "server", "page_runs", "state", "tilecache", "ops", "models.mlp"} <= set(graph)
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as e:
        pytest.fail(f"import cycle in webmp: {' -> '.join(e.args[1])}")
    assert order.index("plan") < order.index("runtime") < order.index("train")


def test_leaf_modules_import_nothing_from_webmp():
    graph = module_imports()
    for leaf in ("state", "tilecache", "resources"):
        assert graph[leaf] == set(), f"{leaf} imports {graph[leaf]}"


@pytest.mark.parametrize(
    "module", ["webmp.server", "webmp.checkpoint", "webmp.page_runs", "webmp.cli", "webmp.sample_plan"]
)
def test_serving_and_checkpoints_do_not_load_wgpu(module):
    code = f"import sys, {module}; print('wgpu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", f"importing {module} loads wgpu"


def test_files_make_check_skips_are_all_slow():
    """`make check` does not collect the Makefile's ALL_SLOW files (their imports cost seconds):
    each must mark every test slow at module level, or a fast test there would never run in it."""
    makefile = (ROOT / "Makefile").read_text()
    names = re.search(r"^ALL_SLOW = (.+)$", makefile, re.M).group(1).split()
    assert names
    for name in names:
        assert "pytestmark = pytest.mark.slow" in (ROOT / name).read_text(), name
