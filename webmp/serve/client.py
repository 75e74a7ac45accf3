"""Python API for browser runs: the page trains, Python creates the run and follows it.

    from webmp.serve.client import LocalServer
    with LocalServer("runs") as server:                       # or Client("http://127.0.0.1:8000")
        run = server.create_run(TrainConfig(steps=300), launch=True)   # headless Chromium opens the page
        for record in run.history():                          # records as the page sends them
            print(record["step"], record["loss"], record["scale"])
        print(run.wait()["test_accuracy"])                    # the summary, evaluated in the browser

`launch=True` uses Playwright (pip) with a local Chromium: $WEBGPU_CHROME when set (a launcher
whose WebGPU adapter has shader-f16, see shared/tools/webgpu-cpu), else Debian's /usr/bin/chromium
(WebGPU through SwiftShader, no shader-f16, so f16 is emulated). Playwright's own browser downloads
are not used. Playwright's sync API must be used from one thread (the one that launched).
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from ..config import TrainConfig
from .messages import from_json_safe

DEFAULT_CHROME = "/usr/bin/chromium"
CHROME_ARGS = ["--headless=new", "--no-sandbox", "--enable-unsafe-webgpu", "--use-angle=vulkan"]
FOLLOWED = ("created", "running")  # statuses in which more records may still come


class BrowserRunError(RuntimeError):
    """The run ended without a summary (failed, stopped or disconnected)."""


def chrome_command(executable: str | None = None) -> tuple[str, list[str]]:
    """(executable, args) for a headless Chromium with WebGPU."""
    if executable is None and os.environ.get("WEBGPU_CHROME"):
        return os.environ["WEBGPU_CHROME"], ["--headless=new"]  # the launcher adds the other flags
    exe = executable or DEFAULT_CHROME
    if not os.access(exe, os.X_OK):
        raise FileNotFoundError(
            f"no Chromium at {exe}: install Debian's chromium (apt-get install chromium) or set WEBGPU_CHROME"
        )
    return exe, list(CHROME_ARGS)


@functools.cache
def _playwright_instance():
    """One Playwright per process (its sync API cannot be started twice in a thread)."""
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    atexit.register(playwright.stop)
    return playwright


class Browser:
    """A headless Chromium with WebGPU; each run it opens is a tab (a Playwright page)."""

    def __init__(self, executable: str | None = None):
        exe, args = chrome_command(executable)
        self.executable = exe
        self.browser = _playwright_instance().chromium.launch(executable_path=exe, args=args, timeout=90_000)
        self.console: list[str] = []

    def open(self, url: str):
        page = self.browser.new_page(viewport={"width": 1100, "height": 1000})
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        page.goto(url)
        return page

    def close(self) -> None:
        self.browser.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class BrowserRun:
    """A run on the server, trained by a page; `page` is set when this process opened one."""

    def __init__(self, client: Client, run_id: str):
        self.client = client
        self.id = run_id
        self.page = None

    def info(self) -> dict:
        return self.client.get(f"/api/runs/{self.id}")

    @property
    def status(self) -> str:
        return self.info()["status"]

    @property
    def page_url(self) -> str:
        return self.client.page_url(self.id)

    def open_page(self, browser: Browser | None = None, timeout: float = 300):
        """Open the run's page in `browser` (default: the client's own headless Chromium). A page
        starts (or resumes) a created or disconnected run: this returns once it has (status
        running, or already over)."""
        before = self.status
        self.page = (browser or self.client.browser()).open(self.page_url)
        deadline = time.monotonic() + timeout
        while before in ("created", "disconnected") and self.status == before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the page did not start run {self.id} within {timeout} s")
            time.sleep(0.1)
        return self.page

    def close_page(self) -> None:
        if self.page is not None:
            self.page.close()
            self.page = None

    def screenshot(self, path: str | Path) -> Path:
        if self.page is None:
            raise RuntimeError("no page is open for this run: call open_page() first")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=True)
        return Path(path)

    def records(self, after: int = -1) -> list[dict]:
        return [
            from_json_safe(r)
            for r in self.client.get(f"/api/runs/{self.id}/metrics", params={"after": after})["records"]
        ]

    def history(self, after: int = -1, timeout: float | None = None, poll: float = 10.0) -> Iterator[dict]:
        """Yield each record with step > after as it arrives, until the run stops producing them
        (finished, failed, stopped or disconnected). TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
            got = self.client.get(f"/api/runs/{self.id}/metrics", params={"after": after, "wait": wait})
            for rec in got["records"]:
                after = rec["step"]
                yield from_json_safe(rec)
            if not got["records"] and got["status"] not in FOLLOWED:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"run {self.id} still {got['status']} after {timeout} s (last step {after})"
                )

    def wait(self, timeout: float | None = None) -> dict:
        """Wait for the run to end; the summary, or BrowserRunError if it ended without one."""
        for _ in self.history(after=1 << 40, timeout=timeout):
            pass
        info = self.info()
        if info["status"] != "finished":
            raise BrowserRunError(f"run {self.id} is {info['status']}: {info['message']}")
        return self.summary()

    def summary(self) -> dict:
        return from_json_safe(self.client.get(f"/api/runs/{self.id}/summary"))


class Client:
    """REST client of a `webmp serve` server."""

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None):
        self.url = url.rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(30, read=120))
        self._browser: Browser | None = None

    def get(self, path: str, **kw):
        return self._check(self.http.get(path, **kw))

    @staticmethod
    def _check(r: httpx.Response):
        if r.is_error:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text
            raise RuntimeError(f"{r.request.method} {r.request.url.path}: {r.status_code} {detail}")
        return r.json()

    def page_url(self, run_id: str) -> str:
        return f"{self.url}/?run={run_id}" + (f"&token={self.token}" if self.token else "")

    def runs(self) -> list[dict]:
        return self.get("/api/runs")

    def run(self, run_id: str) -> BrowserRun:
        self.get(f"/api/runs/{run_id}")
        return BrowserRun(self, run_id)

    def create_run(
        self,
        config: TrainConfig | dict | None = None,
        launch: bool = False,
        browser: Browser | None = None,
        **overrides,
    ) -> BrowserRun:
        """A new run with `config` (+ overrides); with launch (or a browser), its page is opened."""
        cfg = config.model_dump() if isinstance(config, TrainConfig) else dict(config or {})
        cfg = TrainConfig(**{**cfg, **overrides}).model_dump()  # fail here, with the field's name
        run = BrowserRun(self, self._check(self.http.post("/api/runs", json=cfg))["id"])
        if launch or browser is not None:
            run.open_page(browser)
        return run

    def browser(self) -> Browser:
        if self._browser is None:
            self._browser = Browser()
        return self._browser

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
            self._browser = None
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LocalServer(Client):
    """A `webmp serve` server in a background thread of this process (127.0.0.1, a free port)."""

    def __init__(
        self, runs: str | Path = "runs", token: str | None = None, host: str = "127.0.0.1", port: int = 0
    ):
        from .app import create_app
        from .cli import bind_socket, make_server
        from .security import LOOPBACK_NAMES, host_name

        self.app = create_app(runs, token, LOOPBACK_NAMES | {host_name(host)})
        sock = bind_socket(host, port)
        self.server = make_server(self.app)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True, name="webmp-server"
        )
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the local webmp server did not start")
            time.sleep(0.02)
        super().__init__(f"http://{host}:{sock.getsockname()[1]}", token)

    def close(self) -> None:
        super().close()
        self.server.should_exit = True
        self.thread.join(timeout=10)
