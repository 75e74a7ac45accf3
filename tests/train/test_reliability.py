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
    c = R["tune_cache"]
    assert c["writers"]["entries_kept"] == c["writers"]["processes"] * c["writers"]["updates_each"]
    assert c["passes"]["classes_kept"] == c["passes"]["passes"] == 2
    assert c["kills"]["file_whole_after"] == c["kills"]["killed"]
    assert c["damaged"]["exit"] == 0 and c["damaged"]["set_aside"] == 1 and c["damaged"]["trained"]
    assert any("step edited" in case["case"] for case in R["bad"]["ckpt"])
    text = out.read_text()
    for section in ("## a.", "## b.", "## c.", "## d.", "## e.", "## f."):
        assert section in text
