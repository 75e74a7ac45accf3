"""Where the package's non-Python files are: the WGSL kernels, the browser page and its chart library.

Two layouts hold them. In a source checkout (and an editable install, which runs the checkout's
files) they are at the top of the repository, next to the package: shaders/, web/ and
web/node_modules/uplot/dist (put there by `npm ci --prefix web`). An installed wheel carries the
same trees inside the package, as webmp/shaders and webmp/web (pyproject.toml maps them there).

A leaf module: it imports nothing from webmp, so anything may import it.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    """`name` inside the installed package when it is there, else at the top of the source checkout."""
    installed = PACKAGE_DIR / name
    return installed if installed.is_dir() else PACKAGE_DIR.parent / name


SHADER_DIR: Path = _data_dir("shaders")
WEB_DIR: Path = _data_dir("web")
UPLOT_DIR: Path = WEB_DIR / "node_modules" / "uplot" / "dist"  # may be missing: the page then draws no charts
