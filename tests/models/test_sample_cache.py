"""Text generation over attention caches (webmp/models/net_sample.py): the schedule, and the
one-position program's logits against the window program's at every token.

The lockstep runs two plans of the same settings side by side, token by token: the plan on its
schedule (the window program for the first token, then the one-position program `sample_row` while
n <= T, then the window again) and the window-only plan (kv_cache=False: the sampler before the
caches). After each token both hold the same tokens, the logits the token was drawn from are equal
(as f32 values: the row program may differ from the window only in the sign of a zero, see
net_sample's docstring; counted apart from bitwise equality), and each attention cache's rows
0 .. n - 1 equal the window program's qkv rows. Equal logits make equal draws at any seed and
temperature (sample_next reads nothing else but n), so the prompts, temperatures and seeds below
vary the prefixes the caches are built from. Models: the gpt (tied and untied head) and the token
networks of test_net_seq.py (ATTN: two attention blocks without positions; TIED; ODD: no attention,
dropout), prompts of 1 token, a few, T - 1 and T + 1 (no one-position tokens), generations crossing
the window's edge.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import enlarged_gpt_params
from test_net_seq import ATTN, ODD, TIED, enlarged

from webmp.config import TrainConfig
from webmp.engine.runtime import Runtime
from webmp.engine.tiles import TileTable
from webmp.models import build_sample_plan
from webmp.models.net_sample import SAMPLE_ROW, SAMPLE_STEP, sample_schedule
from webmp.sample.replay import generate_ids

VOCAB = list("abcdefghij ")
V = len(VOCAB)


def test_the_schedule():
    """The window for the first token, one position for the tokens drawn at n = P + 1 .. T, the
    window after; without the cache (or with a prompt of T or more) the window throughout."""
    W, R = SAMPLE_STEP, SAMPLE_ROW
    assert sample_schedule(3, 10, 8) == [
        {"program": W, "tokens": 1},
        {"program": R, "tokens": 5},
        {"program": W, "tokens": 4},
    ]
    assert sample_schedule(1, 4, 8) == [{"program": W, "tokens": 1}, {"program": R, "tokens": 3}]
    assert sample_schedule(7, 5, 8) == [
        {"program": W, "tokens": 1},
        {"program": R, "tokens": 1},
        {"program": W, "tokens": 3},
    ]
    assert sample_schedule(8, 5, 8) == sample_schedule(20, 5, 8) == [{"program": W, "tokens": 5}]
    assert sample_schedule(3, 10, 8, kv_cache=False) == [{"program": W, "tokens": 10}]
    assert sample_schedule(3, 1, 8) == [{"program": W, "tokens": 1}]


def caches(plan) -> list[str]:
    """The buffers attn_row writes the newest q, k, v row into: each attention layer's cache (the
    window's qkv)."""
    entry = {k["name"]: k["entry"] for k in plan["kernels"]}
    return [d["bind"][5] for d in plan["programs"].get(SAMPLE_ROW, []) if entry[d["kernel"]] == "attn_row"]


def h_rows(rt: Runtime, plan, name: str, rows: int) -> np.ndarray:
    """The first `rows` rows of h buffer `name`, as stored words (bits)."""
    spec = next(b for b in plan["buffers"] if b["name"] == name)
    words = np.frombuffer(rt.read(name), np.uint32).reshape(spec["shape"][0], -1)
    return words[:rows]


def lockstep(cfg, params, prompt, tokens, temperature, seed, path, gpu, T, tiles=None, **more) -> dict:
    """Both plans token by token (module docstring); returns what was compared. more: further
    settings of both plans (fp8_scale)."""
    kw = dict(params=params, prompt=prompt, tokens=tokens, temperature=temperature, seed=seed, **more)
    cached, blob = build_sample_plan(cfg, VOCAB, path, tiles, **kw)
    window, wblob = build_sample_plan(cfg, VOCAB, path, tiles, kv_cache=False, **kw)
    rc, rw = Runtime(cached, blob, gpu), Runtime(window, wblob, gpu)
    programs = [run["program"] for run in cached["sample"]["schedule"] for _ in range(run["tokens"])]
    seen = {"row_tokens": 0, "bitwise": 0, "cache_rows": 0}
    for k, program in enumerate(programs):
        n = len(prompt) + k
        rc.run(program)
        rw.run(SAMPLE_STEP)
        want = np.frombuffer(rw.read("logits"), np.float32).reshape(-1, V)[min(n, T) - 1]
        if program == SAMPLE_ROW:
            got = np.frombuffer(rc.read("row.logits"), np.float32)
            seen["row_tokens"] += 1
        else:
            got = np.frombuffer(rc.read("logits"), np.float32).reshape(-1, V)[min(n, T) - 1]
        assert np.array_equal(got, want), f"{path}: logits of token {k} ({program}), n = {n}"
        seen["bitwise"] += got.tobytes() == want.tobytes()
        assert rc.read("seq") == rw.read("seq") and rc.read("seq_len") == rw.read("seq_len")
        if n <= T:
            for cache in caches(cached):
                assert np.array_equal(h_rows(rc, cached, cache, n), h_rows(rw, window, cache, n)), cache
                seen["cache_rows"] += n
    assert rc.read("flags") == rw.read("flags")
    return seen


def expect_rows(prompt: int, tokens: int, T: int) -> int:
    return max(0, min(tokens - 1, T - prompt))


