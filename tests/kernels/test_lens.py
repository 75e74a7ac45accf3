"""The gradient-range lens: its plan program, histograms.jsonl and histograms.png of a native run,
and the shares against f16's range. (The kernel against numpy: tests/kernels/test_optim.py; the page's
lens: tests/browser/test_browser_reliability.py.)"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from webmp import ops
from webmp.config import TrainConfig
from webmp.engine.plan import unpack_h
from webmp.models import build_plan
from webmp.testing import reference as ref
from webmp.train.loop import Trainer
from webmp.train.rundir import HISTOGRAMS_PNG, RunDir, histogram_shares

E_MIN, E_MAX = ops.GRAD_HIST_E_MIN, ops.GRAD_HIST_E_MAX


def test_histogram_program_is_train_step_with_counting(digits):
    """The lens's program is train_step with its counting added (a clear first, the MLP's layers
    counted after the step): without the counting dispatches it is train_step, which never touches
    the counts; the plan says where each layer's counts land."""
    plan, _ = build_plan(TrainConfig(model="mlp-ln", hidden=[16, 8], batch_size=8), digits, "native")
    spec = plan["histograms"]
    assert spec["replaces"] == "train_step"
    assert [lay["name"] for lay in spec["layers"]] == ["dZ0", "dY0", "dZ1", "dY1", "dlogits"]
    assert [lay["offset"] for lay in spec["layers"]] == [i * spec["buckets"] for i in range(5)]
    assert spec["buckets"] == E_MAX - E_MIN + 5
    lens, step = plan["programs"][spec["program"]], plan["programs"]["train_step"]
    counting = [d for d in lens if d["kernel"].startswith("grad_hist")]
    assert [d for d in lens if d not in counting] == step
    assert lens[: len(step) + 1] == [counting[0], *step]
    assert counting[0]["kernel"].startswith("grad_hist_clear")
    assert [d["bind"][0] for d in counting[1:]] == [lay["buffer"] for lay in spec["layers"]]
    step_kernels = {d["kernel"] for d in step + plan["programs"]["eval"]}
    assert not {d["kernel"] for d in counting} & step_kernels
    assert all(spec["buffer"] not in d["bind"] for d in step)


def test_shares_against_f16_range():
    """Counts at chosen exponents: as stored, and unscaled by 2^16 (each exponent 16 lower)."""
    counts = [0] * (E_MAX - E_MIN + 5)
    at = lambda e: 2 + e - E_MIN  # noqa: E731
    counts[0] = 1  # zero
    counts[at(-20)] = 2  # subnormal as stored; 2^-36 unscaled: flushes to zero
    counts[at(-8)] = 3  # normal; 2^-24 unscaled: subnormal
    counts[at(15)] = 1  # normal; unscaled 2^-1
    counts[-1] = 3  # overflow (Inf, NaN or >= 65504 stored)
    stored = histogram_shares(counts, E_MIN, E_MAX)
    assert stored == {"zero": 0.1, "underflow": 0.0, "subnormal": 0.2, "overflow": 0.3}
    unscaled = histogram_shares(counts, E_MIN, E_MAX, shift=-16)
    assert unscaled == {"zero": 0.1, "underflow": 0.2, "subnormal": 0.3, "overflow": 0.3}
    counts[at(16)] = 10  # 2^16 .. 2^17: overflows f16 as is (fp32 path), not once divided by 2
    assert histogram_shares(counts, E_MIN, E_MAX)["overflow"] == 13 / 20
    assert histogram_shares(counts, E_MIN, E_MAX, shift=-1)["overflow"] == 3 / 20


