"""Build hook only; the project's metadata is in pyproject.toml.

A wheel carries the page (web/) and its chart library (web/node_modules/uplot/dist, installed by
`npm ci --prefix web`) as package data. Without the library the page loads but draws no charts, and
pip hides a build's warnings: when it is missing the build runs `npm ci --prefix web` (the version
pinned by web/package-lock.json) if npm is on the PATH, and otherwise fails unless
WEBMP_ALLOW_NO_UPLOT=1.
Editable installs are not checked: they serve web/ from the checkout, and `webmp serve` warns there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

UPLOT_FILES = ("uPlot.esm.js", "uPlot.min.css")  # what web/index.html and web/charts.js load (/vendor/uplot/)


class BuildPy(build_py):
    def run(self) -> None:
        if not getattr(self, "editable_mode", False):
            dist = Path(self.get_package_dir("webmp.web")) / "node_modules" / "uplot" / "dist"
            missing = [f for f in UPLOT_FILES if not (dist / f).is_file()]
            web = dist.parent.parent.parent
            if missing and shutil.which("npm") and (web / "package-lock.json").is_file():
                print("webmp: fetching the page's chart library: npm ci --prefix web", flush=True)
                subprocess.run(
                    ["npm", "ci", "--prefix", str(web), "--no-audit", "--no-fund", "--loglevel=error"],
                    check=True,
                )
                missing = [f for f in UPLOT_FILES if not (dist / f).is_file()]
            if missing:
                msg = (
                    f"webmp: the page's chart library is missing ({', '.join(missing)} in {dist}); "
                    "run `npm ci --prefix web` before building a wheel"
                )
                if os.environ.get("WEBMP_ALLOW_NO_UPLOT") != "1":
                    raise SystemExit(
                        f"error: {msg} (or set WEBMP_ALLOW_NO_UPLOT=1 to build one whose "
                        "page draws no charts)"
                    )
                print(
                    f"\n{'!' * 100}\nWARNING: {msg}.\nWEBMP_ALLOW_NO_UPLOT=1: building a wheel whose "
                    f"page draws no charts.\n{'!' * 100}\n",
                    flush=True,
                )
        super().run()


setup(cmdclass={"build_py": BuildPy})
