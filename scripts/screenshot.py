"""Makes docs/lab.png, the README's picture of the page: two short runs of the digits MLP trained in
a headless Chromium (mixed precision with loss scaling from 2^32, and fp32), the second tab's
result with its charts and gradient-range lens, and both runs (named) compared.

    python scripts/screenshot.py [OUT.png]

Uses $WEBGPU_CHROME when set (`. scripts/env.sh`), else Debian's Chromium."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from webmp.config import TrainConfig
from webmp.serve.client import Browser, LocalServer

ROOT = Path(__file__).resolve().parent.parent


def main(out: Path) -> None:
    common = dict(steps=300, log_every=10, checkpoint_every=0, growth_interval=20)
    mixed = TrainConfig(**common, precision="mixed", init_scale=2.0**32)
    fp32 = TrainConfig(**common, precision="fp32")
    with tempfile.TemporaryDirectory() as runs, LocalServer(runs) as srv, Browser() as browser:
        first = srv.create_run(fp32)
        srv.http.post(f"/api/runs/{first.id}/label", json={"name": "fp32 reference"})
        page = browser.open(first.page_url)
        page.wait_for_function("window.webmp.status === 'finished'", timeout=900_000, polling=500)
        second = srv.create_run(mixed)
        label = {"name": "mixed from 2^32", "note": "the scale backs off from 2^32"}
        srv.http.post(f"/api/runs/{second.id}/label", json=label)
        page.goto(second.page_url)
        page.wait_for_function("window.webmp.status === 'finished'", timeout=900_000, polling=500)
        page.set_viewport_size({"width": 1280, "height": 1000})
        page.wait_for_function("document.querySelectorAll('#runs-body tr').length >= 2", timeout=30_000)
        for box in page.locator("#runs-body input.choose").all():
            box.check()
        page.click("#compare-go")
        page.wait_for_function("!document.getElementById('compare').hidden", timeout=30_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(out), full_page=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "lab.png")