@pytest.mark.slow  # two short native runs
@pytest.mark.parametrize("precision", ["mixed", "fp32"])
def test_native_run_writes_histograms_of_the_stored_gradients(tmp_path, precision, gpu):
    """A native run writes one histograms.jsonl line per metrics read, each layer's counts adding
    up to its rows x cols values; the counts of the last read are exactly numpy's histogram of the
    gradient buffers as they are after it (read back through the runtime: the evaluation the run
    ends with writes no gradient), and histograms.png is drawn."""
    cfg = TrainConfig(hidden=[32, 16], batch_size=16, steps=30, log_every=10, precision=precision, act="relu")
    trainer = Trainer(cfg, out=tmp_path / "run", progress=False, log=None)
    trainer.run(stop_after=20)
    lines = RunDir(tmp_path / "run").read_histograms()
    records = trainer.run_dir.read_metrics()
    assert [h["step"] for h in lines] == [9, 19]
    assert [h["scale"] for h in lines] == [records[9]["scale"], records[19]["scale"]]
    spec, path = trainer.plan["histograms"], trainer.path
    for line in lines:
        for got, lay in zip(line["layers"], spec["layers"], strict=True):
            assert got["name"] == lay["name"] and len(got["counts"]) == spec["buckets"]
            assert sum(got["counts"]) == lay["shape"][0] * lay["shape"][1]
    for got, lay in zip(lines[-1]["layers"], spec["layers"], strict=True):
        rows, cols = lay["shape"]
        stored = unpack_h(trainer.runtime.read(lay["buffer"]), rows, cols, path)
        want = ref.grad_hist(stored, path, E_MIN, E_MAX)
        assert got["counts"] == want.tolist(), lay["name"]
        assert sum(got["counts"][2:-2]) > 0  # non-empty: the gradients have exponents to show
    relu_zeros = lines[-1]["layers"][0]["counts"][0]
    assert relu_zeros > 0  # ReLU's derivative makes exact zeros in dZ0
    assert (tmp_path / "run" / HISTOGRAMS_PNG).stat().st_size > 10_000
    if precision == "mixed":
        # loss-scaled: the stored exponents are log2(scale) above the fp32 run's, by construction
        assert lines[-1]["scale"] > 1
    else:
        assert lines[-1]["scale"] == 1.0


# --- the page's histograms message: checked against the plan, stored, answered with shares --------


@functools.cache
def lens_sizes(config: str) -> tuple[int, list[int]]:
    """(buckets, values per layer) of the lens of the plan of a TrainConfig given as JSON."""
    from webmp.data.tables import load_digits

    plan, _ = build_plan(TrainConfig(**json.loads(config)), load_digits(), "emulated")
    spec = plan["histograms"]
    return spec["buckets"], [lay["shape"][0] * lay["shape"][1] for lay in spec["layers"]]


def lens_counts(config: dict | None = None) -> list[list[int]]:
    """Counts that fit the lens of `config`'s plan (default: tests/serve/helpers.py's SMALL): every
    value in the zero bucket."""
    from tests.serve.helpers import SMALL

    buckets, values = lens_sizes(json.dumps(config or SMALL, sort_keys=True))
    return [[n] + [0] * (buckets - 1) for n in values]


