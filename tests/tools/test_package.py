"""The wheel is a working package: built from the sources, installed into a fresh venv and run from a
directory outside the repository, it trains (shaders inside the package) and serves the page with
its chart library (web/ inside the package).

Marked slow (about 20 s: a wheel build in pip's isolated build environment, a venv, a short training
run); `-m "not slow"` leaves it out. Needs what the build needs: setuptools from the package index
(or pip's cache) and the chart library (`npm ci --prefix web`).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UPLOT = ROOT / "web" / "node_modules" / "uplot"


def _env() -> dict[str, str]:
    """This environment without anything that points Python at the source tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (
        f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out


def _copy_sources(dst: Path) -> None:
    """What a build reads, copied so that the build leaves nothing (build/, *.egg-info) in the checkout."""
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, dst / name)
    skip = shutil.ignore_patterns("__pycache__", "node_modules", "*.pyc")
    for name in ("webmp", "shaders", "web"):
        shutil.copytree(ROOT / name, dst / name, ignore=skip)
    if UPLOT.is_dir():  # web/node_modules may be a symlink: copy what it points to
        shutil.copytree(UPLOT, dst / "web" / "node_modules" / "uplot")


def _get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_repository(tmp_path: Path) -> None:
    assert (UPLOT / "dist" / "uPlot.esm.js").is_file(), (
        "the chart library is missing: run `npm ci --prefix web`"
    )
    src, dist, work = tmp_path / "src", tmp_path / "dist", tmp_path / "elsewhere"
    for d in (src, dist, work):
        d.mkdir()
    _copy_sources(src)

    # the wheel, and what it carries
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(dist),
            str(src),
        ],
        cwd=work,
        timeout=300,
    )
    (wheel,) = dist.glob("webmp-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shaders = sorted((ROOT / "shaders").rglob("*.wgsl"))  # a folder per kernel family
    assert shaders
    expected = {f"webmp/{p.relative_to(ROOT).as_posix()}" for p in shaders}
    web = (".html", ".js", ".css", ".svg")
    expected |= {f"webmp/web/{p.name}" for p in (ROOT / "web").iterdir() if p.suffix in web}
    expected |= {f"webmp/web/node_modules/uplot/dist/{f}" for f in ("uPlot.esm.js", "uPlot.min.css")}
    # every module of the package, subpackages included
    expected |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "webmp").rglob("*.py")}
    assert expected <= names, sorted(expected - names)

    # a fresh venv; it sees the system's dependencies, but webmp must come from the wheel
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], cwd=work, timeout=120)
    py, webmp_exe = venv / "bin" / "python", venv / "bin" / "webmp"
    _run(
        [str(py), "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q", str(wheel)],
        cwd=work,
        timeout=300,
    )
    probe = (
        "import json, sysconfig, webmp, webmp.resources as r; print(json.dumps([webmp.__file__, "
        "sysconfig.get_paths()['purelib'], str(r.SHADER_DIR), str(r.UPLOT_DIR)]))"
    )
    where = _run([str(py), "-c", probe], cwd=work, timeout=60)
    module, purelib, shader_dir, uplot_dir = json.loads(where.stdout)
    site = Path(purelib).resolve()
    for p in (module, shader_dir, uplot_dir):
        assert Path(p).resolve().is_relative_to(site), f"{p} is not in the venv's site-packages {site}"
    assert not Path(module).resolve().is_relative_to(ROOT)

    # train from a directory that is not the repository
    _run(
        [str(webmp_exe), "train", "--steps", "30", "--quiet", "--out", str(tmp_path / "run")],
        cwd=work,
        timeout=600,
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert isinstance(summary["test_accuracy"], (int, float)) and 0 <= summary["test_accuracy"] <= 1, summary

    # serve the page: --port 0 binds a free port, and the server prints the URL with the port it got
    proc = subprocess.Popen(
        [str(webmp_exe), "serve", "--port", "0", "--runs", str(tmp_path / "runs")],
        cwd=work,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None else "")
        port = int(m.group(1))
        status, page = _get(port, "/")
        assert status == 200
        html = page.decode()
        assets = set(re.findall(r'(?:src|href)="(/[^"]+)"', html))
        modules = ["/app.js"]  # the page's ES modules, followed through their imports from app.js
        for path in modules:
            status, body = _get(port, path)
            assert status == 200, path
            js = body.decode()
            imports = {"/" + m for m in re.findall(r"from '\./([^']+)'", js)}  # runner.js, form.js, ...
            modules += sorted(imports - set(modules))
            assets |= set(re.findall(r"import\('(/[^']+)'\)", js))  # the chart library (charts.js)
        assets |= set(modules)
        page_needs = {"/app.js", "/runner.js", "/vendor/uplot/uPlot.esm.js", "/vendor/uplot/uPlot.min.css"}
        assert page_needs <= assets, assets
        for path in sorted(assets) + ["/shaders/prelude_native.wgsl"]:
            status, body = _get(port, path)
            assert status == 200 and body, path
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "uplot is missing" not in proc.stderr.read()
