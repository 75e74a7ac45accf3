"""The static files: the page, the kernels, the chart library and the favicon, and paths that
try to leave them (raw request paths against a live server)."""

from __future__ import annotations

import http.client

import pytest

from webmp.resources import UPLOT_DIR
from webmp.serve.client import LocalServer


def test_serves_page_shaders_and_local_chart_library(client):
    page = client.get("/")
    assert page.status_code == 200 and '<script type="module" src="/app.js">' in page.text
    assert "export class Runner" in client.get("/runner.js").text
    assert "@group(0)" in client.get("/shaders/scaler.wgsl").text
    assert UPLOT_DIR.is_dir(), "the chart library is missing: run `npm ci --prefix web`"
    lib = client.get("/vendor/uplot/uPlot.esm.js")
    assert lib.status_code == 200 and "uPlot" in lib.text
    assert "cdn" not in page.text.lower() and "https://" not in page.text


def test_every_kernel_file_in_one_answer(client):
    """/shaders.json (what the page's runner fetches, once): each kernel file by its name, the same
    text as /shaders/<name>, and nothing but kernel files."""
    from webmp.resources import shader_files

    got = client.get("/shaders.json")
    assert got.status_code == 200 and got.headers["content-type"].startswith("application/json")
    texts = got.json()
    assert set(texts) == set(shader_files()) and all(name.endswith(".wgsl") for name in texts)
    for name in ("scaler.wgsl", "matmul_a_raw.wgsl", "prelude_native.wgsl"):
        assert texts[name] == client.get(f"/shaders/{name}").text


def test_favicon_is_served_and_linked(client):
    """Browsers ask for /favicon.ico (a 404 in every server log otherwise); the page links the SVG."""
    for path in ("/favicon.ico", "/favicon.svg"):
        icon = client.get(path)
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml"), path
        assert icon.content.startswith(b"<svg"), path
    assert '<link rel="icon" href="/favicon.svg"' in client.get("/").text


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("runs")) as srv:
        yield srv


ESCAPES = [
    "/../pyproject.toml",
    "/shaders/../pyproject.toml",
    "/shaders/../webmp/serve/app.py",
    "/shaders/../../etc/passwd",
    "/shaders/%2e%2e/pyproject.toml",
    "/%2e%2e/pyproject.toml",
    "/shaders/%2e%2e%2fpyproject.toml",
    "/shaders/..%2f..%2fetc%2fpasswd",
    "/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/shaders//etc/passwd",
    "/shaders/%2fetc%2fpasswd",
    "//etc/passwd",
    "/vendor/uplot/../../../../pyproject.toml",
    "/vendor/uplot/%2e%2e/%2e%2e/%2e%2e/%2e%2e/pyproject.toml",
    "/shaders/.%2e/.%2e/etc/passwd",
    "/shaders/%252e%252e/pyproject.toml",
    "/..\\pyproject.toml",
    "/shaders/..%5cpyproject.toml",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_static_files_cannot_escape(live_server, path):
    """Raw request paths (http.client sends them untouched, unlike browsers and httpx)."""
    host, port = live_server.url.removeprefix("http://").split(":")

    def get(p):
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", p)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")

    assert get("/shaders/common.wgsl")[0] == 200  # the same client does fetch what is allowed
    status, body = get(path)
    assert status in (400, 404), (path, status, body[:200])
    for secret in ("[build-system]", "root:x:0", "def create_app"):
        assert secret not in body
