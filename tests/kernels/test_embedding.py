"""The kernels of a character-level GPT that are not attention: token windows (windows.wgsl), the
token + position embedding forward (embed.wgsl) and its deterministic backward (token_rows.wgsl,
embed_wgrad.wgsl), the residual add (add.wgsl), and softmax_xent with padding rows, large logits
and a vocabulary-sized row. Odd shapes (T = 7, V = 11, D = 10 and 9, B = 3), every storage path,
through webmp.testing.probe.run_op as a model dispatches them.

Bounds as in kernel_cases: an f32 sum of n terms errs by at most dot_error(n) * sum|terms|,
a store in the activation format by one ulp of the stored precision.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import Cases, assert_same_bits, rng_for, stored_bound

from webmp import ops
from webmp.data.tables import check_tokens, eval_windows, perm_bits, window_starts
from webmp.engine.runtime import default_gpu
from webmp.testing import reference as ref
from webmp.testing.probe import run_op
from webmp.testing.reference import U32, check_close, dot_error

FLAG_H_STORE = 1
NO_LABEL = ref.NO_LABEL
T, V, B = 7, 11, 3
R = B * T
WIDTHS = [10, 9]


def tokens_with_duplicates(rng, n: int) -> np.ndarray:
    """n token ids below V with every id but V - 1 present (V - 1 never occurs: an empty list)."""
    idx = rng.integers(0, V - 1, n)
    idx[: V - 1] = np.arange(V - 1)
    return rng.permutation(idx).astype(np.uint32)


# Every kernel run is a registered case, cached per path (kernel_cases.Cases).
CASES = Cases()
RUNS, kernel_case, run = CASES.runs, CASES.case, CASES.run


def op(launcher, inputs, outputs, path, **sizes):
    """run_op on the session's device."""
    return run_op(launcher, inputs, outputs, path=path, gpu=default_gpu(), **sizes)


def run_h_out(launcher, inp, out, rows, cols, path, **sizes):
    """A launcher writing the h matrix `out` [rows, cols] (read back with its padding) and flags."""
    inp = {**inp, "flags": np.zeros(4, np.uint32)}
    return op(launcher, inp, {out: ((rows, cols), "padded"), "flags": None}, path, **sizes)


# --- windows of the token stream -----------------------------------------------------------------


def windows(n_tokens, batch, context, path, data_pos=0, seed=0, pos_per_window=1):
    """gather_windows on the stream 0, 1, ..., n_tokens - 1 (token = position, so idx shows which
    windows were taken); data_pos in windows, stored in state.data_pos times pos_per_window."""
    return op(
        ops.gather_windows,
        {"tokens": np.arange(n_tokens, dtype=np.uint32), "state": {"data_pos": data_pos * pos_per_window}},
        {"idx": (batch * context,), "targets": (batch * context,)},
        path,
        n_tokens=n_tokens,
        T=context,
        batch=batch,
        seed=seed,
        perm_bits=perm_bits(n_tokens - context),
        pos_per_window=pos_per_window,
    )


# (tokens, T, batch, data position in windows, seed, pos_per_window): an epoch boundary inside the
# batch (33 start positions), a batch longer than an epoch, cycle-walking (2^bits far above the
# positions), a single start position, data_pos counting windows directly.
WINDOW_CASES = [
    (40, 7, 5, 30, 0, 7),
    (40, 7, 70, 60, 5, 7),
    (1040, 16, 64, 1000, 123, 16),
    (8, 7, 3, 0, 9, 7),
    (40, 7, 3, 32, 1, 1),
]


@pytest.mark.parametrize("n,context,batch,pos,seed,ppw", WINDOW_CASES)
def test_gather_windows_is_window_starts(n, context, batch, pos, seed, ppw, path):
    out = windows(n, batch, context, path, data_pos=pos, seed=seed, pos_per_window=ppw)
    idx, targets = ref.gather_windows(np.arange(n), pos, batch, context, seed)
    assert out["idx"].tolist() == idx.tolist() and out["targets"].tolist() == targets.tolist()
    starts = window_starts(pos, batch, n - context, seed)
    assert out["idx"][::context].tolist() == starts.tolist(), "window b starts at window_starts[b]"
    assert (out["targets"] == out["idx"] + 1).all() and out["targets"].max() < n


