"""Text generation (`webmp sample`): the kernels sample_window.wgsl, sample_rows.wgsl and
sample_next.wgsl against their numpy twins (webmp.testing.reference) at odd sizes (T = 7, V = 11
and 97) on every storage path, the sampling plan's forward pass against the training plan's, a
tiny GPT's greedy text against a float64 decode, and the command line on a run directory made by
`webmp train --model gpt`.

sample_next's draw at a temperature compares "running sum > u * total" in f32: with the RNG's u
reproduced bit for bit (reference.sample_uniform), the token is exactly reference.sample_draw's
unless a cumulative probability lies within reference.sample_draw_bound of u (about 1e-5 here; such
draws are counted and must be rare).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from kernel_cases import enlarged_gpt_params

from webmp import ops
from webmp.cli import main, sample_parser
from webmp.config import TrainConfig
from webmp.engine.runtime import default_gpu
from webmp.testing import reference as ref
from webmp.testing.probe import run_op

T = 7
CAP = 40  # seq's capacity in the kernel tests


def op(launcher, inputs, outputs, path, **params):
    return run_op(launcher, inputs, outputs, path=path, gpu=default_gpu(), **params)


# --- sample_window ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 6, 7, 8, 11, 12, 20])
def test_sample_window(path, n):
    """The last min(n, T) tokens at positions 0.., then zeros: shorter (1, 3, 6), as long as (7) and
    longer than T (8, 11, 12); n beyond the capacity (20 > 12) counts as the capacity."""
    cap = 12
    seq = (np.arange(cap, dtype=np.uint32) * 5 % 11 + 1).astype(np.uint32)  # ids 1 .. 11, so 0 shows
    out = op(
        ops.sample_window,
        {"seq": seq, "seq_len": np.array([n], np.uint32)},
        {"idx": (T,)},
        path,
        T=T,
        capacity=cap,
    )
    want = ref.sample_window(seq, n, T)
    assert out["idx"].tolist() == want.tolist()
    shown = min(n, cap, T)
    assert out["idx"][:shown].tolist() == seq[min(n, cap) - shown : min(n, cap)].tolist()
    assert not out["idx"][shown:].any()


@pytest.mark.parametrize("cols", [12, 13])
@pytest.mark.parametrize("n", [1, 4, 7, 9])
def test_sample_row_take_and_put(path, cols, n):
    """The newest token's row (min(n, T) - 1; n > T is the last row) taken out of a window's h matrix
    [T, cols] and put into one, the other rows kept, word for word: an even and an odd column count
    (the pad half of a row's last word)."""
    rng = np.random.default_rng(n * 100 + cols)
    window = ref.round_h(rng.standard_normal((T, cols)), path)
    row = ref.round_h(rng.standard_normal((1, cols)), path)
    seq_len = np.array([n], np.uint32)
    padded = ((T, cols), "padded")
    taken = op(
        ops.sample_row_take,
        {"seq_len": seq_len, "X": window},
        {"Y": ((1, cols), "padded")},
        path,
        T=T,
        cols=cols,
    )
    put = op(
        ops.sample_row_put, {"seq_len": seq_len, "X": row, "Y": window}, {"Y": padded}, path, T=T, cols=cols
    )
    want_taken, want_put = ref.sample_row_take(window, n), ref.sample_row_put(window, row, n)
    assert np.array_equal(taken["Y"][:, :cols], want_taken) and np.array_equal(put["Y"][:, :cols], want_put)
    assert not taken["Y"][:, cols:].any() and not put["Y"][:, cols:].any(), "pad halves stay zero"
    assert np.array_equal(
        np.delete(put["Y"][:, :cols], min(n, T) - 1, 0), np.delete(window, min(n, T) - 1, 0)
    )


@pytest.mark.parametrize("D", [12, 13])
@pytest.mark.parametrize("n", [1, 4, 7, 9, 20])
def test_embed_row_is_the_windows_newest_row(path, D, n):
    """embed_row: the newest token's embedding, read from seq, is row min(n, T) - 1 of the window's
    embed_fwd (after sample_window) word for word: an even and an odd width, n past T and past the
    capacity (20 > 12)."""
    cap, V = 12, 11
    rng = np.random.default_rng(n * 100 + D)
    seq = (np.arange(cap, dtype=np.uint32) * 5 % V).astype(np.uint32)
    wte, wpe = rng.standard_normal((V, D)).astype(np.float32), rng.standard_normal((T, D)).astype(np.float32)
    seq_len, flags = np.array([n], np.uint32), np.zeros(4, np.uint32)
    window_ids = {"seq": seq, "seq_len": seq_len}
    idx = op(ops.sample_window, window_ids, {"idx": (T,)}, path, T=T, capacity=cap)["idx"]
    window = op(
        ops.embed_fwd, {"idx": idx, "wte": wte, "wpe": wpe, "flags": flags}, {"X": ((T, D), "padded")},
        path, R=T, T=T, D=D,
    )["X"]  # fmt: skip
    row = op(
        ops.embed_row, {"seq": seq, "seq_len": seq_len, "wte": wte, "wpe": wpe, "flags": flags},
        {"X": ((1, D), "padded"), "flags": None}, path, T=T, D=D, capacity=cap,
    )  # fmt: skip
    assert np.array_equal(row["X"], window[min(n, T) - 1 : min(n, T)]) and row["flags"][0] == 0
    token = seq[min(n, cap) - 1]  # the newest token the window holds
    want = ref.round_h(wte[token] + wpe[min(n, T) - 1], path)  # the f32 sum, rounded to the format
    assert np.array_equal(row["X"][0, :D], want)


def test_sample_rows_check_their_buffers():
    from webmp.engine.plan import PlanBuilder

    pb = PlanBuilder("native")
    pb.u32("seq_len", (1,), "data")
    pb.h("X", T, 12)
    pb.h("Y", 2, 12)
    with pytest.raises(ValueError, match=r"sample_row_take: buffer Y has 48 bytes.*\[1, 12\]"):
        ops.sample_row_take(pb, "p", seq_len="seq_len", X="X", Y="Y", T=T, cols=12)
    with pytest.raises(ValueError, match=r"sample_row_put: buffer Y has 48 bytes.*\[7, 12\]"):
        ops.sample_row_put(pb, "p", seq_len="seq_len", X="X", Y="Y", T=T, cols=12)


# --- sample_next: greedy -----------------------------------------------------------------------------


def next_token(path, logits, n, V, temperature=0.0, seed=0, cap=CAP, seq=None):
    """sample_next once on seq (default: ids 0, 1, ... mod V) holding n tokens; (seq, seq_len) after."""
    seq = (np.arange(cap) % V).astype(np.uint32) if seq is None else seq
    out = op(
        ops.sample_next,
        {"logits": logits.astype(np.float32), "seq": seq, "seq_len": np.array([n], np.uint32)},
        {"seq": (cap,), "seq_len": (1,)},
        path,
        V=V,
        T=T,
        capacity=cap,
        temperature=temperature,
        seed=seed,
    )
    return seq, out["seq"], int(out["seq_len"][0])


# (V, columns sharing the row's maximum): with V = 11 each of the 64 threads holds one column (or
# none); with V = 97, two (threads 49 .. 63 none). Ties inside one thread's columns, across
# threads, and in the last column.
TIES = [
    (11, [3, 9]),
    (11, [0, 10]),
    (11, [10]),
    (97, [7, 6, 40]),
    (97, [41, 40]),
    (97, [96]),
    (97, [95, 94, 3]),
]


@pytest.mark.parametrize("V,ties", TIES)
@pytest.mark.parametrize("n", [1, 4, 7, 12])
def test_sample_next_argmax_ties_to_lowest_id(path, V, ties, n):
    """Temperature 0: the first of equal maxima, read from row min(n, T) - 1 (the window's last real
    position), written at seq[n]; every other row holds larger values that must not be read."""
    rng = np.random.default_rng(V * 100 + n + ties[0])
    logits = rng.standard_normal((T, V)).astype(np.float32)
    row = min(n, T) - 1
    logits[np.arange(T) != row] += 10.0  # any other row would pick another token
    logits[row, ties] = 3.5
    before, seq, length = next_token(path, logits, n, V)
    assert seq[n] == min(ties) == ref.sample_draw(np.eye(V)[np.argmax(logits[row])], 0.0)
    assert length == n + 1
    assert np.array_equal(np.delete(seq, n), np.delete(before, n)), "only seq[n] is written"


def test_sample_next_full_or_empty_writes_nothing(path):
    """seq_len == capacity (full) or 0 (no token to continue): seq and seq_len stay as they are."""
    logits = np.random.default_rng(0).standard_normal((T, 11)).astype(np.float32)
    for n in (CAP, 0):
        before, seq, length = next_token(path, logits, n, 11, temperature=0.8)
        assert length == n and np.array_equal(seq, before)


# --- sample_next: temperature ----------------------------------------------------------------------


@pytest.mark.parametrize("V", [11, 97])
@pytest.mark.parametrize("temperature,seed", [(0.8, 0), (2.0, 12345), (0.3, 2**32 - 1)])
def test_sample_next_draws_as_the_numpy_twin(path, V, temperature, seed):
    """Positions n = 7 .. CAP - 1 (row T - 1 each time, a fresh u per position): the token is
    reference.sample_draw's for the twin's u unless a cumulative probability is within
    sample_draw_bound of u."""
    rng = np.random.default_rng(V + seed % 1000)
    # logits / temperature ~ normal(0, 1.5): spread draws at every temperature
    logits = (1.5 * temperature * rng.standard_normal((T, V))).astype(np.float32)
    t32, cutoff = ops.sample_temperature(temperature)
    row = logits[T - 1]
    p = ref.sample_probs(row, t32, cutoff)
    bound = ref.sample_draw_bound(row, t32, cutoff)
    assert bound < 1e-4
    cum = np.cumsum(p)
    got, exact, close = [], 0, 0
    for n in range(T, CAP):
        _, seq, length = next_token(path, logits, n, V, temperature, seed)
        assert length == n + 1
        u = float(ref.sample_uniform(seed, n))
        token = int(seq[n])
        got.append(token)
        if np.abs(cum - u).min() <= bound:
            close += 1
            assert 0 <= token < V
        else:
            exact += 1
            assert token == ref.sample_draw(p, u), f"position {n}: u {u}, p {p}"
    print(f"V {V} T {temperature}: {exact} exact, {close} within the bound {bound:.2g}")
    assert close <= 1
    assert len(set(got)) >= 3, "the draws should spread over several tokens"


def test_sample_uniform_twin():
    """The RNG's twin: 24-bit values over [0, 1), different per position and per seed."""
    u = ref.sample_uniform(7, np.arange(4096))
    assert u.min() >= 0 and u.max() < 1 and np.all(u * 2**24 == np.round(u * 2**24))
    assert abs(u.mean() - 0.5) < 0.02 and len(np.unique(u)) > 4000
    assert not np.array_equal(u, ref.sample_uniform(8, np.arange(4096)))


def test_sample_temperature_constants():
    assert ops.sample_temperature(0.0) == (0.0, 0.0)
    assert ops.sample_temperature(1e-40) == (0.0, 0.0)  # below the smallest normal f32: greedy
    t, cut = ops.sample_temperature(0.8)
    assert t == float(np.float32(0.8)) and cut == float(np.float32(87 * t))
    assert np.isfinite(np.float32(ops.sample_temperature(1e38)[1]))  # the cutoff stays a finite f32
    for bad in (-0.1, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            ops.sample_temperature(bad)


# --- the sampling plan -----------------------------------------------------------------------------

V_E2E, D_E2E, H_E2E, L_E2E, T_E2E = 11, 16, 2, 1, 8
VOCAB = list("abcdefghij ")


def e2e_params() -> dict:
    """gpt_init's parameters, matrices x15 and non-trivial LayerNorm parameters and biases, so that
    the greedy choices have clear margins: on the decode below the smallest top-2 gap is 0.072 and
    the text varies after the window starts sliding (seed 24 of the first 30 tried)."""
    return enlarged_gpt_params(V_E2E, D_E2E, L_E2E, H_E2E, T_E2E, 24)


def e2e_config(path: str) -> TrainConfig:
    return TrainConfig(
        model="gpt", n_layer=L_E2E, d_model=D_E2E, n_head=H_E2E, context=T_E2E,
        precision="fp32" if path == "fp32" else "mixed", batch_size=1,
    )  # fmt: skip


def test_sample_plan_forward_is_the_training_forward():
    """sample_step = sample_window, then exactly train_step's forward dispatches for one window
    (same kernels, constants and buffers), then sample_next; no gradient or optimizer buffers."""
    from webmp.data.text import tokenize
    from webmp.models import build_plan
    from webmp.models.gpt import build_gpt_sample_plan

    corpus = tokenize("".join(VOCAB) * 4, "t", "t", "0")
    assert corpus.vocab == sorted(VOCAB)
    for path, tie in (("emulated", True), ("fp32", False)):
        cfg = e2e_config(path).model_copy(update={"tie_head": tie})
        train, _ = build_plan(cfg, corpus, path)
        params = ref.gpt_init(V_E2E, D_E2E, L_E2E, H_E2E, T_E2E, np.random.default_rng(0), tie)
        plan, _ = build_gpt_sample_plan(
            cfg, corpus.vocab, path, params=params, prompt=[1, 2], tokens=5, temperature=0.5, seed=1
        )

        def described(p, dispatches):
            kernels = {k["name"]: k for k in p["kernels"]}
            ks = [kernels[d["kernel"]] for d in dispatches]
            return [
                (k["sources"], k["entry"], k["constants"], d["bind"], d["workgroups"])
                for k, d in zip(ks, dispatches, strict=True)
            ]

        steps = plan["programs"]["sample_step"]
        entries = [described(plan, [d])[0][1] for d in steps]
        assert entries[0] == "sample_window" and entries[-1] == "sample_next"
        forward = described(train, train["programs"]["train_step"][1 : len(steps) - 1])
        assert described(plan, steps[1:-1]) == forward
        assert [e[1] for e in forward][-1] == "matmul_logits"
        assert plan["memory"]["gradients"] == plan["memory"]["optimizer_state"] == 0
        assert set(plan["programs"]) == {"sample_step", "sample_row"}  # (the row's: test_sample_cache.py)
        assert plan["sample"]["vocab"] == corpus.vocab


def ref_logits(params, window, store=None):
    w = np.asarray(window, np.int64)[None]
    _, _, cache = ref.gpt_loss_and_grads(
        params, w, np.zeros_like(w), n_layer=L_E2E, n_head=H_E2E, tie_head=True, grads=False, store=store,
        attn_scale=ops.attention_scale(D_E2E // H_E2E),
    )  # fmt: skip
    return cache["logits"][-1]


# The GPU's logits against float64 on this model (measured on lavapipe over 30 steps): fp32 within
# 1.6e-6, f16 within 3.4e-3 (logits up to 3). Bounds with headroom: LOGIT_ERR; a greedy choice is checked
# where the reference's top-2 margin exceeds twice it.
LOGIT_ERR = {"fp32": 2.0**-14, "native": 2.0**-6, "emulated": 2.0**-6}
PROMPT = [0, 3, 5]  # shorter than the context (8): windows grow, then slide
N_E2E = 24


@pytest.mark.parametrize("tokens_per_submit", [64, 5])
def test_greedy_decode_matches_float64(path, gpu, tokens_per_submit):
    """GPU greedy tokens (N_E2E after a 3-token prompt, in one submit or in submits of 5) against
    the float64 reference: on every step whose top-2 margin exceeds 2 LOGIT_ERR (evaluated on the
    GPU's own prefix, so a difference would not hide the steps after it) the token is the
    reference's argmax; and the whole text equals an independent float64 greedy decode on fp32."""
    from webmp.sample.replay import generate_ids

    params = e2e_params()
    out = generate_ids(
        e2e_config(path), VOCAB, params, PROMPT, tokens=N_E2E, temperature=0.0, seed=0, gpu=gpu, path=path,
        tokens_per_submit=tokens_per_submit,
    )  # fmt: skip
    seq = list(PROMPT) + out.tolist()
    checked, margins = 0, []
    for i in range(len(PROMPT), len(seq)):
        logits = ref_logits(params, seq[max(0, i - T_E2E) : i])
        top = np.sort(logits)
        margins.append(top[-1] - top[-2])
        if margins[-1] > 2 * LOGIT_ERR[path]:
            checked += 1
            assert seq[i] == int(np.argmax(logits)), f"{path}: step {i - len(PROMPT)}"
    text = "".join(VOCAB[t] for t in seq)
    print(f"{path}: {checked}/{N_E2E} steps checked, smallest margin {min(margins):.3g}: {text!r}")
    assert checked == N_E2E, "every margin of this model should be clear"
    assert len(set(out.tolist())) >= 5
    if path == "fp32":
        decode = list(PROMPT)
        for _ in range(N_E2E):
            decode.append(int(np.argmax(ref_logits(params, decode[-T_E2E:]))))
        assert seq == decode


def test_temperature_decode_matches_the_twin(gpu):
    """At temperature 0.8 on fp32, every drawn token is the float64 reference's draw for the twin's
    u at its position (probabilities from exact logits on the GPU's prefix; a logit error e moves a
    cumulative probability by at most 2e / temperature), unless that is within the bound of u."""
    from webmp.sample.replay import generate_ids

    params, temperature, seed = e2e_params(), 0.8, 77
    out = generate_ids(
        e2e_config("fp32"), VOCAB, params, PROMPT, tokens=N_E2E, temperature=temperature, seed=seed, gpu=gpu,
        path="fp32",
    )  # fmt: skip
    seq = list(PROMPT) + out.tolist()
    t32, cutoff = ops.sample_temperature(temperature)
    exact = 0
    for i in range(len(PROMPT), len(seq)):
        logits = ref_logits(params, seq[max(0, i - T_E2E) : i])
        p = ref.sample_probs(logits, t32, cutoff)
        u = float(ref.sample_uniform(seed, i))
        bound = ref.sample_draw_bound(logits, t32, cutoff) + 2 * LOGIT_ERR["fp32"] / t32
        if np.abs(np.cumsum(p) - u).min() > bound:
            exact += 1
            assert seq[i] == ref.sample_draw(p, u), f"step {i}"
    assert exact >= N_E2E - 1
    assert len(set(out.tolist())) >= 4


def test_generate_text_and_bad_prompts(gpu):
    from webmp.sample.job import SampleError
    from webmp.sample.replay import generate

    params, cfg = e2e_params(), e2e_config("fp32")
    text = generate(cfg, VOCAB, params, "adf", tokens=N_E2E, temperature=0.0, gpu=gpu, path="fp32")
    assert len(text) == 3 + N_E2E and text.startswith("adf")
    with pytest.raises(SampleError, match=r"2 character\(s\) outside the run's vocabulary of 11: 'A' 'z'"):
        generate(cfg, VOCAB, params, "zab A", tokens=3, gpu=gpu, path="fp32")
    with pytest.raises(SampleError, match="empty prompt starts from a newline.*has none"):
        generate(cfg, VOCAB, params, "", tokens=3, gpu=gpu, path="fp32")
    with pytest.raises(SampleError, match="tokens must be a positive integer"):
        generate(cfg, VOCAB, params, "a", tokens=0, gpu=gpu, path="fp32")
    with pytest.raises(SampleError, match="temperature must be a finite number >= 0"):
        generate(cfg, VOCAB, params, "a", tokens=2, temperature=-1.0, gpu=gpu, path="fp32")


# --- the command line on a trained run -------------------------------------------------------------

TEXT = "the quick brown fox jumps over the lazy dog.\nso the dog sleeps, and the fox runs off.\n" * 12


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, gpu) -> Path:
    """A tiny `webmp train --model gpt` run on a small text file (its checkpoint, config, vocabulary)."""
    base = tmp_path_factory.mktemp("sample")
    data = base / "fox.txt"
    data.write_text(TEXT)
    out = base / "run"
    argv = [
        "train", "--model", "gpt", "--data", str(data), "--out", str(out), "--quiet", "--steps", "8",
        "--n-layer", "1", "--d-model", "16", "--n-head", "2", "--context", "8", "--batch-size", "4",
        "--val-tokens", "64", "--log-every", "4", "--lr", "0.01",
    ]  # fmt: skip
    assert main(argv) == 0
    return out


def cli(argv, capsys):
    rc = main(["sample", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_train_saves_the_vocabulary_and_copies_are_the_rounded_masters(run_dir):
    """checkpoint.json names the characters; the working copies training left in the checkpoint
    (adamw_copy's) are the masters rounded to nearest, what the sampling plan packs on the host."""
    from webmp.data.text import tokenize
    from webmp.engine.plan import pack_h
    from webmp.models.gpt import gpt_param_shapes
    from webmp.train.checkpoint import load_checkpoint

    contents, meta = load_checkpoint(run_dir)
    vocab = tokenize(TEXT, "t", "t", "0").vocab
    assert meta["vocab"] == vocab
    cfg = TrainConfig(**meta["config"])
    shapes = gpt_param_shapes(len(vocab), cfg.d_model, cfg.n_layer, cfg.context, cfg.tie_head)
    copies = sorted(n for n in contents if n.startswith("h_"))
    assert copies == sorted(["h_wte", "h_Wqkv0", "h_Wo0", "h_W10", "h_W20"])
    for name in copies:
        master = np.frombuffer(contents[name[2:]], np.float32).reshape(shapes[name[2:]])
        assert pack_h(master, meta["f16_path"] or "fp32") == contents[name], name


def test_cli_greedy_is_the_python_api(run_dir, capsys):
    from webmp.sample.replay import sample

    rc, out, err = cli([str(run_dir), "--prompt", "the ", "--tokens", "30", "--temperature", "0"], capsys)
    assert rc == 0, err
    assert out.startswith("the ") and out.endswith("\n") and len(out) == 4 + 30 + 1
    assert out == sample(run_dir, "the ", tokens=30, temperature=0.0) + "\n"


def test_cli_sampling_is_deterministic_per_seed(run_dir, capsys):
    argv = [str(run_dir), "--prompt", "fox", "--tokens", "40", "--temperature", "1.0"]
    first = cli([*argv, "--seed", "3"], capsys)
    again = cli([*argv, "--seed", "3"], capsys)
    other = cli([*argv, "--seed", "4"], capsys)
    assert first[0] == again[0] == other[0] == 0
    assert first[1] == again[1] and first[1].startswith("fox") and len(first[1]) == 3 + 40 + 1
    assert other[1] != first[1], "another seed, other draws (an untrained model spreads them)"


def test_cli_empty_prompt_starts_after_a_newline(run_dir, capsys):
    rc, out, err = cli([str(run_dir), "--tokens", "12", "--temperature", "0"], capsys)
    assert rc == 0, err
    assert len(out) == 12 + 1


def test_cli_errors_are_one_line(run_dir, tmp_path, capsys):
    rc, out, err = cli([str(run_dir), "--prompt", "the Zürich fox", "--tokens", "5"], capsys)
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and "'Z'" in err and "'ü'" in err and "vocabulary" in err, err

    no_ckpt = tmp_path / "no_ckpt"
    no_ckpt.mkdir()
    shutil.copy(run_dir / "config.json", no_ckpt)
    rc, _, err = cli([str(no_ckpt)], capsys)
    assert rc == 1 and err.count("\n") == 1 and "no checkpoint" in err, err

    mlp = tmp_path / "mlp"
    mlp.mkdir()
    (mlp / "config.json").write_text(json.dumps(TrainConfig().model_dump()))
    rc, _, err = cli([str(mlp)], capsys)
    assert rc == 1 and err.count("\n") == 1 and "'mlp' run" in err and "--model gpt" in err, err

    rc, _, err = cli([str(tmp_path / "nowhere")], capsys)
    assert rc == 1 and err.count("\n") == 1 and "no such run directory" in err, err

    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = cli([str(empty)], capsys)
    assert rc == 1 and err.count("\n") == 1 and "not a run directory" in err, err


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--tokens", "0"], "argument --tokens: must be a positive integer, got 0"),
        (["--tokens", "-5"], "argument --tokens: must be a positive integer, got -5"),
        (["--tokens", "ten"], "argument --tokens: must be an integer, got 'ten'"),
        (["--temperature", "-0.5"], "argument --temperature: must be a finite number >= 0, got -0.5"),
        (["--temperature", "nan"], "argument --temperature: must be a finite number >= 0, got nan"),
        (["--seed", "-1"], "argument --seed: must be in 0 .. 2**32 - 1, got -1"),
    ],
)
def test_cli_bad_settings_are_argparse_errors(flags, message, tmp_path, capsys):
    """Checked before the run directory is read (it does not exist here): exit 2, usage + error, in
    the words of webmp.sample.job.SampleSettings (the server's for the same values)."""
    rc, out, err = cli([str(tmp_path / "nowhere"), *flags], capsys)
    assert rc == 2 and out == ""
    assert err.startswith("usage: webmp sample") and message in err, err


def test_cli_defaults_are_the_modules():
    from webmp.sample import job as sample

    args = sample_parser().parse_args(["run"])
    assert (args.tokens, args.temperature, args.seed, args.prompt) == (
        sample.DEFAULT_TOKENS, sample.DEFAULT_TEMPERATURE, 0, "",
    )  # fmt: skip


def test_run_without_saved_vocabulary(run_dir, tmp_path, capsys):
    """A run written before the vocabulary was saved: read from its training data when unchanged
    (same text), refused in one line when the data changed."""
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    meta = json.loads((old / "checkpoint.json").read_text())
    del meta["vocab"]
    (old / "checkpoint.json").write_text(json.dumps(meta))
    argv = ["--prompt", "the ", "--tokens", "10", "--temperature", "0"]
    assert cli([str(old), *argv], capsys)[1] == cli([str(run_dir), *argv], capsys)[1]
    changed = tmp_path / "changed.txt"
    changed.write_text(TEXT + "more")
    meta["config"]["data"] = str(changed)
    (old / "checkpoint.json").write_text(json.dumps(meta))
    rc, _, err = cli([str(old), *argv], capsys)
    assert rc == 1 and err.count("\n") == 1 and "saved no vocabulary" in err and "changed" in err, err