@pytest.mark.slow  # a server and a socket (~2.5 s)
def test_server_stores_the_pages_histograms_and_refuses_bad_ones(tmp_path):
    """A page sends a read's lens counts with its last records message: they are appended to
    histograms.jsonl with the scale of their step's record and answered with each layer's shares.
    Counts that do not fit the plan (layers, buckets, totals), of a step whose record is neither
    stored nor in the message, not after the last stored, or not u32 are refused with one line
    naming what is wrong, and nothing of the message is written (its records neither)."""
    from tests.serve.helpers import SMALL, connect, hello, leave, record, send, serving
    from webmp.serve.app import create_app

    with serving(create_app(tmp_path / "runs")) as client:
        run_id = client.post("/api/runs", json=SMALL).json()["id"]
        plan = client.get(f"/api/runs/{run_id}/plan", params={"f16": "emulated"}).json()["plan"]
        spec = plan["histograms"]
        values = [r * c for r, c in (lay["shape"] for lay in spec["layers"])]
        buckets, at = spec["buckets"], lambda e: 2 + e - spec["e_min"]
        good = [[0] * buckets for _ in values]
        for counts, n in zip(good, values, strict=True):
            counts[0], counts[at(-20)], counts[at(3)] = n // 2, n // 4, n - n // 2 - n // 4
        run_dir = RunDir(client.app.state.store.get(run_id).dir.path)
        ws = connect(client, run_id)

        def records(steps, lens_step=None, counts=good) -> dict:
            msg = {"type": "records", "run_id": run_id, "records": [record(s) for s in steps]}
            return msg if lens_step is None else {**msg, "histograms": {"step": lens_step, "counts": counts}}

        def refused(step=9, counts=good) -> str:
            reply = send(ws, records([9], step, counts))
            assert reply["type"] == "error", reply
            return reply["message"]

        assert send(ws, hello(run_id))["type"] == "ack"
        assert send(ws, records(range(9)))["type"] == "ack"
        assert "layers" in refused(counts=good[:-1])
        assert "counters adding up to" in refused(counts=[good[0][:-1], *good[1:]])
        assert "counters adding up to" in refused(counts=[[c + 1 for c in good[0]], *good[1:]])
        assert "neither stored nor sent" in refused(step=10)
        assert "message dropped" in refused(counts=[[-1] * buckets for _ in values])
        assert "message dropped" in refused(counts=[[2**32] * buckets for _ in values])
        assert "message dropped" in refused(counts=[[1] * 129 for _ in values])
        assert "message dropped" in refused(counts=[[1]] * 65)
        assert "message dropped" in refused(counts=[["1"] * buckets for _ in values])
        assert run_dir.read_histograms() == [] and run_dir.read_metrics()[-1]["step"] == 8

        ack = send(ws, records([9], 9))
        assert ack["type"] == "ack" and ack["last_step"] == 9
        lens = ack["histograms"]
        assert lens["step"] == 9 and lens["scale"] == 65536.0
        first, n = lens["shares"][0], values[0]
        assert first["name"] == spec["layers"][0]["name"]
        assert first["stored"]["zero"] == (n // 2) / n and first["stored"]["subnormal"] == (n // 4) / n
        # unscaled by 2^16: 2^-20 -> 2^-36 flushes to zero, 2^3 -> 2^-13 stays normal
        assert first["unscaled"]["underflow"] == (n // 4) / n and first["unscaled"]["subnormal"] == 0
        assert "after those of step 9" in send(ws, records([10], 9))["message"]
        assert send(ws, records([10]))["type"] == "ack"
        assert send(ws, records([11], 10))["histograms"]["step"] == 10  # its record stored before
        lines = run_dir.read_histograms()
        assert [h["step"] for h in lines] == [9, 10] and lines[0]["scale"] == 65536.0
        assert [lay["counts"] for lay in lines[0]["layers"]] == good
        assert [r["step"] for r in run_dir.read_metrics()] == list(range(12))
        leave(ws)


TINY_GPT = dict(model="gpt", n_layer=2, d_model=32, n_head=2, context=16, batch_size=4, val_tokens=256)
BLOCK_DELTAS = ("dz", "dqkv", "dO", "dS")


@pytest.mark.slow  # a tiny GPT's pipelines
def test_gpt_run_writes_histograms_of_its_backward_deltas(tmp_path, gpu):
    """The GPT's lens: dlogits, the embeddings' dx and each block's deltas, each line's counts
    adding up to the buffers' values; the last line's dlogits, dx and block 0's (the last the
    backward pass writes into the buffers the blocks share) equal numpy's histogram of the
    buffers after the run; block 0's dS holds the causal mask's zeros (the upper triangle)."""
    cfg = TrainConfig(**TINY_GPT, steps=4, log_every=2)
    trainer = Trainer(cfg, out=tmp_path / "gpt", progress=False, log=None)
    trainer.run()
    spec, path = trainer.plan["histograms"], trainer.path
    names = ["dlogits", "dx (embeddings)", *(f"{n} (block {b})" for b in range(2) for n in BLOCK_DELTAS)]
    assert [lay["name"] for lay in spec["layers"]] == names
    lines = trainer.run_dir.read_histograms()
    assert [h["step"] for h in lines] == [1, 3]
    for got, lay in zip(lines[-1]["layers"], spec["layers"], strict=True):
        rows, cols = lay["shape"]
        assert sum(got["counts"]) == rows * cols
        if "block 1" in lay["name"]:
            continue  # overwritten by block 0 since: the next test
        stored = unpack_h(trainer.runtime.read(lay["buffer"]), rows, cols, path)
        assert got["counts"] == ref.grad_hist(stored, path, E_MIN, E_MAX).tolist(), lay["name"]
    assert lines[-1]["layers"][6]["counts"] != lines[-1]["layers"][2]["counts"]  # block 1's dz is its own
    ds = lines[-1]["layers"][5]["counts"]  # dS (block 0)
    T = cfg.context
    assert ds[0] >= sum(ds) * (T - 1) / (2 * T)  # at least the masked upper triangle is 0


@pytest.mark.slow  # a tiny GPT's pipelines, twice
def test_gpt_lens_counts_each_block_where_the_backward_pass_leaves_it(gpu):
    """Block b's deltas are counted before block b - 1 overwrites the buffers they share: its counts
    equal numpy's histogram of those buffers after the same step cut short where the lens counts
    them (the lens program up to that point, its counting left out, on a fresh runtime)."""
    from webmp.engine.runtime import Runtime
    from webmp.serve.page_data import training_data

    cfg = TrainConfig(**TINY_GPT, steps=4)
    path = "native" if gpu.has_f16 else "emulated"
    plan, blob = build_plan(cfg, training_data(cfg), path)
    spec = plan["histograms"]
    whole = Runtime(plan, blob, gpu)
    whole.run("train_step", read_metrics=True, histograms=True)
    counts = np.frombuffer(whole.last_histograms, np.uint32)
    lens = plan["programs"][spec["program"]]
    entries = {k["name"]: k["entry"] for k in plan["kernels"]}
    inits = {b["name"]: b["init"] for b in plan["buffers"]}

    def base(d) -> int | None:  # a grad_hist dispatch's counters (its dims uniform: rows, cols, base, nwg)
        if entries[d["kernel"]] != "grad_hist":
            return None
        init = inits[d["bind"][2]]
        return int(np.frombuffer(blob[init["offset"] : init["offset"] + 16], np.uint32)[2])

    assert len({d["kernel"] for d in lens if entries[d["kernel"]] == "grad_hist"}) == 1  # one pipeline
    grads = {p["name"]: p["grad"] for p in plan["params"]}
    for b in range(2):
        layers = [lay for lay in spec["layers"] if lay["name"].endswith(f"(block {b})")]
        first = min(i for i, d in enumerate(lens) if base(d) == layers[0]["offset"])
        cut = [d for d in lens[:first] if not d["kernel"].startswith("grad_hist")]
        bound = {name for d in cut for name in d["bind"]}
        assert grads[f"Wqkv{b}"] in bound  # block b's backward pass is done ...
        assert b == 0 or grads[f"W2{b - 1}"] not in bound  # ... block b - 1's has not begun
        part = Runtime({**plan, "programs": {**plan["programs"], "cut": cut}}, blob, gpu)
        part.run("cut")
        for lay in layers:
            rows, cols = lay["shape"]
            stored = unpack_h(part.read(lay["buffer"]), rows, cols, path)
            want = ref.grad_hist(stored, path, E_MIN, E_MAX)
            got = counts[lay["offset"] : lay["offset"] + spec["buckets"]]
            assert got.tolist() == want.tolist(), lay["name"]


def test_format_shares_are_the_formats_casts():
    """Each format's shares (format_lens.format_shares) against the casts themselves: values at
    each bucket's lower edge (2^e, where the bucket rules are exact), seen at the format's view
    (fp16 as stored, bf16 unscaled, E4M3/E5M2 at the per-tensor scale that puts the top bucket just
    under the largest value), cast with numpy's float16 and ml_dtypes: 0 is a flush, below the
    smallest normal subnormal, past the largest finite an overflow."""
    import ml_dtypes

    from webmp.train.format_lens import RANGES, format_shares

    types = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
             "e5m2": ml_dtypes.float8_e5m2}  # fmt: skip
    rng = np.random.default_rng(7)
    for shift, top in ((-16.0, 3), (0.0, -30), (-7.0, 15)):
        exps = np.arange(E_MIN, top + 1)
        n = rng.integers(0, 5, len(exps))
        n[-1] = 1  # the top bucket is used
        counts = [3, 0] + [0] * (E_MAX - E_MIN + 1) + [0, 2]  # 3 zeros, 2 stored overflows
        for e, k in zip(exps, n, strict=True):
            counts[2 + e - E_MIN] = int(k)
        total = sum(counts)
        shares = format_shares(counts, E_MIN, E_MAX, shift)
        for name, t in types.items():
            sub_min, normal_min, log2_max = RANGES[name]
            view = shares[name]["shift_log2"]
            if name in ("e4m3", "e5m2"):
                assert view == np.floor(log2_max) - 1 - top
            assert view == {"fp16": 0.0, "bf16": shift}.get(name, view)
            with np.errstate(over="ignore", invalid="ignore"):
                back = np.ldexp(1.0, exps + int(view)).astype(np.float32).astype(t).astype(np.float64)
            flush = n[back == 0].sum()
            sub = n[(back != 0) & (np.abs(back) < 2.0**normal_min)].sum()
            over = n[~np.isfinite(back) | (np.abs(back) > 2.0**log2_max)].sum() + (2 if name == "fp16" else 0)
            want = {"underflow": flush / total, "subnormal": sub / total, "overflow": over / total}
            got = {k: shares[name][k] for k in want}
            assert got == pytest.approx(want, abs=1e-12), (name, shift)
        assert shares["not_finite"]["share"] == 2 / total
