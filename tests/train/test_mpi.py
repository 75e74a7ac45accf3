"""Data-parallel training over MPI (webmp/train/distributed.py): 2 ranks on this machine, launched with
`mpirun -n 2` running tests/train/mpi_worker.py (every rank reports its records and a hash of its
weights, moments and state), against 1-rank runs of the same global batch.

Loss tolerance, 2 ranks vs 1 rank with the same global batch B: the first step's loss is the same
bits (same weights, the same rows, the global batch's loss rows summed in the same order). After
that the runs differ only by the reassociation of each gradient's sum over the batch rows (each
rank sums its B/2 rows, the all-reduce adds the two partial sums): a few f32 ulps per gradient
element. Through AdamW that moves a master weight by ulps, which can flip the f16 rounding of its
working copy by one f16 ulp (2^-11 relative) and so change the forward pass. The loss is a mean
over rows of smooth functions of the weights, so the effect on it is far below one f16 ulp of
the loss; we bound the relative difference by 2^-11. Measured on lavapipe: 0 (every loss the
same bits) over the MLP's 20 steps, at most 5.5e-6 absolute (~2e-6 relative) over the GPT's 10.
The gradient norms get the same bound (measured: 1-ulp differences). A wrong shard (other rows)
changes the first loss; a sum not normalised by the global batch doubles the gradient norm, a
missing rank's contribution halves it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from webmp.config import TrainConfig
from webmp.models.common import check_shard
from webmp.train.checkpoint import load_checkpoint
from webmp.train.loop import Trainer

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "train" / "mpi_worker.py"
LOSS_RTOL = 2.0**-11  # see the module docstring
MLP = {
    "model": "mlp", "hidden": [32], "steps": 20, "batch_size": 64, "log_every": 5, "checkpoint_every": 0,
    "init_scale": 1024.0,
}  # fmt: skip
GPT = {
    "model": "gpt", "n_layer": 1, "d_model": 32, "n_head": 2, "context": 16, "batch_size": 8, "steps": 10,
    "log_every": 5, "checkpoint_every": 0, "val_tokens": 256, "init_scale": 1024.0, "warmup": 0,
}  # fmt: skip

if shutil.which("mpirun") is None:
    pytest.skip("mpirun is not installed (scripts/setup.sh test installs Open MPI)", allow_module_level=True)
pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install -e '.[mpi]')")


def mpirun(ranks: int, job: dict, tmp: Path, timeout: float = 120, wait: bool = True):
    """Runs tests/train/mpi_worker.py on `ranks` ranks with `job`; returns the CompletedProcess (or the
    Popen when not wait)."""
    job_file = tmp / f"job-{time.monotonic_ns()}.json"
    job_file.write_text(json.dumps(job))
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    cmd = ["mpirun", "-n", str(ranks), "--oversubscribe", sys.executable, str(WORKER), str(job_file)]
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def reports(report: Path, ranks: int) -> list[dict]:
    return [json.loads((report / f"rank{r}.json").read_text()) for r in range(ranks)]


def two_rank_run(tmp: Path, config: dict, name: str, ranks: int = 2, **job) -> list[dict]:
    """A 2-rank run (or `ranks`) into tmp/name (a resumed run: into the run it resumes); every
    rank's report."""
    out = None if job.get("resume") else str(tmp / name)
    report = tmp / f"{name}-report"
    mpirun(ranks, {"config": config, "out": out, "report": str(report), **job}, tmp, timeout=300)
    return reports(report, ranks)


def losses(records: list[dict]) -> np.ndarray:
    return np.array([r["loss"] for r in records])


