"""How the package hangs together: its folders are layers, each importing only the folders below it
(imports inside functions included), with no import cycle among its modules; the parts that do not
train stay free of wgpu; the test tiers are set by folder."""

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


# The package's layers, lowest first (docs/architecture.md draws them): a folder (or top-level
# module) may import its own modules and those of ALLOWED[folder], all of them in lower layers.
LAYERS = [
    ("resources", "nn", "presets"),
    ("config",),
    ("engine", "data"),
    ("ops",),
    ("models",),
    ("train", "tune", "testing"),
    ("sample",),
    ("serve",),
    ("bench",),
    ("cli",),
    ("__main__",),
]
ALLOWED = {
    "resources": set(),
    "nn": set(),
    "config": {"nn"},
    "presets": set(),
    "engine": {"resources"},
    "data": {"config"},
    "ops": {"engine"},
    "models": {"config", "data", "engine", "nn", "ops"},
    "train": {"config", "data", "engine", "models", "nn", "presets"},
    "tune": {"config", "data", "engine", "models", "ops"},
    "testing": {"config", "data", "engine", "models", "nn", "ops"},
    "sample": {"config", "data", "engine", "models", "train"},
    "serve": {"config", "data", "engine", "models", "nn", "presets", "resources", "sample", "train", "tune"},
    "bench": {"config", "data", "engine", "models", "ops", "presets", "sample", "serve", "train", "tune"},
    "cli": {"bench", "config", "nn", "presets", "sample", "serve", "train", "tune"},
    "__main__": {"cli"},
}


def _folder(module: str) -> str:
    return module.split(".")[0]


def test_the_layers_table_points_down():
    layer = {name: i for i, names in enumerate(LAYERS) for name in names}
    assert set(layer) == set(ALLOWED)
    for folder, allowed in ALLOWED.items():
        upward = {a for a in allowed if layer[a] >= layer[folder]}
        assert not upward, f"{folder} may import {upward}, which are not below it"


def test_every_folder_imports_only_the_layers_below_it():
    graph = {m: deps for m, deps in module_imports().items() if m}  # webmp/__init__.py: the version
    folders = {_folder(m) for m in graph}
    assert folders == set(ALLOWED), f"folders without a layer: {folders - set(ALLOWED)}"
    wrong = sorted(
        f"{module} imports {dep}"
        for module, deps in graph.items()
        for dep in deps
        if _folder(dep) != _folder(module) and _folder(dep) not in ALLOWED[_folder(module)]
    )
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


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
    for leaf in ("engine.state", "engine.tune_cache", "engine.adapters", "resources"):
        assert graph[leaf] == set(), f"{leaf} imports {graph[leaf]}"
    assert graph["engine.tiles"] == {"engine.tune_cache", "engine.adapters", "engine.subgroups"}
    assert graph["engine.subgroups"] == {"engine.adapters", "engine.wgsl"}


@pytest.mark.parametrize(
    "module",
    [
        "webmp.serve.app",
        "webmp.train.checkpoint",
        "webmp.train.export",
        "webmp.serve.runs",
        "webmp.cli",
        "webmp.sample.job",
    ],
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


@pytest.mark.slow  # three collections of the whole suite: ~15 s
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
    # each of conftest.py's SLOW_CASES names a test, which the fast tier then leaves out
    from tests.conftest import SLOW_CASES

    assert all(any(t.startswith(c) for t in slow) for c in SLOW_CASES), SLOW_CASES
    assert not [t for t in fast if t.startswith(SLOW_CASES)]


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 80


def test_modules_and_functions_fit_in_a_head():
    """No module over 600 lines, no function over 80 (the models' plans included: classes by phase)."""
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{rel}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long.append(f"{rel}:{node.lineno} {node.name}: {lines} lines")
    assert not too_long, "\n".join(too_long)


def test_a_tier_marks_its_folder_and_skips_its_slow_files_in_the_fast_tier(tmp_path):
    """tests/tiers.py on a folder of its own: its marks go on its tests only, `slow` on its slow
    files' tests; its slow files are not collected when the run deselects slow tests, and a tier
    naming a file that is not there is refused."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from tiers import Tier
    finally:
        sys.path.remove(str(ROOT / "tests"))
    (tmp_path / "conftest.py").write_text("")
    (tmp_path / "test_fast.py").write_text("")
    (tmp_path / "test_slow.py").write_text("")
    tier = Tier(str(tmp_path / "conftest.py"), marks=["browser"], slow_files=["test_slow.py"])

    class Item:
        def __init__(self, path):
            self.path, self.marks = path, []

        def add_marker(self, mark):
            self.marks.append(mark.name)

    items = [Item(tmp_path / "test_fast.py"), Item(tmp_path / "test_slow.py"), Item(ROOT / "elsewhere.py")]
    tier.mark(items)
    assert [i.marks for i in items] == [["browser"], ["browser", "slow"], []]

    class Config:
        class option:
            markexpr = "not slow and not browser"

    assert tier.ignore(tmp_path / "test_slow.py", Config) is True
    assert tier.ignore(tmp_path / "test_fast.py", Config) is None
    Config.option.markexpr = ""
    assert tier.ignore(tmp_path / "test_slow.py", Config) is None
    with pytest.raises(FileNotFoundError, match="test_gone.py"):
        Tier(str(tmp_path / "conftest.py"), slow_files=["test_gone.py"])