def test_gather_windows_epoch_takes_every_start_once(gpu):
    """A whole epoch of windows (batch = n - T) starts once at every position, across two epochs."""
    n, context = 300, 9
    starts = n - context
    for epoch in (0, 1):
        out = windows(n, starts, context, "fp32", data_pos=epoch * starts, seed=3, pos_per_window=context)
        first = out["idx"][::context]
        assert sorted(first.tolist()) == list(range(starts))
        assert first.tolist() == window_starts(epoch * starts, starts, starts, 3).tolist()


def test_gather_windows_eval_pads(path):
    """30 tokens, T = 7: cdiv(29, 7) = 5 windows predict tokens 1 .. 29 once each; window 4 has one
    target (token 29), window 5 is all padding."""
    n = 30
    assert eval_windows(n, T) == 5
    toks = (np.arange(n) * 7 % 11 + 1).astype(np.uint32)  # ids 1 .. 11, so padding's 0 shows
    seen = []
    for chunk in (0, 1):  # the chunk counter on the GPU: windows chunk * B ..
        out = op(
            ops.gather_windows_eval,
            {"tokens": toks, "chunk": np.array([chunk], np.uint32)},
            {"idx": (R,), "targets": (R,)},
            path,
            n_tokens=n,
            T=T,
            batch=B,
        )
        idx, targets = ref.gather_windows_eval(toks, B, T, chunk * B)
        assert out["idx"].tolist() == idx.tolist() and out["targets"].tolist() == targets.tolist()
        seen += [t for t in out["targets"].tolist() if t != NO_LABEL]
    assert seen == toks[1:].tolist(), "every token after the first is a target exactly once, in order"
    assert out["targets"][T + 1 :].tolist() == [NO_LABEL] * (2 * T - 1) and not out["idx"][T + 1 :].any()


def test_check_tokens():
    """The host's check of a stream: ids below the vocabulary, at least one window and a target."""
    assert check_tokens(np.arange(8) % V, V, T, "ok").dtype == np.uint32
    with pytest.raises(ValueError, match="0 .. 10"):
        check_tokens(np.arange(12), V, T, "ids")
    with pytest.raises(ValueError, match="more than 7 tokens"):
        check_tokens(np.arange(7), V, T, "short")


# --- embedding forward ---------------------------------------------------------------------------


def _width(name, path):
    """(D, rng) of a case named .../D<width>."""
    return int(name.rsplit("D", 1)[1]), rng_for(name, path)


def _embed_fwd_case(name, path):
    D, rng = _width(name, path)
    inp = {
        "idx": tokens_with_duplicates(rng, R),
        "wte": rng.standard_normal((V, D)).astype(np.float32),
        "wpe": (0.5 * rng.standard_normal((T, D))).astype(np.float32),
    }
    return inp, run_h_out(ops.embed_fwd, inp, "X", R, D, path, R=R, T=T, D=D)


def _add_case(name, path):
    D, rng = _width(name, path)
    inp = {
        "A": ref.round_h(rng.standard_normal((R, D)), path),
        "Y": ref.round_h(100 * rng.standard_normal((R, D)), path),
    }
    return inp, run_h_out(ops.add_h, inp, "Y", R, D, path, M=R, N=D)


for _d in WIDTHS:
    kernel_case(f"embed_fwd/D{_d}")(_embed_fwd_case)
    kernel_case(f"add_h/D{_d}")(_add_case)


@pytest.mark.parametrize("D", WIDTHS)
def test_embed_fwd(D, path):
    inp, out = run(f"embed_fwd/D{D}", path)
    exact = ref.embed_fwd(inp["idx"], inp["wte"], inp["wpe"])
    # one f32 addition of the two table entries, then the store
    check_close(out["X"][:, :D], exact, stored_bound(exact, 2 * U32 * np.abs(exact), path), "X")
    if D % 2:
        assert not out["X"][:, D].any(), "the padding half of odd rows stays zero"
    assert out["flags"][0] == 0