def metrics_file(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mpi")


@pytest.fixture(scope="module")
def text_file(tmp) -> str:
    """A few kB of deterministic text for the GPT."""
    rng = np.random.default_rng(0)
    words = ["def ", "return ", "self", ".x", " = ", "(", ")", ":\n", "    ", "if ", "else", "0", "1"]
    path = tmp / "text.txt"
    path.write_text("".join(rng.choice(words, 3000)))
    return str(path)


@pytest.fixture(scope="module")
def mlp_one_rank(tmp, gpu) -> dict:
    """The 1-rank run of MLP, in this process (no MPI): records and run directory."""
    trainer = Trainer(TrainConfig(**MLP), out=tmp / "mlp1", progress=False, log=None, gpu=gpu)
    trainer.run()
    return {"records": trainer.records, "dir": tmp / "mlp1"}


@pytest.fixture(scope="module")
def mlp_two_ranks(tmp) -> list[dict]:
    return two_rank_run(tmp, MLP, "mlp2")


@pytest.fixture(scope="module")
def half_plain(tmp) -> Path:
    """MLP's unsharded 2-rank run stopped at step 10 (its checkpoint)."""
    two_rank_run(tmp, MLP, "half", stop_after=10)
    return tmp / "half"


def assert_same_across_ranks(ranks: list[dict]) -> None:
    assert ranks[0]["sha256"] == ranks[1]["sha256"]  # masters, moments and state words
    assert ranks[0]["records"] == ranks[1]["records"]


def assert_matches_one_rank(two: list[dict], one: list[dict]) -> None:
    """Losses and gradient norms within LOSS_RTOL, the first loss the same bits (AdamW's step does
    not change when every gradient is scaled: only the norm shows a wrongly normalised sum)."""
    a, b = losses(two), losses(one)
    assert len(a) == len(b)
    assert a[0] == b[0]  # the same weights and rows: the same bits
    np.testing.assert_allclose(a, b, rtol=LOSS_RTOL, atol=0)
    norms = [np.array([r["grad_norm"] for r in recs]) for recs in (two, one)]
    np.testing.assert_allclose(norms[0], norms[1], rtol=LOSS_RTOL, atol=0)


def test_batch_must_split_over_the_ranks():
    check_shard(64, 1, 2)
    with pytest.raises(ValueError, match="batch_size 10 does not split over 4 ranks"):
        check_shard(10, 0, 4)


def test_one_process_never_starts_mpi():
    """Without an MPI launcher detect_world is one rank and mpi4py is not even imported."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")}
    code = (
        "import sys; from webmp.train.distributed import detect_world; w = detect_world(); "
        "assert (w.rank, w.size) == (0, 1) and 'mpi4py' not in sys.modules, (w.size, sorted(sys.modules))"
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_mlp_two_ranks_match_one_rank(mlp_two_ranks, mlp_one_rank, tmp):
    assert_same_across_ranks(mlp_two_ranks)
    assert_matches_one_rank(mlp_two_ranks[0]["records"], mlp_one_rank["records"])
    # only rank 0 wrote, and what it wrote is the run
    assert metrics_file(tmp / "mlp2") == mlp_two_ranks[0]["records"]
    summary = json.loads((tmp / "mlp2" / "summary.json").read_text())
    dp = summary["data_parallel"]
    assert dp["ranks"] == 2 and dp["steps"] == MLP["steps"]
    assert dp["readback_ms"] > 0 and dp["allreduce_ms"] > 0
    print(
        "MLP 1 vs 2 ranks, max |loss diff|:",
        np.max(np.abs(losses(mlp_two_ranks[0]["records"]) - losses(mlp_one_rank["records"]))),
    )
    print("MLP 2 ranks, ms per step:", dp)


def test_two_ranks_accumulating_match_one_rank_without(tmp, mlp_one_rank):
    """2 ranks x 4 micro-batches of 16 (8 rows a rank) against 1 rank x 64: the same rows in the
    same order (micro-batch k, rank r: rows 16k + 8r ..), the step's loss rows assembled in the
    global order (the first loss the same bits), within the 1-vs-2-rank tolerance after."""
    ranks = two_rank_run(tmp, {**MLP, "batch_size": 16, "grad_accum": 4}, "accum2")
    assert_same_across_ranks(ranks)
    assert_matches_one_rank(ranks[0]["records"], mlp_one_rank["records"])
    assert ranks[0]["state"]["data_pos"] == MLP["steps"] * 64 and ranks[0]["state"]["micro"] == 0
    print(
        "MLP 1 rank x 64 vs 2 ranks x 4 x 16, max |loss diff|:",
        np.max(np.abs(losses(ranks[0]["records"]) - losses(mlp_one_rank["records"]))),
    )


def test_overflow_on_one_rank_skips_every_rank(tmp):
    """Rank 1 alone sees an Inf in a gradient (step 3) and an activation overflow (step 6, its flag
    only: nothing in the gradients shows it): every rank skips both steps and halves the scale."""
    config = {**MLP, "steps": 8, "log_every": 8}
    ranks = two_rank_run(tmp, config, "overflow", inject={"3": "inf", "6": "flag"})
    assert_same_across_ranks(ranks)
    for rank in ranks:
        recs = {r["step"]: r for r in rank["records"]}
        assert [s for s, r in recs.items() if r["skipped"]] == [2, 5]  # records count steps from 0
        assert recs[2]["found_inf"] == 2 and recs[5]["found_inf"] == 1  # FLAG_MASTER_GRAD, FLAG_H_STORE
        assert recs[3]["scale"] == recs[2]["scale"] / 2 and recs[6]["scale"] == recs[5]["scale"] / 2
        assert rank["state"]["opt_step"] == 6 and rank["state"]["skipped_total"] == 2


def test_two_rank_checkpoint_resumes_on_one_and_two_ranks(tmp, mlp_two_ranks, mlp_one_rank, gpu, half_plain):
    """A 2-rank run stopped at step 10 resumes on 2 ranks exactly as the uninterrupted 2-rank run,
    and on 1 rank within the 1-vs-2-rank tolerance."""
    shutil.copytree(half_plain, tmp / "resume2")
    shutil.copytree(half_plain, tmp / "resume1")
    resumed = two_rank_run(tmp, MLP, "resume2-run", resume=str(tmp / "resume2"))
    assert_same_across_ranks(resumed)
    assert resumed[0]["sha256"] == mlp_two_ranks[0]["sha256"]
    assert metrics_file(tmp / "resume2") == mlp_two_ranks[0]["records"]

    trainer = Trainer(TrainConfig(**MLP), resume=tmp / "resume1", progress=False, log=None, gpu=gpu)
    trainer.run()
    assert_matches_one_rank(metrics_file(tmp / "resume1"), mlp_one_rank["records"])


def test_dead_rank_fails_fast_and_keeps_the_checkpoint(tmp, gpu):
    """SIGKILL rank 1 after the first checkpoint: mpirun ends every rank, exits non-zero and names
    the dead rank; the last checkpoint loads and resumes."""
    config = {**MLP, "steps": 100000, "log_every": 10, "checkpoint_every": 10}
    out, report = tmp / "killed", tmp / "killed-report"
    proc = mpirun(2, {"config": config, "out": str(out), "report": str(report)}, tmp, wait=False)
    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoint.json").exists() or not (report / "rank1.pid").exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.2)
        os.kill(int((report / "rank1.pid").read_text()), signal.SIGKILL)
        killed = time.monotonic()
        output, _ = proc.communicate(timeout=60)  # a hang fails here
        print(f"mpirun exited {time.monotonic() - killed:.1f} s after the kill:\n{output[-600:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert "rank 1" in output and "signal 9" in output, output
    contents, meta = load_checkpoint(out)
    assert meta["step"] % 10 == 0 and meta["step"] >= 10
    step = meta["step"]
    trainer = Trainer(
        TrainConfig(**{**config, "steps": step + 2}), resume=out, progress=False, log=None, gpu=gpu
    )
    trainer.run()
    assert [r["step"] for r in trainer.records] == [step, step + 1]


def test_exception_on_one_rank_aborts_every_rank(tmp):
    """An uncaught exception on rank 1 (while rank 0 waits in the all-reduce) ends the job at once
    (webmp.train.distributed.abort_on_uncaught), naming the rank and the error."""
    job = {
        "config": {**MLP, "steps": 100000},
        "out": str(tmp / "raised"),
        "report": str(tmp / "raised-report"),
    }
    proc = mpirun(2, {**job, "inject": {"3": "raise"}}, tmp, wait=False)
    try:
        output, _ = proc.communicate(timeout=120)  # a hang fails here
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert "injected failure at step 3" in output and "rank 1 of 2 failed" in output, output


def test_bench_ranks(tmp):
    """`mpirun -n 2 webmp bench --ranks 2`: rank 0 writes the parts of the data-parallel step."""
    out = tmp / "bench.json"
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    cmd = ["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m", "webmp", "bench", "--size", "tiny"]
    cmd += ["--ranks", "2", "--models", "digits", "--out", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    digits = json.loads(out.read_text())["models"]["digits"]
    parts = ("grads_ms", "readback_ms", "allreduce_ms", "upload_ms", "update_ms")
    assert digits["ranks"] == 2 and all(digits[k] > 0 for k in parts)
    assert digits["step_ms"] == pytest.approx(sum(digits[k] for k in parts), abs=0.01)
    assert 0 < digits["comm_share"] < 1
    # the fused buffer: every gradient (the digits MLP 64-32-10), the 16 loss rows, 3 flag bits
    assert digits["fused_bytes"] == 4 * (64 * 32 + 32 + 32 * 10 + 10 + 16 + 3)


def test_gpt_two_ranks_match_one_rank(tmp, text_file, gpu):
    config = {**GPT, "data": text_file}
    ranks = two_rank_run(tmp, config, "gpt2")
    assert_same_across_ranks(ranks)
    trainer = Trainer(TrainConfig(**config), out=tmp / "gpt1", progress=False, log=None, gpu=gpu)
    trainer.run()
    assert_matches_one_rank(ranks[0]["records"], trainer.records)
    print(
        "GPT 1 vs 2 ranks, max |loss diff|:",
        np.max(np.abs(losses(ranks[0]["records"]) - losses(trainer.records))),
    )


@pytest.mark.parametrize("kind", ["cnn", "tokens"])
def test_a_network_on_two_ranks_matches_one_rank(tmp, text_file, gpu, kind):
    """A network of layers (the README's CNN on the digits; a small token network with attention on
    text) data-parallel: the ranks agree bit for bit and follow the 1-rank run."""
    from webmp.data.text import load_text
    from webmp.presets import EXAMPLE_CNN

    if kind == "cnn":
        config = {"model_spec": EXAMPLE_CNN, "steps": 10, "batch_size": 32, "log_every": 5}
    else:
        V = load_text(text_file).vocab_size
        spec = {"input": {"tokens": V, "context": 16}, "layers": [
            {"type": "embedding", "dim": 16},
            {"type": "residual", "layers": [{"type": "layernorm"},
                                            {"type": "causal_self_attention", "heads": 2}]},
            {"type": "linear", "out": V}]}  # fmt: skip
        config = {"model_spec": spec, "data": text_file, "steps": 10, "batch_size": 8, "log_every": 5}
        config |= {"val_tokens": 256}
    config |= {"checkpoint_every": 0, "init_scale": 1024.0, "warmup": 0}
    ranks = two_rank_run(tmp, config, f"net2-{kind}")
    assert_same_across_ranks(ranks)
    trainer = Trainer(TrainConfig(**config), out=tmp / f"net1-{kind}", progress=False, log=None, gpu=gpu)
    trainer.run()
    assert_matches_one_rank(ranks[0]["records"], trainer.records)


def checkpoint_tensors(run: Path) -> dict[str, bytes]:
    return load_checkpoint(run)[0]


def test_zero_one_is_bit_identical_to_unsharded(tmp, mlp_two_ranks):
    """--zero 1 on 2 ranks against the unsharded 2-rank run: the same records and every master,
    moment, working copy and state word of the (gathered) checkpoint the same bits, through a
    skipped step (an Inf on rank 1 at step 3, an activation overflow at step 6) and the loss-scale
    changes after them; and without an overflow over MLP's 20 steps. Each rank holds the
    moments of its own parameters only (summary.json's optimizer_memory)."""
    config = {**MLP, "steps": 8, "log_every": 8}
    inject = {"3": "inf", "6": "flag"}
    plain = two_rank_run(tmp, config, "z-plain", inject=inject)
    sharded = two_rank_run(tmp, {**config, "zero": 1}, "z-sharded", inject=inject)
    assert sharded[0]["records"] == sharded[1]["records"] == plain[0]["records"]
    assert [r["step"] for r in sharded[0]["records"] if r["skipped"]] == [2, 5]
    assert checkpoint_tensors(tmp / "z-sharded") == checkpoint_tensors(tmp / "z-plain")

    whole = two_rank_run(tmp, {**MLP, "zero": 1}, "z-whole")
    assert whole[0]["records"] == mlp_two_ranks[0]["records"]
    assert checkpoint_tensors(tmp / "z-whole") == checkpoint_tensors(tmp / "mlp2")

    memory = json.loads((tmp / "z-whole" / "summary.json").read_text())["optimizer_memory"]
    # MLP 64-32-10: W0 (masters, m, v: 12 B a weight) on rank 0, b0, W1, b1 on rank 1; the
    # biases' masters stay on every rank (the forward pass reads them in f32)
    w0, b0, w1, b1 = 64 * 32, 32, 32 * 10, 10
    assert memory["unsharded_bytes"] == 12 * (w0 + b0 + w1 + b1)
    assert memory["per_rank_bytes"] == [12 * w0 + 4 * (b0 + b1), 12 * (b0 + w1 + b1)]
    assert memory["sharded"] and memory["ranks"] == 2


def test_zero_one_on_four_ranks_is_bit_identical_to_unsharded(tmp):
    """On 4 ranks too (where an MPI library's Allreduce and Reduce_scatter group the terms each
    their own way): both sum every element in rank order (World.reduce_scatter_sum), so the sharded
    run's records and checkpoint are the unsharded run's bits, through an Inf on a rank."""
    config = {**MLP, "steps": 6, "log_every": 3}
    plain = two_rank_run(tmp, config, "z4-plain", ranks=4, inject={"2": "inf"})
    sharded = two_rank_run(tmp, {**config, "zero": 1}, "z4-sharded", ranks=4, inject={"2": "inf"})
    assert all(r["records"] == plain[0]["records"] for r in plain + sharded)
    assert [r["step"] for r in plain[0]["records"] if r["skipped"]] == [1]
    assert checkpoint_tensors(tmp / "z4-sharded") == checkpoint_tensors(tmp / "z4-plain")
    memory = json.loads((tmp / "z4-sharded" / "summary.json").read_text())["optimizer_memory"]
    assert memory["ranks"] == 4 and len(memory["per_rank_bytes"]) == 4


def test_fp8_on_two_ranks_sets_one_ranks_scales(tmp, gpu):
    """--precision fp8 on 2 ranks: each step's amax is the max over the ranks (World.allreduce_max),
    so after step 1 the amax histories and scales are one rank's bits (the same weights, and every
    row's activations and output gradients the same on its rank), sharded or not; over 10 steps
    the ranks agree on the scales, weights and state (their digest) and follow one rank's losses."""
    config = {**MLP, "precision": "fp8", "fp8_keep_ends": False, "steps": 1, "log_every": 1}
    fp8 = ("fp8_scale", "fp8_history", "fp8_cursor")
    one = Trainer(TrainConfig(**config), out=tmp / "fp8-1", progress=False, log=None, gpu=gpu)
    one.run()
    one_bits = {n: checkpoint_tensors(tmp / "fp8-1")[n] for n in fp8}
    for name, extra in (("fp8-2", {}), ("fp8-2z", {"zero": 1})):
        two_rank_run(tmp, {**config, **extra}, name)
        two = checkpoint_tensors(tmp / name)
        assert {n: two[n] for n in fp8} == one_bits, name
    long = {**config, "steps": 10, "log_every": 5}
    ranks = two_rank_run(tmp, long, "fp8-10")
    assert_same_across_ranks(ranks)
    trainer = Trainer(TrainConfig(**long), out=tmp / "fp8-10-1", progress=False, log=None, gpu=gpu)
    trainer.run()
    assert_matches_one_rank(ranks[0]["records"], trainer.records)


def test_zero_checkpoint_resumes_sharded_and_unsharded(tmp, gpu, half_plain, mlp_two_ranks, mlp_one_rank):
    """A sharded 2-rank run stopped at step 10 writes one whole checkpoint, the same bits as the
    unsharded run's; resumed on 2 sharded ranks it continues bit for bit as the uninterrupted
    unsharded run, resumed on 1 rank exactly as the unsharded checkpoint resumed on 1 rank does
    (and so within the 1-vs-2-rank tolerance of the 1-rank run)."""
    sharded = {**MLP, "zero": 1}
    two_rank_run(tmp, sharded, "z-half", stop_after=10)
    shutil.copytree(tmp / "z-half", tmp / "z-resume2")
    shutil.copytree(tmp / "z-half", tmp / "z-resume1")
    two_rank_run(tmp, sharded, "z-resume2-run", resume=str(tmp / "z-resume2"))
    assert metrics_file(tmp / "z-resume2") == metrics_file(tmp / "mlp2")
    assert checkpoint_tensors(tmp / "z-resume2") == checkpoint_tensors(tmp / "mlp2")

    assert checkpoint_tensors(tmp / "z-half") == checkpoint_tensors(half_plain)
    shutil.copytree(half_plain, tmp / "z-plain-resume1")
    for run in ("z-resume1", "z-plain-resume1"):  # on 1 rank, from the sharded and the unsharded one
        Trainer(TrainConfig(**MLP), resume=tmp / run, progress=False, log=None, gpu=gpu).run()
    assert metrics_file(tmp / "z-resume1") == metrics_file(tmp / "z-plain-resume1")
    assert checkpoint_tensors(tmp / "z-resume1") == checkpoint_tensors(tmp / "z-plain-resume1")
    assert_matches_one_rank(metrics_file(tmp / "z-resume1"), mlp_one_rank["records"])


def test_zero_on_one_rank_says_there_is_nothing_to_shard(tmp, gpu):
    lines: list[str] = []
    config = TrainConfig(**{**MLP, "steps": 1, "log_every": 1, "zero": 1})
    Trainer(config, out=tmp / "z-one", progress=False, log=lines.append, gpu=gpu).run()
    assert any("nothing to shard" in line for line in lines), lines


def test_zero_gpt_accumulating_is_bit_identical_to_unsharded(tmp, text_file):
    """The GPT (LayerNorm gains and biases, embeddings and the tied head: masters read in f32 by the
    passes, all-gathered) with 2 micro-batches a step and an Inf on rank 1 at step 3, sharded and
    not: the same records and checkpoint bits."""
    config = {**GPT, "data": text_file, "steps": 6, "log_every": 6, "grad_accum": 2}
    plain = two_rank_run(tmp, config, "zg-plain", inject={"3": "inf"})
    sharded = two_rank_run(tmp, {**config, "zero": 1}, "zg-sharded", inject={"3": "inf"})
    assert sharded[0]["records"] == plain[0]["records"]
    assert [r["step"] for r in sharded[0]["records"] if r["skipped"]] == [2]
    assert checkpoint_tensors(tmp / "zg-sharded") == checkpoint_tensors(tmp / "zg-plain")
    memory = json.loads((tmp / "zg-sharded" / "summary.json").read_text())["optimizer_memory"]
    assert max(memory["per_rank_bytes"]) < 0.6 * memory["unsharded_bytes"]
