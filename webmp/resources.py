"""Where the package's non-Python files are: the WGSL kernels, the browser page and its chart library.

Two layouts hold them. In a source checkout (and an editable install, which runs the checkout's
files) they are at the top of the repository, next to the package: shaders/, web/ and
web/node_modules/uplot/dist (put there by `npm ci --prefix web`). An installed wheel carries the
same trees inside the package, as webmp/shaders and webmp/web (pyproject.toml maps them there).

The kernels sit in one folder per family (shaders/matmuls/, shaders/rows/, ...: webmp.ops's
modules), but plans, the runtimes and the page name a kernel file by its file name alone
("matmul_fwd.wgsl"): `shader_path` finds it, through an index of every shaders/**/*.wgsl by
name (each name once).

A leaf module: it imports nothing from webmp, so anything may import it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    """`name` inside the installed package when it is there, else at the top of the source checkout."""
    installed = PACKAGE_DIR / name
    return installed if installed.is_dir() else PACKAGE_DIR.parent / name


SHADER_DIR: Path = _data_dir("shaders")
WEB_DIR: Path = _data_dir("web")
UPLOT_DIR: Path = WEB_DIR / "node_modules" / "uplot" / "dist"  # may be missing: the page then draws no charts


@cache
def shader_files() -> dict[str, Path]:
    """Every kernel file under SHADER_DIR by its file name (ValueError naming a name two files have)."""
    found: dict[str, Path] = {}
    for path in sorted(SHADER_DIR.rglob("*.wgsl")):
        if path.name in found:
            raise ValueError(f"shader {path.name!r} is both {found[path.name]} and {path} (names are unique)")
        found[path.name] = path
    return found


def shader_path(name: str) -> Path:
    """The file of the kernel source a plan names, e.g. "matmul_fwd.wgsl" (FileNotFoundError if none)."""
    path = shader_files().get(name)
    if path is None:
        raise FileNotFoundError(f"no shader {name!r} under {SHADER_DIR}")
    return path