def test_embed_fwd_flags_overflow(path):
    """60000 + 6000 does not fit f16 (flagged, whichever neighbour the store picks); it fits fp32."""
    D = 3
    wte = np.zeros((V, D), np.float32)
    wte[4, 2] = 60000.0
    wpe = np.full((T, D), 6000.0, np.float32)
    inp = {"idx": np.full(R, 4, np.uint32), "wte": wte, "wpe": wpe}
    out = run_h_out(ops.embed_fwd, inp, "X", R, D, path, R=R, T=T, D=D)
    assert out["flags"][0] == (0 if path == "fp32" else FLAG_H_STORE)
    assert (out["X"][:, :2] == 6000.0).all()


# --- embedding backward ----------------------------------------------------------------------------

# (name, rows): the test shape, and more rows than token_rows' 64 threads (chunks of 5 rows)
WGRAD_SHAPES = {"R21": R, "R259": 37 * T}


def _wgrad_inputs(name, path, D, rows):
    rng = rng_for(name, path)
    return {
        "idx": tokens_with_duplicates(rng, rows),
        # magnitudes 2^-10 .. 2^12: f16 values whose sums need more than f32's 24 bits
        "dX": ref.round_h(rng.standard_normal((rows, D)) * 2.0 ** rng.integers(-10, 13, (rows, D)), path),
        "dwte0": (100 * rng.standard_normal((V, D))).astype(np.float32),
    }


def _wgrad_run(inp, D, accumulate, path):
    rows = len(inp["idx"])
    rows_out = op(
        ops.token_rows,
        {"idx": inp["idx"], "spans": np.full((V, 2), 0xDEAD, np.uint32), "order": np.zeros(rows, np.uint32)},
        ["spans", "order"],
        path,
        R=rows,
        V=V,
    )
    grads = op(
        ops.embed_wgrad,
        {
            "spans": rows_out["spans"],
            "order": rows_out["order"],
            "dX": inp["dX"],
            "dwte": inp["dwte0"] if accumulate else np.full((V, D), np.nan, np.float32),
            "dwpe": np.full((T, D), np.nan, np.float32),
        },
        ["dwte", "dwpe"],
        path,
        R=rows,
        T=T,
        V=V,
        D=D,
        accumulate=accumulate,
    )
    return {**rows_out, **grads}


WGRAD_NAMES = [
    f"embed_wgrad/{s}/D{d}/{mode}" for s in WGRAD_SHAPES for d in WIDTHS for mode in ("write", "add")
]
for _n in WGRAD_NAMES:

    @kernel_case(_n)
    def _wgrad_case(name, path):
        _, shape, d, mode = name.split("/")
        D = int(d[1:])
        inp = _wgrad_inputs(f"embed_wgrad/{shape}/{d}", path, D, WGRAD_SHAPES[shape])
        return inp, _wgrad_run(inp, D, mode == "add", path)


@pytest.mark.parametrize("name", WGRAD_NAMES)
def test_token_rows(name, path):
    """order lists each token's rows ascending, token by token (a stable sort); spans = (start,
    count); a token that never occurs has count 0."""
    inp, out = run(name, path)
    spans, order = ref.token_rows(inp["idx"], V)
    assert out["spans"].tolist() == spans.tolist() and out["order"].tolist() == order.tolist()
    assert out["spans"][V - 1, 1] == 0


