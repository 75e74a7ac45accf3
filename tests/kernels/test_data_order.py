"""The GPU's data order (gather.wgsl) is webmp.data.tables.batch_rows, bit for bit, across epochs."""

from __future__ import annotations

import numpy as np
import pytest

from webmp import ops
from webmp.data.tables import batch_rows, perm_bits, permute
from webmp.testing import reference as ref
from webmp.testing.probe import run_op

NO_LABEL = 0xFFFFFFFF


def gather(entry, n_rows, batch, path, gpu, data_pos=0, seed=0, chunk=0, features=5):
    """Runs a gather kernel on a dataset whose row r holds r % 256 + c / 8 in column c (exact in
    f16) and label r, so the output tells which rows were taken."""
    xs = np.arange(n_rows)[:, None] % 256 + np.arange(features)[None, :] / 8.0
    params = {"n_rows": n_rows, "features": features, "batch": batch}
    if entry == "gather_eval":
        where = {"chunk": np.array([chunk], np.uint32)}
    else:
        params.update(seed=seed, perm_bits=perm_bits(n_rows))
        where = {"state": {"data_pos": data_pos}}
    out = run_op(
        getattr(ops, entry),
        {"xs": xs.astype(np.float32), "ys": np.arange(n_rows, dtype=np.uint32), **where},
        {"X": ((batch, features), "padded"), "y": (batch,)},
        **params,
        path=path,
        gpu=gpu,
    )
    return xs, out


# (rows in the dataset, batch, data position, seed): epoch boundaries inside the batch, a batch
# spanning more than one epoch, sizes where the permutation's domain 2^bits is far above n_rows
# (cycle-walking), a single row.
CASES = [(37, 16, 30, 0), (37, 80, 70, 5), (1025, 64, 1000, 123), (1, 3, 0, 9), (1438, 8, 1434, 0)]


@pytest.mark.parametrize("n,batch,pos,seed", CASES)
def test_gather_train_is_batch_rows(n, batch, pos, seed, path, gpu):
    xs, out = gather("gather_train", n, batch, path, gpu, data_pos=pos, seed=seed)
    rows = batch_rows(pos, batch, n, seed)
    assert out["y"].tolist() == rows.tolist()
    X = out["X"]
    assert np.array_equal(X[:, :5], ref.round_h(xs[rows], path)) and not X[:, 5].any()


def test_gather_eval_pads_the_last_chunk(path, gpu):
    """Chunk 2 of 16 rows (the counter read on the GPU) over 37 rows: rows 32 .. 36, then padding."""
    xs, out = gather("gather_eval", 37, 16, path, gpu, chunk=2)
    assert out["y"].tolist() == [32, 33, 34, 35, 36] + [NO_LABEL] * 11
    assert np.array_equal(out["X"][:5, :5], xs[32:]) and not out["X"][5:].any()
    xs, out = gather("gather_eval", 37, 16, path, gpu, chunk=1)
    assert out["y"].tolist() == list(range(16, 32)) and np.array_equal(out["X"][:, :5], xs[16:32])


@pytest.mark.parametrize("n", [1, 2, 37, 1025, 1438])
def test_permutation_is_a_bijection(n):
    for seed in (0, 1, 2**32 - 1):
        for epoch in range(4):
            assert sorted(permute(np.arange(n), epoch, n, seed).tolist()) == list(range(n))
    if n > 2:  # and it is not the identity, nor the same every epoch
        assert not np.array_equal(permute(np.arange(n), 0, n, 0), np.arange(n))
        assert not np.array_equal(permute(np.arange(n), 0, n, 0), permute(np.arange(n), 1, n, 0))


def test_gpu_epoch_is_a_permutation(gpu):
    """A whole epoch gathered on the GPU takes every row once, in batch_rows order."""
    n = 1438
    _, out = gather("gather_train", n, n, "fp32", gpu, data_pos=2 * n, seed=3, features=1)
    assert sorted(out["y"].tolist()) == list(range(n))
    assert out["y"].tolist() == batch_rows(2 * n, n, n, 3).tolist()


def test_training_step_gathers_batch_rows(trainer, digits):
    """In a real step, across the epoch boundary: the batch buffers hold batch_rows' rows."""
    from webmp.engine.plan import unpack_h
    from webmp.engine.state import decode_state
    from webmp.testing.probe import state_words

    plan, rt = trainer("emulated")
    n, B, seed = len(digits.train_x), plan["config"]["batch_size"], plan["config"]["seed"]
    state = decode_state(rt.read("state"))
    rt.write("state", state_words({**state, "data_pos": n - 3}).tobytes())
    for pos in (n - 3, n - 3 + B):
        rt.run("train_step")
        rows = batch_rows(pos, B, n, seed)
        assert np.frombuffer(rt.read("y"), np.uint32)[:B].tolist() == digits.train_y[rows].tolist()
        X = unpack_h(rt.read("X"), B, digits.features, "emulated")
        x = digits.train_x[rows].astype(np.float64)  # stored to f16: within one ulp
        ref.check_close(X, x, ref.store_error("emulated") * np.abs(x) + ref.store_tiny("emulated"), "X")
    assert decode_state(rt.read("state"))["data_pos"] == n - 3 + 2 * B
