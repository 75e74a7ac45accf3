"""The tune cache shared by processes (webmp.engine.tune_cache): writes merge under a lock and
replace the file at once; a damaged file is set aside and reported, never fatal."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from webmp.cli import main as cli
from webmp.engine import tune_cache
from webmp.engine.tiles import ROWS_KEY, WEIGHTS_KEY, TileTable, default_tiles
from webmp.engine.tune_cache import TuneCacheWarning, load_cache, update_cache

TILES = {"WG_X": 8, "WG_Y": 4, "TM": 4, "TN": 4, "BK": 8}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "tune" / "tune.json"
    monkeypatch.setenv("WEBMP_TUNE_CACHE", str(path))
    return path


# each writer sets its own classes one at a time, as a tuning pass and a server storing a page's
# choices do, reading and rewriting the whole file each time
WRITER = """
import sys
from webmp.engine.tune_cache import update_cache
who, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    update_cache("adapter A", {f"{who}/{i}": {"WG_X": i}})
    update_cache(f"adapter {who}", {"rows": {"form": "thread"}})
"""


def test_concurrent_passes_keep_both_passes_entries(cache):
    """Two processes writing the same adapter's entry at once, 60 classes each: every class of both
    is in the file at the end (a read-change-write without the lock loses some), and no temp file
    is left behind."""
    n = 60
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, who, str(n)], stderr=subprocess.PIPE, text=True)
        for who in ("p", "q")
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    got = json.loads(cache.read_text())
    want = {f"{who}/{i}": {"WG_X": i} for who in ("p", "q") for i in range(n)}
    assert got["adapter A"] == want
    assert got["adapter p"] == got["adapter q"] == {"rows": {"form": "thread"}}
    assert sorted(f.name for f in cache.parent.iterdir()) == ["tune.json", "tune.json.lock"]


def test_an_update_keeps_what_it_does_not_set(cache):
    update_cache("A", {"fp32/NN/16x16x16": TILES, ROWS_KEY: {"form": "thread"}})
    update_cache("B", {WEIGHTS_KEY: {"form": "transposed"}})
    update_cache("A", {ROWS_KEY: {"form": "workgroup"}})
    assert load_cache() == {
        "A": {"fp32/NN/16x16x16": TILES, ROWS_KEY: {"form": "workgroup"}},
        "B": {WEIGHTS_KEY: {"form": "transposed"}},
    }


def test_a_write_that_fails_leaves_the_old_file(cache, monkeypatch):
    """The file is replaced only once the new one is whole: a write failing midway (here the JSON
    encoder; a kill does the same) leaves the previous cache and no temp file."""
    update_cache("A", {"fp32/NN/16x16x16": TILES})
    before = cache.read_bytes()

    def half_then_fail(obj, f, **kw):
        f.write('{"A": {"fp32')
        raise OSError("disk full")

    monkeypatch.setattr(tune_cache.json, "dump", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        update_cache("A", {"fp32/NN/64x64x64": TILES})
    assert cache.read_bytes() == before
    assert sorted(f.name for f in cache.parent.iterdir()) == ["tune.json", "tune.json.lock"]


DAMAGED = {
    "truncated": ('{"A": {"fp32/NN/16x16x16": {"WG_X": 8, "WG', "not JSON"),
    "not UTF-8": ("\udcff", "not JSON"),
    "a list": ("[1, 2]", "the top level is a list"),
    "adapter a string": ('{"A": "tiles"}', "adapter 'A': a str, not an object of shape classes"),
    "tiles a number": ('{"A": {"fp32/NN/16x16x16": 8}}', "'fp32/NN/16x16x16': a int, not an object"),
    "value a list": ('{"A": {"c": {"WG_X": [8]}}}', "WG_X = [8] is neither an integer nor a name"),
}


@pytest.mark.parametrize("case", DAMAGED)
def test_a_damaged_cache_is_set_aside_and_reported(cache, case):
    """load_cache on a damaged file: {} (the defaults), one TuneCacheWarning naming the file and what
    is wrong, the file renamed beside itself byte for byte; the next write starts a new cache."""
    text, why = DAMAGED[case]
    cache.parent.mkdir(parents=True)
    cache.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.warns(TuneCacheWarning, match=f"tune cache {cache} is damaged: .*set aside as") as said:
        assert load_cache() == {}
    assert why in str(said[0].message)
    aside = [f for f in cache.parent.iterdir() if f.name.startswith("tune.json.damaged-")]
    assert len(aside) == 1 and aside[0].read_bytes() == text.encode("utf-8", "surrogateescape")
    assert not cache.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # set aside once: nothing more to say
        assert TileTable.for_adapter("A").for_shape("fp32", 16, 16, 16) == default_tiles(16, 16, 16)
        update_cache("A", {"fp32/NN/16x16x16": TILES})
        assert load_cache() == {"A": {"fp32/NN/16x16x16": TILES}}


def test_an_entry_this_version_cannot_use_gives_the_defaults_and_is_kept(cache):
    """A form this webmp does not know (a newer one's, or an edit): reported, the defaults used, the
    file left as it is for the version that wrote it."""
    update_cache("A", {WEIGHTS_KEY: {"form": "sideways"}, "fp32/NN/16x16x16": TILES})
    before = cache.read_bytes()
    with pytest.warns(TuneCacheWarning, match=r"for A: .*'weights': form 'sideways' is not one of"):
        table = TileTable.for_adapter("A")
    assert table.weights == "as_stored" and table.by_class == {}
    assert cache.read_bytes() == before


def test_webmp_train_goes_on_past_a_damaged_cache(cache, capsys):
    cache.parent.mkdir(parents=True)
    cache.write_text("{not json")
    out = cache.parent.parent / "run"
    flags = ["--hidden", "16", "--batch-size", "8", "--steps", "3", "--log-every", "1", "--quiet"]
    with pytest.warns(TuneCacheWarning, match="is damaged: not JSON"):
        assert cli(["train", *flags, "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 3
    assert sorted(f.name.split("-")[0] for f in cache.parent.iterdir()) == [
        "tune.json.damaged",
        "tune.json.lock",
    ]