@pytest.mark.parametrize("name", WGRAD_NAMES)
def test_embed_wgrad(name, path):
    inp, out = run(name, path)
    add = name.endswith("add")
    dwte, dwpe, abs_te, abs_pe = ref.embed_wgrad(inp["idx"], inp["dX"], V, T, inp["dwte0"] if add else None)
    rows = len(inp["idx"])
    check_close(out["dwte"], dwte, dot_error(rows + 1) * abs_te, f"{name} dwte")
    check_close(out["dwpe"], dwpe, dot_error(rows // T) * abs_pe, f"{name} dwpe")
    assert (out["dwte"][V - 1] == (inp["dwte0"][V - 1] if add else 0)).all(), "an absent token's row"


@pytest.mark.parametrize("name", WGRAD_NAMES)
def test_embed_wgrad_sums_in_row_order(name, path):
    """Bit for bit the float32 sums in row order (started at 0, the old dwte added last). The inputs
    span 2^22 in magnitude, so the rounding depends on the order (test_row_order_matters). This
    holds on adapters whose f32 additions round to nearest, as every known GPU's do (WGSL would
    allow either neighbour)."""
    inp, out = run(name, path)
    dwte, dwpe = ref.embed_wgrad_f32(
        inp["idx"], inp["dX"], V, T, inp["dwte0"] if name.endswith("add") else None
    )
    assert out["dwte"].tobytes() == dwte.tobytes() and out["dwpe"].tobytes() == dwpe.tobytes()


def test_row_order_matters():
    """The inputs above do tell orders apart: summing the rows in reverse gives other bits."""
    for name in WGRAD_NAMES:
        _, shape, d, mode = name.split("/")
        D = int(d[1:])
        for path in ("native", "fp32"):
            inp = _wgrad_inputs(f"embed_wgrad/{shape}/{d}", path, D, WGRAD_SHAPES[shape])
            fwd = ref.embed_wgrad_f32(inp["idx"], inp["dX"], V, T)[0]
            rev = ref.embed_wgrad_f32(inp["idx"][::-1], inp["dX"][::-1], V, T)[0]
            assert fwd.tobytes() != rev.tobytes(), name


def test_embed_wgrad_is_deterministic(path):
    """Run twice on duplicate-heavy ids (2 tokens over 259 rows): identical bytes."""
    D = 9
    inp = _wgrad_inputs("embed_wgrad/determinism", path, D, 37 * T)
    inp["idx"] = (inp["idx"] % 2).astype(np.uint32)
    first = _wgrad_run(inp, D, True, path)
    second = _wgrad_run(inp, D, True, path)
    for k in first:
        assert first[k].tobytes() == second[k].tobytes(), k


# --- residual add --------------------------------------------------------------------------------


@pytest.mark.parametrize("D", WIDTHS)
def test_add_h(D, path):
    inp, out = run(f"add_h/D{D}", path)
    exact = inp["A"].astype(np.float64) + inp["Y"]
    check_close(out["Y"][:, :D], exact, stored_bound(exact, 2 * U32 * np.abs(exact), path), "Y")
    if D % 2:
        assert not out["Y"][:, D].any(), "the padding half of odd rows stays zero"
    assert out["flags"][0] == 0


def test_add_h_flags_overflow(path):
    A = np.array([[40000.0, 1.0, -2.0]])
    Y = np.array([[40000.0, 2.0, 5.0]])
    out = run_h_out(ops.add_h, {"A": A, "Y": Y}, "Y", 1, 3, path, M=1, N=3)
    assert out["flags"][0] == (0 if path == "fp32" else FLAG_H_STORE)
    assert out["Y"][0, 1:].tolist() == [3.0, 3.0, 0.0], "the padding half stays zero"


# --- softmax cross-entropy over a vocabulary ---------------------------------------------------------


def _softmax(logits, labels, scale, path, counted=None):
    rows, C = logits.shape
    return op(
        ops.softmax_xent,
        {
            "logits": logits.astype(np.float32),
            "labels": labels.astype(np.uint32),
            "state": {"scale": scale},
            "flags": np.zeros(4, np.uint32),
        },
        {"loss_rows": (rows,), "dlogits": ((rows, C), "padded"), "flags": None},
        path,
        B=rows,
        C=C,
        counted=counted,
    )


def _check_softmax(inp, out, path, what):
    z, labels, scale, counted = inp["logits"].astype(np.float64), inp["labels"], inp["scale"], inp["counted"]
    C = z.shape[1]
    loss, dl, bad = ref.softmax_xent(z, labels, scale, counted)
    assert not bad
    loss_err, f32_err = ref.softmax_xent_error(z, labels, scale, counted)
    check_close(out["loss_rows"], loss, loss_err, f"{what} loss")
    check_close(out["dlogits"][:, :C], dl, stored_bound(dl, f32_err, path), f"{what} dlogits")
    if C % 2:
        assert not out["dlogits"][:, C].any(), "padding stays zero"
    assert out["flags"][0] == 0


@kernel_case("softmax/padding")
def _softmax_padding_case(name, path):
    """21 rows over V = 11, 5 of them padding; a padding row holds logits whose loss would not be
    finite (and NaN), which must not raise a flag."""
    rng = rng_for(name, path)
    logits = (3 * rng.standard_normal((R, V))).astype(np.float32)
    labels = rng.integers(0, V, R).astype(np.uint32)
    pad = [2, 9, 10, 17, 20]
    labels[pad] = NO_LABEL
    logits[9, 0], logits[9, 1], logits[10, 3] = 3e38, -3e38, np.nan
    inp = {"logits": logits, "labels": labels, "scale": 512.0, "counted": R - len(pad)}
    return inp, _softmax(logits, labels, 512.0, path, counted=R - len(pad))


def test_softmax_ignores_padding_rows(path):
    inp, out = run("softmax/padding", path)
    pad = inp["labels"] == NO_LABEL
    assert (out["loss_rows"][pad] == 0).all() and not out["dlogits"][pad].any()
    keep = ~pad
    sub = {**inp, "logits": inp["logits"][keep], "labels": inp["labels"][keep]}
    _check_softmax(
        sub, {**out, "loss_rows": out["loss_rows"][keep], "dlogits": out["dlogits"][keep]}, path, "padding"
    )


@kernel_case("softmax/large_logits")
def _softmax_large_case(name, path):
    """Logits ~ 1e4 (exp would overflow without the max subtraction) over V = 255 (odd), 256 rows."""
    rng = rng_for(name, path)
    rows, C = 256, 255
    logits = (1e4 + 4 * rng.standard_normal((rows, C))).astype(np.float32)
    logits[::7] -= 2e4  # rows around -1e4 too
    labels = rng.integers(0, C, rows).astype(np.uint32)
    inp = {"logits": logits, "labels": labels, "scale": 4096.0, "counted": None}
    return inp, _softmax(logits, labels, 4096.0, path)


def test_softmax_large_logits(path):
    """Loss and gradient to f32 precision (the bound: a few ulps of the logits' magnitude for the
    loss, of each probability for dlogits), no overflow flag."""
    inp, out = run("softmax/large_logits", path)
    _check_softmax(inp, out, path, "large logits")
    assert np.isfinite(out["loss_rows"]).all() and out["loss_rows"].max() < 100


def test_softmax_vocabulary_rows(gpu):
    """A character model's batch: 8192 rows over V = 256, one thread a row (128 workgroups); counted
    = 8192 given explicitly is the default, bit for bit."""
    rng = np.random.default_rng(8192)
    rows, C = 8192, 256
    logits = (5 * rng.standard_normal((rows, C))).astype(np.float32)
    labels = rng.integers(0, C, rows).astype(np.uint32)
    out = _softmax(logits, labels, 2.0**15, "fp32")
    inp = {"logits": logits, "labels": labels, "scale": 2.0**15, "counted": None}
    _check_softmax(inp, out, "fp32", "8192x256")
    again = _softmax(logits, labels, 2.0**15, "fp32", counted=rows)
    assert all(out[k].tobytes() == again[k].tobytes() for k in out)


# --- native and emulated f16 agree bit for bit ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(RUNS))
def test_native_matches_emulated(name, gpu):
    """Same f32 arithmetic on the same f16 values; the stores differ only in the conversion builtin
    (see kernel_cases.Cases.native_matches_emulated)."""
    if not gpu.has_f16:
        pytest.skip("this adapter lacks 'shader-f16'")
    assert_same_bits(name, run(name, "native")[1], run(name, "emulated")[1])


# --- validation loss: summed in a fixed order on the GPU ------------------------------------------


def test_eval_loss_chunks_and_total(path):
    """Three chunks of 21 rows over V = 11 with padding rows (NaN logits among them) into partial,
    then their total: each partial is the sum of softmax_xent's row losses, within the per-row
    loss bound plus an f32 sum of 21 terms, at the place the chunk counter says (a counter past
    the last chunk writes nothing); the total is the three partials added in order."""
    rng = rng_for("eval_loss", path)
    chunks = 3
    logits = (4 * rng.standard_normal((chunks, R, V))).astype(np.float32)
    labels = rng.integers(0, V, (chunks, R)).astype(np.uint32)
    labels[1, [0, 5, 20]] = NO_LABEL
    logits[1, 5, 2] = np.nan
    labels[2, :] = NO_LABEL  # a chunk of padding only (the tail of the last window)
    partial = np.zeros(chunks, np.float32)
    for c in (*range(chunks), chunks):
        out = op(
            ops.eval_loss_chunk,
            {"logits": logits[c % chunks], "labels": labels[c % chunks], "partial": partial,
             "total": np.zeros(1, np.float32), "chunk": np.array([c], np.uint32)},
            {"partial": (chunks,)},
            path, B=R, C=V, chunks=chunks,
        )  # fmt: skip
        if c == chunks:
            assert np.array_equal(out["partial"], partial), "a chunk past the last writes nothing"
            break
        assert np.array_equal(out["partial"][np.arange(chunks) != c], partial[np.arange(chunks) != c])
        partial = out["partial"].astype(np.float32)
        loss, _, _ = ref.softmax_xent(logits[c], labels[c])
        loss_err, _ = ref.softmax_xent_error(np.nan_to_num(logits[c]), labels[c])
        bound = loss_err.sum() + dot_error(R) * np.abs(loss).sum()
        check_close(partial[c], loss.sum(), bound, f"partial[{c}]")
    assert partial[2] == 0
    out = op(
        ops.eval_loss_total,
        {"logits": logits[0], "labels": labels[0], "partial": partial,
         "chunk": np.array([chunks], np.uint32)},
        {"total": (1,)},
        path, B=R, C=V, chunks=chunks,
    )  # fmt: skip
    want = np.float32(np.float32(partial[0] + partial[1]) + partial[2])
    assert out["total"][0] == want


def test_eval_loss_large_logits(path):
    """The validation loss's rows as softmax_xent's, log(sum) - (l_y - max): logits far from 0 with
    an O(1) spread and the row [3e38, 3e38, -3e38, ...] with label 0 (loss ln 2) against float64.
    (max + log(sum)) - l_y rounded each row's loss to the logits' ulp (0 for the last row)."""
    rng = rng_for("eval_loss/large_logits", path)
    bases = [1e3, -1e3, 2.0**22, -(2.0**23), 1e6, -3e7, 3e38]
    C = 7
    logits = (np.array(bases)[:, None] + rng.integers(-6, 7, (len(bases), C)) * 0.5).astype(np.float32)
    labels = rng.integers(0, C, len(bases)).astype(np.uint32)
    logits[-1] = [3e38, 3e38] + [-3e38] * (C - 2)
    labels[-1] = 0
    n = len(bases)
    partial = np.zeros(1, np.float32)
    out = op(
        ops.eval_loss_chunk,
        {"logits": logits, "labels": labels, "partial": partial, "total": np.zeros(1, np.float32),
         "chunk": np.zeros(1, np.uint32)},
        {"partial": (1,)},
        path, B=n, C=C, chunks=1,
    )  # fmt: skip
    loss, _, _ = ref.softmax_xent(logits, labels)
    assert loss[-1] == np.log(2)
    loss_err, _ = ref.softmax_xent_error(logits, labels)
    check_close(out["partial"][0], loss.sum(), loss_err.sum() + dot_error(n) * np.abs(loss).sum(), "sum")
