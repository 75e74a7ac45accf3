"""How the package hangs together: no import cycle among webmp's modules (imports inside functions
included), and the parts that do not train stay free of wgpu."""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "webmp"


def module_imports() -> dict[str, set[str]]:
    """{module: webmp modules it imports anywhere in its source}, from the syntax tree."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        name = path.stem
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:  # from . import x
                    deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("webmp."):
                deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[1] for a in node.names if a.name.startswith("webmp."))
        graph[name] = {d for d in deps if (PACKAGE / f"{d}.py").is_file() and d != "__init__"} - {name}
    return graph


def test_no_import_cycle():
    graph = module_imports()
    assert {"plan", "runtime", "server", "page_runs", "state", "tilecache"} <= set(graph)
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as e:
        pytest.fail(f"import cycle in webmp: {' -> '.join(e.args[1])}")
    assert order.index("plan") < order.index("runtime") < order.index("train")


def test_leaf_modules_import_nothing_from_webmp():
    graph = module_imports()
    for leaf in ("state", "tilecache", "resources"):
        assert graph[leaf] == set(), f"{leaf} imports {graph[leaf]}"


@pytest.mark.parametrize("module", ["webmp.server", "webmp.checkpoint", "webmp.page_runs", "webmp.cli"])
def test_serving_and_checkpoints_do_not_load_wgpu(module):
    code = f"import sys, {module}; print('wgpu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", f"importing {module} loads wgpu"
