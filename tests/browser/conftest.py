"""The page in a real headless Chromium (Playwright): every test here is a browser test.

Each test runs with Debian's Chromium (WebGPU through SwiftShader: no shader-f16, so the plan uses
emulated f16) and, when $WEBGPU_CHROME is set (`. /opt/webgpu-cpu/env.sh`), also with the lavapipe
launcher, whose adapter has shader-f16 (native f16). Assertions are on what the server recorded.
SwiftShader is slow (about half a second per step of the default model on 2 cores), so only the
end-to-end run (test_browser_e2e.py) uses the default model; the reliability tests use a small one
(browser_helpers.SMALL), the GPT's tests a tiny GPT. Each file gets its own browser and server.
"""

import pytest
from browser_helpers import BROWSERS
from tiers import Tier

from webmp.serve.client import Browser, LocalServer

tier = Tier(__file__, marks=["browser"])
pytest_collection_modifyitems, pytest_ignore_collect = tier.mark, tier.ignore


@pytest.fixture(scope="module", params=list(BROWSERS))
def browser(request):
    exe, path = BROWSERS[request.param]
    with Browser(exe) as b:
        b.kind, b.f16_path = request.param, path
        yield b


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("runs")) as srv:
        yield srv
