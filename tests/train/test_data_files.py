"""The user's own data: tables for the MLP (.npz, .csv), text corpora for the GPT, their one-line
errors, the default corpus (the running Python's standard library), and `webmp train --data`."""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from webmp.cli import main as cli
from webmp.config import TrainConfig
from webmp.data.tables import (
    SPLIT_SEED,
    DataError,
    load_digits,
    load_mlp_data,
    load_table,
    read_data_file,
    split_standardise,
)
from webmp.data.text import (
    DEFAULT_CORPUS_BYTES,
    TEST_SUITE_DIRS,
    load_text,
    separator,
    stdlib_sources,
    tokenize,
    unigram_bits_per_char,
)


def blobs(n: int = 120, features: int = 4, classes: int = 3, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Separable clusters: a small learnable table."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    centres = rng.normal(0, 3, (classes, features))
    return centres[y] + rng.normal(0, 0.5, (n, features)), y


def write_csv(path: Path, x: np.ndarray, y: np.ndarray, header: bool = True) -> Path:
    lines = [",".join([f"f{i}" for i in range(x.shape[1])] + ["label"])] if header else []
    lines += [
        ",".join([repr(float(v)) for v in row] + [str(int(label))]) for row, label in zip(x, y, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def error(fn, *args, **kw) -> str:
    """The DataError message of fn(*args), checked to be one line."""
    with pytest.raises(DataError) as e:
        fn(*args, **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg, msg
    return msg


# --- digits, unchanged ---------------------------------------------------------------------------


def old_load_digits(input_scale: float = 1.0):
    """load_digits as it was before the split was shared (webmp 0.x), kept here verbatim."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    x, y = d.data.astype(np.float64), d.target.astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    n_train = int(round(0.8 * len(x)))
    tr, te = order[:n_train], order[n_train:]
    mean = x[tr].mean(0)
    std = x[tr].std(0)
    std[std < 1e-6] = 1.0
    norm = (x - mean) / std * input_scale
    return (
        norm[tr].astype(np.float32),
        y[tr].astype(np.uint32),
        norm[te].astype(np.float32),
        y[te].astype(np.uint32),
    )


@pytest.mark.parametrize("scale", [1.0, 0.37])
def test_digits_are_bit_identical(scale):
    new = load_digits(scale)
    for got, want in zip(
        (new.train_x, new.train_y, new.test_x, new.test_y), old_load_digits(scale), strict=True
    ):
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    assert new.classes == 10 and new.sha256 is None and "digits" in new.source


def test_load_mlp_data_chooses_by_the_data_field(tmp_path):
    assert load_mlp_data(TrainConfig()).name == "digits"
    x, y = blobs()
    path = write_csv(tmp_path / "t.csv", x, y)
    assert load_mlp_data(TrainConfig(data=str(path))).source == str(path.resolve())


# --- tables --------------------------------------------------------------------------------------


def test_npz_and_csv_give_the_same_dataset(tmp_path):
    x, y = blobs()
    np.savez(tmp_path / "t.npz", x=x, y=y)
    a = load_table(tmp_path / "t.npz", input_scale=0.5)
    b = load_table(write_csv(tmp_path / "t.csv", x, y))
    c = load_table(write_csv(tmp_path / "plain.csv", x, y, header=False))
    assert a.classes == b.classes == c.classes == 3 and a.features == 4
    assert len(a.train_x) == 96 and len(a.test_x) == 24  # 80/20
    # the split and the standardisation are digits' (split_standardise), input_scale multiplies
    want = split_standardise("t", x, y, 3, 0.5)
    for name in ("train_x", "train_y", "test_x", "test_y"):
        assert np.array_equal(getattr(a, name), getattr(want, name))
        assert np.array_equal(getattr(b, name), getattr(c, name))
    assert np.allclose(a.train_x, 0.5 * b.train_x, atol=1e-6)
    assert abs(b.train_x.mean()) < 1e-4 and abs(b.train_x.std() - 1) < 1e-4
    assert a.sha256 == hashlib.sha256((tmp_path / "t.npz").read_bytes()).hexdigest()
    assert a.train_x.dtype == np.float32 and a.train_y.dtype == np.uint32


def test_npz_classes_and_integer_or_float_labels(tmp_path):
    x, y = blobs(classes=2)
    np.savez(tmp_path / "c.npz", x=x.astype(np.float32), y=y.astype(np.float64), classes=np.int64(5))
    d = load_table(tmp_path / "c.npz")
    assert d.classes == 5 and set(d.train_y.tolist()) | set(d.test_y.tolist()) == {0, 1}
    np.savez(tmp_path / "few.npz", x=x, y=y, classes=np.int64(1))
    assert "label 1 is out of range for classes = 1" in error(load_table, tmp_path / "few.npz")


def test_csv_blank_lines_quotes_and_two_rows(tmp_path):
    p = tmp_path / "q.csv"
    p.write_text('"a","b","label"\n\n"1.5",2,0\r\n3,-4e1,1\n\n')
    d = load_table(p)
    assert (len(d.train_x), len(d.test_x), d.features, d.classes) == (1, 1, 2, 2)


@pytest.mark.parametrize(
    "name, text, expect",
    [
        ("cell.csv", "a,b,label\n1,2,0\n3,4,1\n5,x,1\n", "row 4, column 2 ('b'): 'x' is not a number"),
        ("plain.csv", "1,2,0\n3,oops,1\n", "row 2, column 2: 'oops' is not a number"),
        ("empty_cell.csv", "1,,0\n3,4,1\n", "row 1, column 2: an empty cell"),
        ("ragged.csv", "1,2,0\n3,4\n5,6,1\n", "row 2 has 2 columns, row 1 has 3"),
        ("ragged_h.csv", "a,b,y\n1,2,0\n3,4,1,9\n", "row 3 has 4 columns, the header has 3"),
        ("nan.csv", "1,2,0\n3,nan,1\n", "row 2, column 2: nan is not a finite number"),
        ("inf.csv", "a,b,y\n1,2,0\n-inf,3,1\n", "row 3, column 1 ('a'): -inf is not a finite number"),
        ("neg.csv", "1,2,0\n3,4,-1\n", "row 2, column 3: label -1 is negative"),
        ("frac.csv", "1,2,0\n3,4,1.5\n", "row 2, column 3: label 1.5 is not an integer"),
        ("huge.csv", "1,2,0\n3,4,1e9\n", "row 2, column 3: label 1e+09 is too large"),
        ("one_row.csv", "a,b,y\n1,2,1\n", "1 row(s); at least 2 are needed"),
        ("one_class.csv", "1,2,0\n3,4,0\n", "at least 2 classes"),
        ("header_only.csv", "a,b,y\n", "no data rows (only a header)"),
        ("one_col.csv", "1\n2\n", "one column"),
        ("semicolons.csv", "1;2;0\n3;4;1\n", "one column"),
        ("latin1.csv", b"a,b,y\n1,2,0\n\xe9,4,1\n", "not UTF-8 text: byte 12 (0xe9)"),
    ],
)
def test_bad_csv_names_row_and_column(tmp_path, name, text, expect):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    msg = error(load_table, p)
    assert msg.startswith(f"{p}: ") and expect in msg, msg


def test_bad_npz_says_what_is_wrong(tmp_path):
    x, y = blobs()
    cases = {
        "no_x.npz": ({"y": y}, "no array 'x' in the .npz (it holds: y)"),
        "no_y.npz": ({"x": x, "labels": y}, "no array 'y' in the .npz (it holds: labels, x)"),
        "x1d.npz": (
            {"x": x[:, 0], "y": y},
            "x must be [rows, features] or images [rows, C, H, W], got shape (120,)",
        ),
        "y2d.npz": ({"x": x, "y": y[:, None]}, "y must be 1-D [rows], got shape (120, 1)"),
        "rows.npz": ({"x": x, "y": y[:-1]}, "x has 120 rows but y has 119"),
        "complex.npz": ({"x": x + 1j, "y": y}, "x must hold real numbers, got dtype complex128"),
        "neg.npz": ({"x": x, "y": np.where(np.arange(120) == 7, -2, y)}, "y[7]: label -2 is negative"),
        "frac.npz": ({"x": x, "y": y + 0.25}, "y[0]: label 0.25 is not an integer"),
        "one_class.npz": ({"x": x, "y": 0 * y}, "at least 2 classes"),
        "one_row.npz": ({"x": x[:1], "y": y[:1]}, "at least 2 are needed"),
        "cls.npz": ({"x": x, "y": y, "classes": np.array([3])}, "classes must be an integer scalar"),
    }
    xn = x.copy()
    xn[5, 2] = np.inf
    cases["inf.npz"] = ({"x": xn, "y": y}, "x holds 1 NaN/Inf value(s), the first at x[5, 2]")
    for name, (arrays, expect) in cases.items():
        np.savez(tmp_path / name, **arrays)
        msg = error(load_table, tmp_path / name)
        assert msg.startswith(f"{tmp_path / name}: ") and expect in msg, msg
    np.savez(tmp_path / "obj.npz", x=np.array([[1, "a"]], dtype=object), y=np.zeros(1))
    assert "not a readable .npz" in error(load_table, tmp_path / "obj.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    assert "not an .npz archive" in error(load_table, tmp_path / "junk.npz")


def test_bad_paths_and_formats(tmp_path):
    missing = tmp_path / "nope.csv"
    assert error(load_table, missing) == f"{missing}: no such file"
    assert error(load_table, tmp_path) == f"{tmp_path}: not a file"
    (tmp_path / "d.parquet").write_bytes(b"PAR1\0\0\x01")
    msg = error(load_table, tmp_path / "d.parquet")
    assert "unknown data format '.parquet'" in msg and ".npz" in msg and ".csv" in msg
    (tmp_path / "story.txt").write_text("once upon a time\n")
    msg = error(load_table, tmp_path / "story.txt")
    assert "text data trains the GPT (--model gpt); the MLP trains on .npz" in msg
    (tmp_path / "big.csv").write_text("1,2,0\n" * 10)
    assert "60 bytes is more than the 59 bytes" in error(read_data_file, tmp_path / "big.csv", 59)


def test_config_data_must_be_a_path():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="data must be the path"):
        TrainConfig(data="  ")
    assert TrainConfig(data="x.csv").data == "x.csv" and TrainConfig().data is None


# --- text ----------------------------------------------------------------------------------------


def test_text_file_vocab_and_contiguous_split(tmp_path):
    text = "hello, wörld!\n" * 10 + "the end ✓"  # 149 characters, some of them not ASCII
    p = tmp_path / "t.txt"
    p.write_bytes("\ufeff".encode() + text.encode())  # a byte-order mark is dropped
    c = load_text(p)
    assert c.vocab == sorted(set(text)) and c.vocab_size == len(set(text))
    assert len(c.train) + len(c.val) == len(text) == 149 and len(c.val) == 14  # the last 10 %
    assert c.decode(c.train) == text[:-14] and c.decode(c.val) == text[-14:]
    assert c.train.dtype == c.val.dtype == np.uint32
    assert c.sha256 == hashlib.sha256(p.read_bytes()).hexdigest() and c.source == str(p.resolve())
    assert len(tokenize("ab", "t", "", "").val) == 1  # at least one validation character


@pytest.mark.parametrize(
    "raw, expect",
    [
        (b"", "empty file"),
        (b"aaaaa", "only one distinct character ('a')"),
        (b"caf\xc3\xa9 ok \xff more", "not UTF-8 text: byte 9 (0xff) is invalid"),
        (b"\xef\xbb\xbfab\xc3", "not UTF-8 text: byte 5 (0xc3)"),
    ],
)
def test_bad_text_files(tmp_path, raw, expect):
    p = tmp_path / "t.txt"
    p.write_bytes(raw)
    msg = error(load_text, p)
    assert msg.startswith(f"{p}: ") and expect in msg, msg
    assert error(load_text, tmp_path / "none.txt").endswith("no such file")


def test_unigram_baseline_by_hand(tmp_path):
    # 20 characters: the last 2 are the validation split; V = 4 (a b c d); "d" is the one target
    text = "aaaaaaaaaaaabbbbbb" + "cd"
    c = tokenize(text, "t", "", "")
    assert c.decode(c.train) == "aaaaaaaaaaaabbbbbb" and c.decode(c.val) == "cd"
    # add-one smoothing over V = 4 characters and 18 train characters: p(d) = (0 + 1) / 22
    assert unigram_bits_per_char(c) == pytest.approx(math.log2(22))
    text = "aaab" * 50  # train "aaab" * 45 (135 a, 45 b), val "aaab" * 5: targets "aab" + "aaab" * 4
    c = tokenize(text, "t", "", "")
    pa, pb = (135 + 1) / (180 + 2), (45 + 1) / (180 + 2)
    assert unigram_bits_per_char(c) == pytest.approx(-(14 * math.log2(pa) + 5 * math.log2(pb)) / 19)
    # the first 5 validation characters "aaaba": targets "aaba"
    assert unigram_bits_per_char(c, 5) == pytest.approx(-(3 * math.log2(pa) + math.log2(pb)) / 4)


@pytest.mark.slow  # reads the whole standard library twice
def test_default_corpus_is_deterministic_and_leaves_tests_out():
    a, b = load_text(), load_text(None)
    assert a.sha256 == b.sha256 and np.array_equal(a.train, b.train) and np.array_equal(a.val, b.val)
    assert a.vocab == b.vocab and a.name == "python-stdlib" and f"{sys.version_info[0]}." in a.source
    text = a.decode(np.concatenate([a.train, a.val]))
    raw = text.encode()
    assert len(raw) <= DEFAULT_CORPUS_BYTES and hashlib.sha256(raw).hexdigest() == a.sha256
    assert len(raw) > DEFAULT_CORPUS_BYTES // 2  # whole files up to the cap: close to it
    files = stdlib_sources()
    rels = [rel for rel, _ in files]
    assert rels == sorted(rels) and "os.py" in rels and "json/decoder.py" in rels
    for rel in rels:
        parts = rel.split("/")
        assert not TEST_SUITE_DIRS & set(parts[:-1]) and not parts[-1].startswith("test_"), rel
        assert "site-packages" not in parts, rel
    shuffled = sorted(rels, key=lambda rel: hashlib.sha256(rel.encode()).digest())
    assert text.startswith(separator(shuffled[0]))
    taken = [rel for rel in shuffled if separator(rel) in text]
    assert taken == shuffled[: len(taken)] and str(len(taken)) in a.source
    # both splits draw on the whole library: files from early and late in the alphabet in each
    for split in (a.decode(a.train), a.decode(a.val)):
        names = [rel for rel in taken if separator(rel) in split]
        assert min(names) < "e" and max(names) > "t", names[:5]
    assert 2 < unigram_bits_per_char(a) < 7


def test_default_corpus_cap():
    small = load_text(None, max_bytes=50_000)
    assert len(small.decode(np.concatenate([small.train, small.val])).encode()) <= 50_000
    assert small.sha256 != load_text().sha256


# --- training on a file --------------------------------------------------------------------------


@pytest.mark.slow  # two trainings; the loaders are checked file by file in the fast tier
def test_train_on_csv_and_npz_end_to_end(tmp_path, gpu, capsys):
    x, y = blobs(n=200)
    csv = write_csv(tmp_path / "blobs.csv", x, y)
    np.savez(tmp_path / "blobs.npz", x=x, y=y)
    for path in (csv, tmp_path / "blobs.npz"):
        out = tmp_path / path.suffix[1:]
        args = ["train", "--data", str(path), "--steps", "20", "--hidden", "16", "--quiet", "--out", str(out)]
        assert cli([*args, "--log-every", "10", "--lr", "0.01", "--warmup", "2"]) == 0
        summary = json.loads((out / "summary.json").read_text())
        config = json.loads((out / "config.json").read_text())
        assert summary["steps"] == 20 and summary["test_count"] == 40 and summary["test_accuracy"] > 0.6
        assert config["data"] == str(path)
        assert config["data_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    capsys.readouterr()

    # a resume must train on the same bytes
    write_csv(csv, x + 1, y)
    resume = ["train", "--data", str(csv), "--steps", "30", "--hidden", "16", "--quiet", "--resume"]
    assert cli([*resume, str(tmp_path / "csv"), "--log-every", "10", "--lr", "0.01", "--warmup", "2"]) == 1
    assert "changed since the checkpoint" in capsys.readouterr().err

    # text is for the GPT; the error comes before any GPU work, on one line
    story = tmp_path / "story.txt"
    story.write_text("It was a dark and stormy night.\n")
    assert cli(["train", "--data", str(story), "--quiet", "--out", str(tmp_path / "never")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "text data trains the GPT (--model gpt)" in err
    assert not (tmp_path / "never").exists()


def test_each_model_names_the_other_data_kind(tmp_path):
    """A table given to the GPT, or text given to the MLP, says which model takes it."""
    for name in ("t.npz", "t.CSV"):
        (tmp_path / name).write_bytes(b"1,2,0\n")
        msg = error(load_text, tmp_path / name)
        want = f"a {Path(name).suffix} table trains the MLPs (--model mlp); the GPT trains on text"
        assert msg == f"{tmp_path / name}: {want}"