GPT_T = 8
# prompt lengths: 1, a few, T - 1 (one token over the cache), T + 1 (the window from the start)
GPT_PROMPTS = [[4], [0, 3, 5], [1, 2, 3, 4, 5, 6, 7], [2, 9, 1, 0, 3, 5, 4, 8, 6]]


@pytest.mark.parametrize("tie_head", [True, False])
def test_the_gpts_rows_are_its_windows(path, gpu, tie_head):
    """The gpt (2 layers, 2 heads of 8, context 8, enlarged parameters): every prompt, greedy and at
    two temperatures, 12 tokens (across the window's edge)."""
    params = enlarged_gpt_params(V, 16, 2, 2, GPT_T, 24, tie_head)
    cfg = TrainConfig(
        model="gpt", n_layer=2, d_model=16, n_head=2, context=GPT_T, tie_head=tie_head,
        precision="fp32" if path == "fp32" else "mixed", batch_size=1,
    )  # fmt: skip
    rows = 0
    for i, prompt in enumerate(GPT_PROMPTS):
        temperature, seed = ((0.0, 0), (0.8, 11 + i), (1.5, 2**32 - 1 - i))[i % 3]
        seen = lockstep(cfg, params, prompt, 12, temperature, seed, path, gpu, GPT_T)
        assert seen["row_tokens"] == expect_rows(len(prompt), 12, GPT_T)
        rows += seen["row_tokens"]
        print(f"{path} tie={tie_head} prompt {len(prompt)} at {temperature}: {seen}")
    assert rows == 7 + 5 + 1


def test_a_tuned_tables_rows_are_its_windows(path, gpu):
    """With a tuned table's forms (the row kernels a thread a row, the tied head's table transposed by
    the window program, which the row program reads without transposing it again; other tiles for a
    shape class) the rows are the window's too."""
    tiles = TileTable({
        "weights": {"form": "transposed"}, "rows": {"form": "thread"},
        f"{path}/NN/16x64x16": {"core": "reg", "WG_X": 4, "WG_Y": 4, "TM": 8, "TN": 8},  # the qkv product
    })  # fmt: skip
    params = enlarged_gpt_params(V, 16, 2, 2, GPT_T, 24, True)
    precision = "fp32" if path == "fp32" else "mixed"
    cfg = TrainConfig(
        model="gpt", n_layer=2, d_model=16, n_head=2, context=GPT_T, precision=precision, batch_size=1
    )
    seen = lockstep(cfg, params, [4, 1], 10, 0.9, 3, path, gpu, GPT_T, tiles)
    assert seen["row_tokens"] == 6
    plan, _ = build_sample_plan(
        cfg, VOCAB, path, tiles, params=params, prompt=[4], tokens=3, temperature=0.0, seed=0
    )
    kernel = {k["name"]: k["entry"] for k in plan["kernels"]}
    entries = {p: [kernel[d["kernel"]] for d in plan["programs"][p]] for p in (SAMPLE_STEP, SAMPLE_ROW)}
    assert "transpose_h" in entries[SAMPLE_STEP] and "transpose_h" not in entries[SAMPLE_ROW]


NET_T = 7


@pytest.mark.parametrize("name", ["attn", "tied", "odd"])
def test_a_token_networks_rows_are_its_windows(path, gpu, name):
    """The token networks of test_net_seq.py (context 7, enlarged parameters): prompts of 1, 3 and 6
    tokens, 10 tokens each (across the window's edge), greedy and drawn."""
    spec = {"attn": ATTN, "tied": TIED, "odd": ODD}[name]
    cfg = TrainConfig(model_spec=spec, precision="fp32" if path == "fp32" else "mixed", batch_size=1)
    params = enlarged(cfg.model_spec, np.random.default_rng(3))
    for prompt, temperature, seed in (([2], 0.0, 0), ([0, 3, 5], 0.9, 7), ([1, 2, 3, 4, 5, 6], 1.3, 8)):
        seen = lockstep(cfg, params, prompt, 10, temperature, seed, path, gpu, NET_T)
        assert seen["row_tokens"] == expect_rows(len(prompt), 10, NET_T)
        assert (seen["cache_rows"] > 0) == (name != "odd" and seen["row_tokens"] > 0)
        print(f"{path} {name} prompt {len(prompt)} at {temperature}: {seen}")


def test_seeds_and_temperatures_give_the_windows_tokens(gpu):
    """Whole generations through the runtime's replay (submits of 5 tokens, across the runs of the
    schedule): the cached plan's tokens are the window-only plan's, over seeds and temperatures."""
    params = enlarged_gpt_params(V, 16, 2, 2, GPT_T, 24, True)
    cfg = TrainConfig(
        model="gpt", n_layer=2, d_model=16, n_head=2, context=GPT_T, precision="mixed", batch_size=1
    )
    for seed, temperature in ((0, 0.0), (1, 0.5), (2, 1.0), (3, 2.0)):
        kw = dict(
            tokens=16,
            temperature=temperature,
            seed=seed,
            gpu=gpu,
            path="native" if gpu.has_f16 else "emulated",
        )
        with_cache = generate_ids(cfg, VOCAB, params, [0, 3], tokens_per_submit=5, **kw)
        window = generate_ids(cfg, VOCAB, params, [0, 3], tokens_per_submit=5, kv_cache=False, **kw)
        assert with_cache.tolist() == window.tolist(), (seed, temperature)
