"""How the package hangs together: no import cycle among webmp's modules (imports inside functions
included), and the parts that do not train stay free of wgpu."""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
    assert {"engine.plan", "engine.runtime", "serve.app", "engine.state", "ops", "models.mlp"} <= set(graph)
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as e:
        pytest.fail(f"import cycle in webmp: {' -> '.join(e.args[1])}")
    assert order.index("engine.plan") < order.index("engine.runtime") < order.index("train.loop")


def test_leaf_modules_import_nothing_from_webmp():
    graph = module_imports()
    for leaf in ("engine.state", "engine.tiles", "resources"):
        assert graph[leaf] == set(), f"{leaf} imports {graph[leaf]}"


@pytest.mark.parametrize(
    "module",
    ["webmp.serve.app", "webmp.train.checkpoint", "webmp.serve.runs", "webmp.cli", "webmp.sample.job"],
)
def test_serving_and_checkpoints_do_not_load_wgpu(module):
    code = f"import sys, {module}; print('wgpu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", f"importing {module} loads wgpu"


def _collected(*args: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:schemathesis", *args, "tests"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return {line for line in out.stdout.splitlines() if "::" in line}


def test_tiers_are_set_by_folder():
    """tests/tiers.py: the fast tier (`make check`'s marks) collects nothing from the browser folder
    nor from a file slow throughout, and collects everything else that is unmarked; `-m slow` gets
    every test of those files; `-m browser` exactly the browser folder's."""
    fast = _collected("-m", "not slow and not browser")
    slow_files = {"serve/test_api_fuzz.py", "kernels/test_properties.py", "models/test_torch_parity.py",
                  "train/test_mpi.py", "train/test_reliability.py"}  # fmt: skip
    assert fast and not {t for t in fast if t.startswith("tests/browser/")}
    assert not {t for t in fast if t.split("::")[0].removeprefix("tests/") in slow_files}
    slow = _collected("-m", "slow")
    assert {t.split("::")[0].removeprefix("tests/") for t in slow} >= slow_files
    browser = _collected("-m", "browser")
    assert browser and all(t.startswith("tests/browser/") for t in browser)
