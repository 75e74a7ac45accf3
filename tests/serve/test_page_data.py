"""A page's own data: PUT /api/data checks a file with `webmp train --data`'s loaders (refused 422 in
their words), stores it in the runs directory under its SHA-256, and a browser run names it by that
hash; no name or path a page sends reaches the server's file system."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest

from tests.serve.helpers import SMALL, create
from webmp.config import TrainConfig
from webmp.data.tables import DataError, load_table
from webmp.data.text import load_text
from webmp.models import build_plan
from webmp.serve import page_data
from webmp.serve.form import DEFAULT_NETWORK
from webmp.serve.page_data import UPLOADS
from webmp.serve.security import MAX_UPLOAD_BYTES
from webmp.serve.store import RunStore


def npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


RNG = np.random.default_rng(0)
TABLE_X, TABLE_Y = RNG.normal(size=(60, 4)), np.arange(60) % 3
ROWS = "".join(",".join(map(str, [*x, y])) + "\n" for x, y in zip(TABLE_X, TABLE_Y, strict=True))
CSV = ("a,b,c,d,label\n" + ROWS).encode()
NPZ = npz_bytes(x=TABLE_X, y=TABLE_Y)
TEXT = ("def f(x):\n    return x * 2  # ünïcode\n" * 200).encode()
GOOD = {"iris.csv": CSV, "iris.npz": NPZ, "notes.txt": TEXT}
TINY_GPT = dict(model="gpt", n_layer=1, d_model=32, n_head=2, context=16, batch_size=4, steps=20, log_every=5,
                val_tokens=256, checkpoint_every=10)  # fmt: skip


def upload(client, name: str, raw: bytes):
    return client.put("/api/data", params={"name": name}, content=raw)


def uploads(client) -> list[str]:
    folder = client.app.state.store.root / UPLOADS
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize("name", list(GOOD))
def test_a_good_file_is_stored_by_its_hash_and_described(client, name):
    raw = GOOD[name]
    r = upload(client, name, raw)
    assert r.status_code == 200, r.text
    sha = hashlib.sha256(raw).hexdigest()
    suffix = name[name.rindex(".") :]
    got = r.json()
    assert got["data"] == f"sha256:{sha}" and got["bytes"] == len(raw) and got["name"] == name
    assert got["format"] == {".csv": "csv", ".npz": "npz", ".txt": "text"}[suffix]
    assert uploads(client) == [sha + suffix]
    assert (client.app.state.store.root / UPLOADS / (sha + suffix)).read_bytes() == raw
    if suffix == ".txt":
        n, vocab = len(TEXT.decode()), len(set(TEXT.decode()))  # 7600 and 20
        train, val = n - n // 10, n // 10
        assert got["description"] == f"{n} characters ({train} train / {val} validation), vocabulary {vocab}"
    else:
        assert got["description"] == "60 rows (48 train / 12 test), 4 features, 3 classes"
    again = upload(client, "another name" + suffix, raw)  # the same bytes: the same file, stored once
    assert again.status_code == 200 and again.json()["data"] == got["data"]
    assert uploads(client) == [sha + suffix]


def test_a_run_trains_on_the_uploaded_table_as_a_native_run_on_the_file(client, tmp_path):
    """The plan of a run on an upload is build_plan's on the same file loaded by load_table (the
    features standardised as `webmp train --data` does), and its config.json records the hash."""
    ref = upload(client, "iris.csv", CSV).json()["data"]
    run = create(client, data=ref)
    assert run["config"]["data"] == ref
    store = client.app.state.store
    config = json.loads((store.get(run["id"]).dir.path / "config.json").read_text())
    assert config["data_sha256"] == ref.removeprefix("sha256:")
    file = tmp_path / "iris.csv"
    file.write_bytes(CSV)
    cfg = TrainConfig(**run["config"])
    plan, blob = build_plan(cfg, load_table(file, cfg.input_scale), "emulated")
    got = client.get(f"/api/runs/{run['id']}/plan", params={"f16": "emulated"}).json()["plan"]
    assert got == json.loads(json.dumps(plan))
    assert client.get(f"/api/runs/{run['id']}/blob", params={"f16": "emulated"}).content == blob
    assert {b["name"]: b["shape"] for b in got["buffers"]}["train_x"] == [48, 4]
    # after a restart the run still finds its data (the hash, not a path, is in its config)
    assert run["id"] in RunStore(store.root).runs


def test_a_gpt_and_a_network_train_on_their_uploads(client, tmp_path):
    ref = upload(client, "notes.txt", TEXT).json()["data"]
    run = create(client, **TINY_GPT, data=ref)
    (tmp_path / "notes.txt").write_bytes(TEXT)
    corpus = load_text(tmp_path / "notes.txt")
    plan = client.get(f"/api/runs/{run['id']}/plan", params={"f16": "emulated"}).json()["plan"]
    tokens = {b["name"]: b for b in plan["buffers"]}["tokens"]
    assert tokens["shape"] == [len(corpus.train)] and plan["config"]["data"] == ref
    # the CNN on the digits uploaded as a file of their own (64 features, 10 classes)
    from sklearn.datasets import load_digits

    digits = load_digits()
    ref = upload(client, "digits.npz", npz_bytes(x=digits.data, y=digits.target)).json()["data"]
    net = create(client, **SMALL, model_spec=DEFAULT_NETWORK, data=ref)
    assert net["config"]["model"] == "net" and net["config"]["data"] == ref


def test_a_token_network_trains_on_uploaded_text_and_has_a_table(client):
    """A network with a token input trains on text: the upload's, whose vocabulary it must have."""
    ref = upload(client, "notes.txt", TEXT).json()["data"]
    vocab = len(set(TEXT.decode()))
    layers = [{"type": "embedding", "dim": 16}, {"type": "linear", "out": vocab}]
    spec = {"input": {"tokens": vocab, "context": 16}, "layers": layers}
    run = create(client, **SMALL, model_spec=spec, data=ref, val_tokens=256)
    plan = client.get(f"/api/runs/{run['id']}/plan", params={"f16": "emulated"}).json()["plan"]
    assert {b["name"]: b["shape"] for b in plan["buffers"]}["tokens"] == [len(TEXT.decode()) * 9 // 10]
    r = client.post("/api/network", json={"model_spec": spec, "data": ref, "batch_size": 4})
    assert r.status_code == 200, r.text
    assert [row["path"] for row in r.json()["rows"]] == ["(input)", "layers.0", "layers.1"]
    wrong = {**spec, "input": {"tokens": vocab + 1, "context": 16}}
    wrong["layers"] = [spec["layers"][0], {"type": "linear", "out": vocab + 1}]
    r = client.post("/api/runs", json={**SMALL, "model_spec": wrong, "data": ref})
    assert r.status_code == 422 and r.json()["detail"].startswith(
        f"invalid model_spec: the network's input has a vocabulary of {vocab + 1} tokens but the text "
    )


def test_a_network_for_other_data_than_the_upload_is_refused(client):
    ref = upload(client, "iris.csv", CSV).json()["data"]
    for path in ("/api/runs", "/api/network"):
        r = client.post(path, json={**SMALL, "model_spec": DEFAULT_NETWORK, "data": ref})
        assert r.status_code == 422 and r.json()["detail"] == (
            "invalid model_spec: the network takes input [1, 8, 8] (64 values an example) but the data "
            f"{ref} has 4 features an example"
        )
    layers = [{"type": "linear", "out": 8}, {"type": "relu"}, {"type": "linear", "out": 3}]
    fits = {"input": [4], "layers": layers}
    assert create(client, **SMALL, model_spec=fits, data=ref)
    r = client.post("/api/network", json={"model_spec": fits, "data": ref, "batch_size": 16})
    assert r.status_code == 200 and r.json()["rows"][-1]["out_shape"] == [3]


def test_an_upload_of_the_other_kind_is_not_found_for_the_model(client):
    text, table = (upload(client, n, GOOD[n]).json()["data"] for n in ("notes.txt", "iris.csv"))
    r = client.post("/api/runs", json={**SMALL, "data": text})
    assert r.status_code == 422
    assert r.json()["detail"] == (
        f"invalid data: this server holds no uploaded table (.npz or .csv) {text}; upload the file"
    )
    r = client.post("/api/runs", json={**TINY_GPT, "data": table})
    assert (
        r.status_code == 422
        and "no uploaded UTF-8 text (what a gpt and a token network train on)" in r.json()["detail"]
    )
    r = client.post("/api/runs", json={**SMALL, "data": "sha256:" + "0" * 64})
    assert r.status_code == 422 and "holds no uploaded table" in r.json()["detail"]
    assert client.get("/api/runs").json() == []


BAD = {
    "a cell that is not a number": ("bad.csv", b"a,b,label\n1,2,0\n3,x,1\n"),
    "rows of different widths": ("bad.csv", b"1,2,0\n3,1\n"),
    "a negative label": ("bad.csv", b"1,2,0\n3,4,-1\n"),
    "one class": ("bad.csv", b"1,2,0\n3,4,0\n"),
    "one row": ("bad.csv", b"1,2,0\n"),
    "not an npz": ("bad.npz", b"PK\x03\x04 not a zip"),
    "an npz without y": ("bad.npz", npz_bytes(x=np.zeros((4, 2)))),
    "an npz with NaN": ("bad.npz", npz_bytes(x=np.array([[np.nan, 1.0], [0, 1]]), y=np.array([0, 1]))),
    "not UTF-8": ("bad.txt", b"abc\xff\xfedef"),
    "an empty text": ("bad.txt", b""),
    "a text of one character": ("bad.txt", b"aaaa"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_file_is_refused_in_the_loaders_words(client, tmp_path, case):
    """422 with the line `webmp train --data` gives for the same file, its name for the path; nothing
    is stored."""
    name, raw = BAD[case]
    file = tmp_path / name
    file.write_bytes(raw)
    with pytest.raises(DataError) as err:
        load_text(file) if name.endswith(".txt") else load_table(file)
    r = upload(client, name, raw)
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == str(err.value).replace(str(file), name) and "\n" not in r.json()["detail"]
    assert r.json()["detail"].startswith(f"{name}: ")
    assert uploads(client) == []


def test_a_file_too_large_is_refused_before_it_is_stored(client, monkeypatch):
    raw = b"1,2,0\n3,4,1\n" * (MAX_UPLOAD_BYTES // 12 + 1)
    assert len(raw) > MAX_UPLOAD_BYTES
    r = upload(client, "big.csv", raw)
    assert r.status_code == 413 and r.json()["detail"] == f"a data upload is at most {MAX_UPLOAD_BYTES} bytes"

    def chunks():  # no Content-Length: cut as it streams in
        for i in range(0, len(raw), 1 << 20):
            yield raw[i : i + (1 << 20)]

    r = client.put("/api/data", params={"name": "big.csv"}, content=chunks())
    assert r.status_code == 413
    assert uploads(client) == []
    # all the uploads together are bounded too
    assert upload(client, "iris.csv", CSV).status_code == 200
    monkeypatch.setattr(page_data, "MAX_UPLOADS_BYTES", len(CSV) + len(NPZ) - 1)
    r = upload(client, "iris.npz", NPZ)
    assert r.status_code == 413 and r.json()["detail"] == (
        f"the server holds {len(CSV)} bytes of uploaded data and keeps at most {len(CSV) + len(NPZ) - 1}"
    )
    assert len(uploads(client)) == 1


@pytest.mark.parametrize("name", ["../../escape.csv", "a/b.csv", "..\\x.csv", "/etc/passwd", "", "x\n.csv"])
def test_a_name_with_a_folder_is_refused(client, name):
    r = upload(client, name, CSV)
    assert r.status_code == 422
    assert uploads(client) == []
    assert not (client.app.state.store.root.parent / "escape.csv").exists()


def test_only_a_hash_names_data_and_the_name_never_a_file(client):
    """The stored file is named by the hash whatever the page called it; a config names data by a
    hash only (a path, or a hash with anything around it, is refused)."""
    r = upload(client, "..csv", CSV)  # a name that is only dots and a suffix: just a name
    assert r.status_code == 200 and uploads(client) == [hashlib.sha256(CSV).hexdigest() + ".csv"]
    sha = hashlib.sha256(CSV).hexdigest()
    uploaded = client.app.state.store.root / UPLOADS / f"{sha}.csv"
    names = (str(uploaded), f"uploads/{sha}.csv", f"sha256:{sha}.csv", f"sha256:../{sha}")
    names += (f"sha256:{sha.upper()}",)
    for data in names:
        r = client.post("/api/runs", json={**SMALL, "data": data})
        assert r.status_code == 422, data
        assert "a path is for native `webmp train --data`" in r.json()["detail"], data
    assert client.get("/api/runs").json() == []
    assert create(client, data=f"sha256:{sha}")
