"""The GPT's training step (webmp/models/gpt.py) against the float64 reference
(webmp.testing.reference.gpt_loss_and_grads), on a tiny model: V = 11 characters, d_model 12, 2 heads of 6,
2 layers, context 7, 3 windows (R = 21 loss rows).

One train_step runs on a fresh plan with injected parameters; the g_* buffers then hold the
gradients of the initial parameters on the first windows (data.window_starts at window 0) times
the loss scale (1024 on the f16 paths, 1 for fp32); the optimizer reads them but does not change
them. Errors are normwise per tensor, max |got - want| / max |want| (tests/models/test_gradients.py).

Two comparisons:
- against the reference with store=path (rounded where the engine stores): the engine differs
  only by f32 arithmetic (sums of <= 84 terms, exp/tanh) and by the rare f16 store that such a
  difference tips over a rounding boundary, which later stages carry along. On lavapipe the
  forward pass is bit-identical to the stored reference but for one such flip (one entry of z0);
  in the backward pass one flipped entry of the final LayerNorm's input gradient moves its whole
  row of dz (up to 40 f16 ulps of its small entries), so the gradients differ by ~2^-11 of their
  largest entry: tied 5.3e-4, untied 3.0e-4 (native = emulated); fp32 8.3e-7, 5.2e-7.
  TOL_STORED = 2^-9 on the f16 paths (a few flips' worth), 2^-16 for fp32 (f32 sums only).
- against exact float64 (store=None): TOL_F32 = 2^-14 for fp32, as the MLP's test (measured
  7.4e-7 tied, 4.6e-7 untied). On the f16 paths each gradient sits downstream of a few dozen f16
  stores (14 rounding points a layer, two layers, the head and the residual stream's gradient
  adds), so the MLP's 2^-7 is scaled by 4: 2^-5 (measured 5.2e-3 tied, 2.5e-3 untied).
Native and emulated f16 store the same values, so their gradients agree bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import enlarged_gpt_params, optimizer_pipelines

from webmp import ops
from webmp.config import TrainConfig
from webmp.data.text import tokenize
from webmp.engine.state import decode_state
from webmp.testing import reference as ref

V, D, H, L, T, BATCH = 11, 12, 2, 2, 7, 3
TOL_STORED = {"native": 2.0**-9, "emulated": 2.0**-9, "fp32": 2.0**-16}
TOL_EXACT = {"native": 2.0**-5, "emulated": 2.0**-5, "fp32": 2.0**-14}
FP8_TOL = 2.0**-6
MEASURED_STORED: dict[str, float] = {}
MEASURED_EXACT: dict[str, float] = {}


def tiny_corpus():
    rng = np.random.default_rng(5)
    text = "".join(rng.choice(list("abcdefghij "), size=300))
    corpus = tokenize(text, "tiny", "test", "0")
    assert corpus.vocab_size == V
    return corpus


def tiny_params(tie_head: bool) -> dict:
    """Enlarged so that attention is far from uniform and every LayerNorm parameter and bias is
    non-trivial."""
    return enlarged_gpt_params(V, D, L, H, T, 1, tie_head)


_STEPS: dict = {}


def run_step(path, gpu, tie_head=True):
    """(params, idx, targets, scale, scaled gradients, loss) of one train_step, cached per case."""
    if (path, tie_head) not in _STEPS:
        _STEPS[path, tie_head] = _run_step(path, gpu, tie_head)
    return _STEPS[path, tie_head]


def _run_step(path, gpu, tie_head, tiles=None, attention="unfused"):
    from webmp.models.gpt import build_gpt_plan
    from webmp.testing.probe import cached_runtime

    corpus = tiny_corpus()
    precision = "fp32" if path == "fp32" else "mixed"
    cfg = TrainConfig(
        model="gpt", batch_size=BATCH, precision=precision, init_scale=1024.0, log_every=1, steps=10,
        warmup=0, schedule="constant", n_layer=L, n_head=H, d_model=D, context=T, tie_head=tie_head,
        attention=attention,
    )  # fmt: skip
    params = tiny_params(tie_head)
    plan, blob = build_gpt_plan(cfg, corpus, path, params=params, tiles=tiles)
    rt = cached_runtime(plan, blob, gpu)
    scale = decode_state(rt.read("state"))["scale"]
    rt.run("train_step")

    def read(name, shape):
        return np.frombuffer(rt.read(name), np.float32)[: int(np.prod(shape))].reshape(shape)

    grads = {p["name"]: read(p["grad"], p["shape"]).astype(np.float64) for p in plan["params"]}
    loss = decode_state(rt.read("state"))["loss"]
    idx, targets = ref.gather_windows(corpus.train, 0, BATCH, T, cfg.seed)
    return params, idx.reshape(BATCH, T), targets.reshape(BATCH, T), scale, grads, loss


def worst_relative(got: dict, want: dict) -> dict:
    return {k: float(np.abs(got[k] - want[k]).max() / np.abs(want[k]).max()) for k in want}


def reference(params, idx, targets, store, scale, tie_head=True, fused=False):
    return ref.gpt_loss_and_grads(
        params, idx, targets, n_layer=L, n_head=H, tie_head=tie_head, store=store, loss_scale=scale,
        attn_scale=ops.attention_scale(D // H), fused_attention=fused,
    )  # fmt: skip


@pytest.mark.parametrize("tie_head", [True, False], ids=["tied", "untied"])
def test_gpt_gradients(path, gpu, tie_head):
    params, idx, targets, scale, grads, loss = run_step(path, gpu, tie_head)
    assert scale == (1.0 if path == "fp32" else 1024.0)
    loss_s, g_s, _ = reference(params, idx, targets, path, scale, tie_head)
    assert set(grads) == set(g_s)
    stored = worst_relative(grads, g_s)
    loss64, g64, _ = reference(params, idx, targets, None, 1.0, tie_head)
    exact = worst_relative({k: v / scale for k, v in grads.items()}, g64)
    print(f"{path} tied={tie_head}: vs stored {max(stored.values()):.3g}, vs exact {max(exact.values()):.3g}")
    print(f"  loss {loss} stored {loss_s} exact {loss64}")
    assert max(stored.values()) <= TOL_STORED[path], f"{path}: normwise errors {stored}"
    assert max(exact.values()) <= TOL_EXACT[path], f"{path}: normwise errors {exact}"
    assert abs(loss - loss_s) <= TOL_STORED[path] * loss_s
    assert abs(loss - loss64) <= TOL_EXACT[path] * loss64


def test_gpt_gradients_fused_attention(path, gpu):
    """The step with --attention fused (flash_attention_fwd / _bwd, no S, P, dS buffers) against the
    float64 reference rounded at the fused form's points (P and dS never stored, Dsum from the
    stored O: gpt_loss_and_grads(fused_attention=True)) within TOL_STORED, the same margin of f32
    sums and rare store flips as the three-kernel form's test; and against exact float64 within
    TOL_EXACT."""
    params, idx, targets, scale, grads, loss = _run_step(path, gpu, True, attention="fused")
    loss_s, g_s, _ = reference(params, idx, targets, path, scale, fused=True)
    stored = worst_relative(grads, g_s)
    _, g64, _ = reference(params, idx, targets, None, 1.0)
    exact = worst_relative({k: v / scale for k, v in grads.items()}, g64)
    print(f"{path} fused: vs stored {max(stored.values()):.3g}, vs exact {max(exact.values()):.3g}")
    assert max(stored.values()) <= TOL_STORED[path], f"{path}: normwise errors {stored}"
    assert max(exact.values()) <= TOL_EXACT[path], f"{path}: normwise errors {exact}"
    assert abs(loss - loss_s) <= TOL_STORED[path] * loss_s


def test_gpt_gradients_fp8():
    """--precision fp8: every block's four products (qkv, the attention's output projection, the MLP's
    two) on fp8 operands, at scales written into fp8_scale before the step, against the float64
    reference rounded to bf16 where the engine stores and quantised where it casts (fp8=). An f32
    sum within f32 error of a bf16 or fp8 boundary can flip one value (one fp8 step is 2^-3 of an
    E4M3 value, 2^-2 of an E5M2 one), and later stages carry a flip along, so the bound is looser
    than the f16 paths' TOL_STORED: FP8_TOL, measured against the same step without the casts."""
    from webmp.engine.runtime import default_gpu
    from webmp.models.gpt import build_gpt_plan
    from webmp.testing.probe import cached_runtime

    corpus, params = tiny_corpus(), tiny_params(True)
    cfg = TrainConfig(
        model="gpt", batch_size=BATCH, precision="fp8", log_every=1, steps=10, warmup=0,
        schedule="constant", n_layer=L, n_head=H, d_model=D, context=T,
    )  # fmt: skip
    plan, blob = build_gpt_plan(cfg, corpus, "bf16", params=params)
    names = [f"{w}{l}" for l in range(L) for w in ("Wqkv", "Wo", "W1", "W2")]
    assert len(plan["fp8"]["layers"]) == len(names)
    exps = {w: (3 + i % 2, 4, 12 + i % 3) for i, w in enumerate(names)}  # input, weight, grad
    rt = cached_runtime(plan, blob, default_gpu())
    rt.write("fp8_scale", np.array([e for w in names for e in exps[w]], np.int32).tobytes())
    rt.run("train_step")

    def read(name, shape):
        return np.frombuffer(rt.read(name), np.float32)[: int(np.prod(shape))].reshape(shape)

    grads = {p["name"]: read(p["grad"], p["shape"]).astype(np.float64) for p in plan["params"]}
    idx, targets = ref.gather_windows(corpus.train, 0, BATCH, T, cfg.seed)
    idx, targets = idx.reshape(BATCH, T), targets.reshape(BATCH, T)
    kw = dict(n_layer=L, n_head=H, tie_head=True, store="bf16", attn_scale=ops.attention_scale(D // H))
    _, want, _ = ref.gpt_loss_and_grads(params, idx, targets, fp8=exps, **kw)
    _, plain, _ = ref.gpt_loss_and_grads(params, idx, targets, **kw)
    err, contrast = max(worst_relative(grads, want).values()), max(worst_relative(grads, plain).values())
    print(f"fp8 gpt: vs quantised {err:.3g}, vs unquantised {contrast:.3g}")
    assert err <= FP8_TOL and contrast > 4 * FP8_TOL


def test_gpt_plan_at_context_1024_has_no_square_buffer():
    """The default GPT at context 1024 (batch 16, 4 heads): the three-kernel plan's S is
    4 * 16 * 4 * 1024^2 bytes = 256 MiB, above WebGPU's default 128 MiB binding, so "auto" takes the
    fused form, whose dry-run plan declares no buffer of rows of T columns (no [T, T] block of any
    window and head: its largest is the MLP's z, [B*T, 4D] h = 16 MiB); "unfused" keeps S."""
    from webmp.data.text import load_text
    from webmp.models import plan_buffers

    corpus = load_text(None)
    B, T, nh = 16, 1024, 4
    square = B * nh * T * T  # values of one [B*H*T, T] buffer
    for attention in ("auto", "fused"):
        bufs = plan_buffers(TrainConfig(model="gpt", context=T, attention=attention), corpus, "native")
        names = {b["name"] for b in bufs}
        assert not names & {"S", "dS", "P0", "P1"} and {"lse0", "lse1", "Dsum"} <= names
        for b in bufs:
            assert len(b["shape"]) < 2 or b["shape"][-1] < T, b
        assert max(b["bytes"] for b in bufs) == 16 * 1024 * 4 * 128 * 2
    unfused = plan_buffers(TrainConfig(model="gpt", context=T, attention="unfused"), corpus, "native")
    assert max(b["bytes"] for b in unfused) == 4 * square


def test_attention_form_choice():
    """attention_form: fused or unfused as asked (fused refused where its kernels cannot run); auto
    fused where S would exceed the table's buffer limit, or where the tune cache's attention class
    says so, else the three-kernel form."""
    from webmp.engine.tiles import ATTENTION_KEY, TileTable, attention_class
    from webmp.models.attention_form import attention_form

    plain = TileTable()
    assert attention_form("auto", plain, "native", 16, 64, 4, 32) == ("unfused", "the default")
    form, why = attention_form("auto", plain, "native", 16, 1024, 4, 32)
    assert form == "fused" and "268435456 bytes" in why and "134217728" in why
    plain.buffer_limit = 2**30  # an adapter allowing 1 GiB bindings: S fits
    assert attention_form("auto", plain, "native", 16, 1024, 4, 32)[0] == "unfused"
    cached = TileTable({ATTENTION_KEY: {attention_class("native", 64, 32): "fused"}})
    assert attention_class("native", 50, 32) == attention_class("emulated", 64, 32) == "attention/f16/T64/d32"
    assert attention_form("auto", cached, "native", 16, 50, 4, 32)[0] == "fused"
    assert attention_form("auto", cached, "fp32", 16, 50, 4, 32)[0] == "unfused"
    assert attention_form("unfused", plain, "native", 16, 1024, 4, 32)[0] == "unfused"
    with pytest.raises(ValueError, match="exceeds"):
        attention_form("fused", plain, "native", 1, 8, 1, 256)
    assert attention_form("auto", plain, "native", 1, 8192, 1, 256)[0] == "unfused"  # cannot fuse


@pytest.mark.slow  # two GPT plans' pipelines, 6 steps each
def test_gpt_fused_attention_curve(gpu, tmp_path):
    """A small GPT (2 heads of 16, context 70: two workgroups of queries, partial tiles) trained 6
    steps with each attention form on the f16 path: every step's loss within 2^-8 relative, the
    two forms' difference being the three-kernel form's P and dS roundings (one f16 ulp, 2^-11
    relative, each, on every attention probability and its gradient) carried through 6 updates;
    measured on lavapipe (native f16): at most 2.9e-5. The same scale trajectory, no skipped step."""
    from webmp.train.loop import Trainer

    cfg = dict(
        model="gpt", n_layer=1, d_model=32, n_head=2, context=70, batch_size=2, steps=6, log_every=3,
        val_tokens=256, lr=3e-3, warmup=0,
    )  # fmt: skip
    records = {}
    for attention in ("fused", "unfused"):
        t = Trainer(
            TrainConfig(**cfg, attention=attention),
            out=tmp_path / attention,
            gpu=gpu,
            progress=False,
            log=None,
        )
        entries = {k["entry"] for k in t.plan["kernels"]}
        assert ("flash_fwd" in entries) == (attention == "fused")
        t.run()
        records[attention] = t.records
    fused, unfused = records["fused"], records["unfused"]
    assert len(fused) == len(unfused) == 6
    diffs = [abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(fused, unfused, strict=True)]
    print("relative loss differences", [f"{d:.2e}" for d in diffs])
    assert max(diffs) <= 2.0**-8
    assert [r["scale"] for r in fused] == [r["scale"] for r in unfused]
    assert not any(r["skipped"] for r in fused + unfused)


@pytest.mark.slow  # a second GPT plan's ~100 pipelines per path
def test_gpt_gradients_are_the_same_bits_with_every_matmul_core(path, gpu):
    """Every matmul of the step (attention's batched products included) on a register-blocked
    core, with subgroups where the adapter has them, instead of the default tiled core: the same
    gradients and loss bit for bit (each core adds the k products in order, one fma each)."""
    from webmp.engine.tiles import TileTable

    core = {"core": "reg_sg" if gpu.has_subgroups else "reg", "WG_X": 8, "WG_Y": 2, "TM": 4, "TN": 8}

    class AllOneCore(TileTable):
        def for_shape(self, *shape):
            return dict(core)

    other = _run_step(path, gpu, True, tiles=AllOneCore())
    default = run_step(path, gpu, True)
    for name, g in default[4].items():
        assert np.array_equal(other[4][name], g), name
    assert other[5] == default[5]


@pytest.mark.parametrize("tie_head", [True, False], ids=["tied", "untied"])
def test_gpt_gradients_are_the_same_bits_with_transposed_weights(path, gpu, tie_head):
    """With the weights form "transposed" (tiles.WEIGHTS_KEY) the backward pass transposes each
    working copy it multiplies by (transpose_h), and the tied head's logits read wte transposed:
    those products become A·B, with the same gradients and loss bit for bit as the A·Bᵀ products
    on the copies as stored (untied: the head's matrix in the backward pass too)."""
    from webmp.engine.tiles import WEIGHTS_KEY, TileTable

    tiles = TileTable({WEIGHTS_KEY: {"form": "transposed"}})
    assert tiles.weights == "transposed" and "weights transposed" in tiles.describe()
    default = run_step(path, gpu, tie_head)
    other = _run_step(path, gpu, tie_head, tiles=tiles)
    for name, g in default[4].items():
        assert np.array_equal(other[4][name], g), name
    assert other[5] == default[5]


@pytest.mark.parametrize("tie_head", [True, False], ids=["tied", "untied"])
def test_gpt_plan_with_transposed_weights(tie_head):
    """Each matrix the backward pass multiplies by is transposed once a step, just before its
    product, into a copy of its own, and those products read it untransposed; so is the tied
    head's wte before the logits, in every forward pass (eval too). Nothing else changes."""
    from webmp.engine.tiles import WEIGHTS_KEY, TileTable
    from webmp.models.gpt import build_gpt_plan

    cfg = TrainConfig(
        model="gpt", batch_size=BATCH, n_layer=L, n_head=H, d_model=D, context=T, tie_head=tie_head
    )
    plans = {
        form: build_gpt_plan(cfg, tiny_corpus(), "emulated", TileTable({WEIGHTS_KEY: {"form": form}}))[0]
        for form in ("as_stored", "transposed")
    }

    def dispatches(plan, program):
        """(entry, constants, bound buffers) of each dispatch."""
        by_name = {k["name"]: k for k in plan["kernels"]}
        out = []
        for d in plan["programs"][program]:
            k = by_name[d["kernel"]]
            out.append(
                (
                    k["entry"],
                    k["constants"],
                    dict(zip([b["name"] for b in k["bindings"]], d["bind"], strict=True)),
                )
            )
        return out

    want = {f"h_{w}{l}" for l in range(L) for w in ("Wqkv", "Wo", "W1", "W2")}
    want |= {"h_wte"} if tie_head else {"h_Whead"}
    stored = dispatches(plans["as_stored"], "train_step")
    for program in ("train_step", "eval"):
        got = dispatches(plans["transposed"], program)
        moved = [i for i, (entry, _, _) in enumerate(got) if entry == "transpose_h"]
        if program == "train_step":
            assert sorted(got[i][2]["X"] for i in moved) == sorted(want)
            assert len(got) == len(stored) + len(want)
        else:
            assert {got[i][2]["X"] for i in moved} == ({"h_wte"} if tie_head else set())  # per forward
        for i in moved:  # the next dispatch is the product reading the transposed copy untransposed
            entry, consts, bound = got[i + 1]
            assert bound["B"] == got[i][2]["Y"] == "hT_" + got[i][2]["X"][2:]
            assert consts["TRANS_B"] == 0
        # without the transposes, the same dispatches on the same buffers but B
        rest = [d for i, d in enumerate(got) if i not in moved]
        base = dispatches(plans["as_stored"], program)
        assert [(e, b.get("A"), b.get("C")) for e, _, b in rest] == [
            (e, b.get("A"), b.get("C")) for e, _, b in base
        ]


@pytest.mark.parametrize("tie_head", [True, False], ids=["tied", "untied"])
def test_gpt_native_emulated_identical(gpu, tie_head):
    """Both f16 paths store the same f16 values, so every gradient agrees bit for bit."""
    if not gpu.has_f16:
        pytest.skip("this adapter lacks 'shader-f16'")
    native, emulated = run_step("native", gpu, tie_head), run_step("emulated", gpu, tie_head)
    for name, g in native[4].items():
        assert np.array_equal(g, emulated[4][name]), name
    assert native[5] == emulated[5]


def test_gpt_plan_shape():
    """Parameters in reference order with its decay rule; R = batch * T loss rows everywhere."""
    from webmp.models import build_plan

    corpus = tiny_corpus()
    cfg = TrainConfig(model="gpt", batch_size=BATCH, d_model=64, val_tokens=0)
    plan, _ = build_plan(cfg, corpus, "emulated")
    shapes = ref.gpt_param_shapes(V, 64, 2, 64, True)
    assert [p["name"] for p in plan["params"]] == list(shapes)
    assert [p["shape"] for p in plan["params"]] == [list(s) for s in shapes.values()]
    copies = {p["name"] for p in plan["params"] if p["copy"]}
    assert copies == {"wte"} | {f"{w}{l}" for l in range(2) for w in ("Wqkv", "Wo", "W1", "W2")}
    kn = {k["name"]: k for k in plan["kernels"]}
    decayed = set()
    for d in plan["programs"]["train_step"]:
        k = kn[d["kernel"]]
        if k["entry"] in ("adamw", "adamw_copy") and k["constants"]["WD"] > 0:
            decayed.add(d["bind"][1])  # the master buffer, named as the parameter
        if k["entry"] == "scaler_step":
            assert k["constants"]["B"] == BATCH * 64
        if k["entry"] == "gather_windows":
            assert k["constants"]["POS_PER_WINDOW"] == 64
    assert decayed == {n for n in shapes if ref.gpt_decays(n)}
    # one pipeline per optimizer family and weight decay (0.1 for the matrices, 0 for the rest)
    assert optimizer_pipelines(plan) == {"grad_stats": 1, "adamw_copy": 1, "adamw": 2}
    assert plan["eval"]["test_rows"] == len(corpus.val) - 1
    capped, _ = build_plan(cfg.model_copy(update={"val_tokens": 10}), corpus, "emulated")
    assert capped["eval"]["test_rows"] == 9 < len(corpus.val) - 1


def test_gpt_overflowing_evaluation_leaves_training_alone(f16_path, gpu):
    """An evaluation whose activations overflow f16 (token embeddings of 1e5) raises its bit in
    eval_flags only; no dispatch of 'eval' binds the training flags, and the next train_step,
    with the embeddings restored, is applied."""
    from webmp.models.gpt import build_gpt_plan
    from webmp.testing.probe import cached_runtime

    cfg = TrainConfig(
        model="gpt", batch_size=BATCH, init_scale=1024.0, log_every=1, steps=10, warmup=0,
        schedule="constant", n_layer=L, n_head=H, d_model=D, context=T,
    )  # fmt: skip
    plan, blob = build_gpt_plan(cfg, tiny_corpus(), f16_path, params=tiny_params(True))
    rt = cached_runtime(plan, blob, gpu)
    wte = rt.read("wte")
    rt.write("wte", np.full(len(wte) // 4, 1e5, np.float32).tobytes())
    rt.run("eval")
    rt.write("wte", wte)
    rt.run("train_step")
    st = decode_state(rt.read("state"))
    assert st["apply"] == 1 and st["found_inf"] == 0 and st["skipped_total"] == 0
    assert np.frombuffer(rt.read("eval_flags"), np.uint32)[0] & 1, "the evaluation overflowed"
    binds = {p: {b for d in plan["programs"][p] for b in d["bind"]} for p in ("train_step", "eval")}
    assert "eval_flags" in binds["eval"] and "flags" not in binds["eval"]
    assert "eval_flags" not in binds["train_step"]


@pytest.mark.slow
def test_gpt_trains(gpu):
    """60 steps on a tiny repetitive text (emulated f16, loss scaling): the loss falls well below
    the uniform ln V, and the eval program counts next-character accuracy."""
    from webmp.engine.state import decode_state
    from webmp.models.gpt import build_gpt_plan
    from webmp.testing.probe import cached_runtime

    text = "the quick brown fox jumps over the lazy dog. " * 20
    corpus = tokenize(text, "fox", "test", "0")
    cfg = TrainConfig(
        model="gpt", batch_size=4, lr=1e-2, steps=60, warmup=5, log_every=1, init_scale=1024.0, n_layer=1,
        n_head=2, d_model=16, context=8,
    )  # fmt: skip
    plan, blob = build_gpt_plan(cfg, corpus, "emulated")
    rt = cached_runtime(plan, blob, gpu)
    losses = []
    for _ in range(cfg.steps):
        rt.run("train_step")
        losses.append(decode_state(rt.read("state"))["loss"])
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    print(f"loss {first:.3f} -> {last:.3f} (ln V = {np.log(corpus.vocab_size):.3f})")
    assert abs(first - np.log(corpus.vocab_size)) < 0.5
    assert last < 0.5 * first
    rt.run("eval")
    correct, counted = np.frombuffer(rt.read("eval_result"), np.uint32)[:2]
    assert counted == plan["eval"]["test_rows"]
    assert correct > counted / 3
    # the validation loss against the float64 reference of the same weights
    got = float(np.frombuffer(rt.read("val_loss_sum"), np.float32)[0]) / counted
    params = {p["name"]: np.frombuffer(rt.read(p["master"]), np.float32)[: int(np.prod(p["shape"]))]
              .reshape(p["shape"]).astype(np.float64) for p in plan["params"]}  # fmt: skip
    shape = dict(n_layer=1, n_head=2, context=8, tie_head=True, attn_scale=ops.attention_scale(8))
    stored = ref.gpt_eval_loss(params, corpus.val, store="emulated", **shape)
    exact = ref.gpt_eval_loss(params, corpus.val, **shape)
    print(f"validation loss {got:.6f}, float64 reference rounded as stored {stored:.6f}, exact {exact:.6f}")
    # the same bounds as the gradients': f32 sums and a few rounding flips vs the stored reference
    assert abs(got - stored) <= TOL_STORED["emulated"] * stored
    assert abs(got - exact) <= TOL_EXACT["emulated"] * exact


@pytest.mark.slow  # two GPT plans' pipelines; the kernels are compared bit for bit in the fast tier
def test_gpt_row_kernel_forms_train_identically(gpu, tmp_path, monkeypatch):
    """The GPT plan built with the thread-per-row row kernels (the adapter's cache entry under
    tiles.ROWS_KEY) trains 4 steps to records bit-identical to the workgroup forms'."""
    import json

    from webmp.engine.tiles import ROWS_KEY
    from webmp.train.loop import Trainer

    cfg = TrainConfig(
        model="gpt", n_layer=1, d_model=32, n_head=2, context=16, batch_size=4, steps=4, log_every=2,
        val_tokens=1024,
    )  # fmt: skip
    records = {}
    for form in ops.ROW_FORMS:
        cache = tmp_path / f"tune-{form}.json"
        cache.write_text(json.dumps({gpu.name: {ROWS_KEY: {"form": form}}}))
        monkeypatch.setenv("WEBMP_TUNE_CACHE", str(cache))
        t = Trainer(cfg, out=tmp_path / form, gpu=gpu, progress=False, log=None)
        assert t.tiles.row_kernels == form
        entries = {k["entry"] for k in t.plan["kernels"]}
        assert ("attn_softmax_fwd_thread" in entries) == (form == "thread")
        assert ("layernorm_bwd_thread" in entries) == (form == "thread")
        t.run()
        records[form] = t.records  # the GPU's metrics ring: loss, scale, norms, flags per step
    assert len(records["thread"]) == 4
    assert records["thread"] == records["workgroup"]
