"""scripts/reliability.py --quick (docs/reliability.md's measurements, fewer of them): every bad input
refused cleanly, no 5xx or traceback, concurrent runs exact, the flood closed by the rate limiter,
every kill point survived. About 45 s on a 2-core CPU adapter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_reliability_quick_has_no_failures(tmp_path):
    out, figures = tmp_path / "reliability.md", tmp_path / "reliability.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "reliability.py"), "--quick", "--out", str(out)]
    p = subprocess.run([*cmd, "--json", str(figures)], capture_output=True, text=True, timeout=600)
    R = json.loads(figures.read_text())
    assert R["failures"] == dict.fromkeys(R["failures"], 0), p.stdout + p.stderr[-3000:]
    assert p.returncode == 0, p.stderr[-3000:]
    for kind in ("cli", "ckpt", "http", "ws"):
        cases = R["bad"][kind]
        assert cases and all(c["refused"] for c in cases), kind
    assert R["server_tracebacks"] == 0
    assert R["concurrent"]["runs_exact"] == R["concurrent"]["runs"]
    assert R["flood"]["close_code"] == 4429
    assert R["kills"] and all(k["survived"] for k in R["kills"])
    text = out.read_text()
    for section in ("## a.", "## b.", "## c.", "## d.", "## e."):
        assert section in text
