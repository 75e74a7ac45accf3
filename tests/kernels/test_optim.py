"""The step's end (webmp/ops/optim.py) against its numpy references on each storage path: grad_stats's
overflow bits and norm partials, the loss scaler's verdict, AdamW (one step, and its bias
corrections over many), the gradient-range lens's histogram. How the bounds are derived:
kernel_cases.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import FLAG_H_STORE, FLAG_LOSS, FLAG_MASTER_GRAD, Cases, rng_for, stored_bound

from webmp import ops
from webmp.engine.runtime import default_gpu
from webmp.engine.state import decode_records, decode_state, encode_state
from webmp.testing import reference as ref
from webmp.testing.probe import run_op
from webmp.testing.reference import U32, check_close, dot_error

# Every kernel run is a registered case, cached per path (kernel_cases.Cases).
CASES = Cases()
kernel_case, run = CASES.case, CASES.run


# --- overflow check and gradient norm partials ---------------------------------------------------

GRAD_STATS_NAMES = ["grad_stats/1", "grad_stats/1000", "grad_stats/5000"]
BASE = 2


def _grad_stats_run(G, scale, path):
    N = G.size
    nwg = ops.grad_stats_workgroups(N)
    return run_op(
        ops.grad_stats,
        {
            "G": G.astype(np.float32),
            "state": {"scale": scale},
            "partials": np.full(BASE + nwg + 1, -7.0, np.float32),
            "flags": np.zeros(4, np.uint32),
        },
        ["partials", "flags"],
        N=N,
        BASE=BASE,
        path=path,
        gpu=default_gpu(),
    )


for _n in GRAD_STATS_NAMES:

    @kernel_case(_n)
    def _grad_stats_case(name, path):
        N = int(name.split("/")[1])
        G = (512 * rng_for(name, path).standard_normal(N)).astype(np.float32)
        return {"G": G, "scale": 512.0}, _grad_stats_run(G, 512.0, path)


@pytest.mark.parametrize("name", GRAD_STATS_NAMES)
def test_grad_stats(name, path):
    inp, out = run(name, path)
    N = inp["G"].size
    nwg = ops.grad_stats_workgroups(N)
    partials, bad = ref.grad_stats(inp["G"], inp["scale"], nwg)
    got = out["partials"]
    assert (got[:BASE] == -7.0).all() and got[BASE + nwg] == -7.0, "only this tensor's slots are written"
    # sums of positive terms: dot_error of the longest chain, plus the scaling and squaring
    check_close(got[BASE : BASE + nwg], partials, (dot_error(N) + 8 * U32) * partials, name)
    assert not bad and out["flags"][0] == 0


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_grad_stats_flags_nonfinite(bad, path):
    """The master-gradient site: any Inf or NaN sets FLAG_MASTER_GRAD, wherever it sits."""
    G = np.ones(700, np.float32)
    G[517] = bad
    assert _grad_stats_run(G, 1.0, path)["flags"][0] == FLAG_MASTER_GRAD
    G = np.full(700, 1e30, np.float32)  # huge but finite: no flag
    assert _grad_stats_run(G, 1e20, path)["flags"][0] == 0


# --- the scaler's verdict ---------------------------------------------------------------------

SCALER_BASE = {
    "NUM_PARTIALS": 3,
    "B": 5,
    "LR": 1e-3,
    "TOTAL": 100,
    "RING": 4,
    "WARMUP": 10,
    "INTERVAL": 3,
    "HYSTERESIS": 2,
    "MIN_SCALE": 1.0,
    "LOG_BETA1": ops.adam_log_beta(0.9),
    "LOG_BETA2": ops.adam_log_beta(0.999),
}
STATE0 = {
    "scale": 1024.0,
    "growth_tracker": 0,
    "hysteresis_left": 2,
    "iteration": 20,
    "opt_step": 19,
    "data_pos": 100,
    "skipped_total": 1,
    "min_scale_events": 0,
    "first_min_scale_iter": 0,
    "bc1": 1.0,
    "bc2": 1.0,
}
# name: (state changes, flags word, constant changes)
SCALER_SCENARIOS = {
    "clean": ({}, 0, {}),
    "growth": ({"growth_tracker": 2}, 0, {}),
    "growth_to_inf_is_refused": ({"growth_tracker": 2, "scale": 2.0**127}, 0, {}),
    "overflow_within_hysteresis": ({"growth_tracker": 2}, FLAG_H_STORE, {}),
    "overflow_backs_off": ({"hysteresis_left": 1}, FLAG_MASTER_GRAD, {}),
    "overflow_at_floor": ({"hysteresis_left": 1, "scale": 1.0}, FLAG_LOSS, {}),
    "warmup_and_clip": ({"iteration": 3, "opt_step": 3}, 0, {"CLIP": 0.5, "SCHEDULE": 0}),
    "no_scaling_never_skips": ({}, FLAG_H_STORE | FLAG_LOSS, {"SCALING": 0}),
}


for _n in SCALER_SCENARIOS:

    @kernel_case("scaler/" + _n)
    def _scaler_case(name, path):
        changes, found, consts = SCALER_SCENARIOS[name.split("/")[1]]
        c = {**SCALER_BASE, **consts}
        rng = rng_for(name, path)
        inp = {
            "state": {**STATE0, **changes},
            "found": found,
            "consts": c,
            "partials": np.abs(rng.standard_normal(c["NUM_PARTIALS"])).astype(np.float32),
            "loss_rows": np.abs(rng.standard_normal(c["B"])).astype(np.float32),
        }
        out = run_op(
            ops.scaler_step,
            {
                "state": inp["state"],
                "flags": np.array([found, 0, 0, 0], np.uint32),
                "partials": inp["partials"],
                "loss_rows": inp["loss_rows"],
                "metrics": np.full(c["RING"] * 8, 0xDEADBEEF, np.uint32),
            },
            ["state", "flags", "metrics"],
            constants=c,
            path=path,
            gpu=default_gpu(),
        )
        return inp, out


@pytest.mark.parametrize("scenario", list(SCALER_SCENARIOS))
def test_scaler_step(scenario, path):
    inp, out = run("scaler/" + scenario, path)
    c = inp["consts"]
    want, record = ref.scaler_step(inp["state"], inp["found"], inp["partials"], inp["loss_rows"], c)
    got = out["state"]
    lr_err = 0.5 * c["LR"] * 2.0**-11 + 4 * U32 * c["LR"]  # WGSL cos: 2^-11 absolute on [-pi, pi]
    # bc = 1 - beta^t from t ln(beta) with +, * only (scaler.wgsl's one_minus_pow)
    bc_err = {k: ref.BIAS_CORRECTION_ERROR * want[k] for k in ("bc1", "bc2")}
    float_err = {
        "lr": lr_err,
        "loss": dot_error(c["B"]) * want["loss"],
        "grad_norm": (dot_error(c["NUM_PARTIALS"]) + 8 * U32) * want["grad_norm"],
        # clip / scale: a few divisions; 2^-127 (scale 2^127) is subnormal, which may flush to 0
        "grad_mul": 16 * U32 * want["grad_mul"] + 2.0**-126,
        **bc_err,
    }
    for name, value in want.items():
        if name in float_err:
            check_close(got[name], value, float_err[name], f"{scenario}: state.{name}")
        else:
            assert got[name] == value, f"{scenario}: state.{name} = {got[name]}, expected {value}"
    assert out["flags"][0] == 0, "the scaler clears the flags for the next step"
    words = out["metrics"].reshape(c["RING"], 8)
    slot = inp["state"]["iteration"] % c["RING"]
    assert (np.delete(words, slot, 0) == 0xDEADBEEF).all(), "only this step's ring slot is written"
    rec = decode_records(words[slot].tobytes())[0]
    for name, value in record.items():
        if name in float_err:
            check_close(rec[name], value, float_err[name], f"{scenario}: metrics.{name}")
        else:
            assert rec[name] == value, f"{scenario}: metrics.{name} = {rec[name]}, expected {value}"


# --- AdamW ---------------------------------------------------------------------------------------

ADAM_CONSTS = {"WD": 0.01, "BETA1": 0.9, "BETA2": 0.999, "EPS": 1e-8}
ADAM_STATE = {"apply": 1, "lr": 1e-2, "grad_mul": 1 / 1024, "bc1": 0.19, "bc2": 0.0199}
ROWS, COLS = 5, 7
EPS_ROWS = 2
# adamw_copy's two paths: an odd COLS (each row's last word half padding, the override COLS) and
# an even one (the flat words, no size constant), here on the first ROWS * EVEN_COLS values
EVEN_COLS = COLS - 1
COPY_SHAPES = {"adamw_copy": (ROWS, COLS), "adamw_copy_even": (ROWS, EVEN_COLS)}


for _apply in (1, 0):

    @kernel_case(f"adamw/apply{_apply}")
    def _adamw_case(name, path):
        rng = rng_for(name, path)
        n = ROWS * COLS
        # the last EPS_ROWS rows have gradients and moments so small that sqrt(v / bc2) is about
        # eps (7e-9 against 1e-8): where the kernel adds eps matters there
        tiny = np.repeat([1.0, 1e-9], [(ROWS - EPS_ROWS) * COLS, EPS_ROWS * COLS])
        inp = {
            "P": rng.standard_normal(n).astype(np.float32),
            "G": (1024 * tiny * rng.standard_normal(n)).astype(np.float32),
            "Mo": (0.1 * tiny * rng.standard_normal(n)).astype(np.float32),
            "V": (tiny**2 * (0.01 * rng.random(n) + 1e-4)).astype(np.float32),
            "state": {**ADAM_STATE, "apply": int(name.endswith("1"))},
        }
        outs = {
            "adamw": run_op(
                ops.adamw, inp, ["P", "Mo", "V"], N=n, **ADAM_CONSTS, path=path, gpu=default_gpu()
            )
        }
        for entry, (rows, cols) in COPY_SHAPES.items():
            first = {k: v if k == "state" else v[: rows * cols] for k, v in inp.items()}
            outs[entry] = run_op(
                ops.adamw_copy,
                {**first, "Wh": np.full((rows, cols), 3.0)},
                {"P": None, "Mo": None, "V": None, "Wh": ((rows, cols), "padded")},
                ROWS=rows,
                COLS=cols,
                **ADAM_CONSTS,
                path=path,
                gpu=default_gpu(),
            )
        return inp, outs


@pytest.mark.parametrize("entry", ["adamw", *COPY_SHAPES])
def test_adamw(entry, path):
    inp, outs = run("adamw/apply1", path)
    out = outs[entry]
    P, G, Mo, V = (inp[k].astype(np.float64) for k in ("P", "G", "Mo", "V"))
    st = inp["state"]
    p, m, v = ref.adamw(P, G, Mo, V, st, ADAM_CONSTS)
    m_err, v_err, p_err = ref.adamw_error(P, G, Mo, V, st, ADAM_CONSTS)
    eps_rows = slice((ROWS - EPS_ROWS) * COLS, None)
    denom = np.sqrt(v / st["bc2"])
    assert (denom[eps_rows] < ADAM_CONSTS["EPS"]).all() and (
        denom[: eps_rows.start] > 1e3 * ADAM_CONSTS["EPS"]
    ).all()
    n = out["P"].size
    check_close(out["Mo"], m[:n], m_err[:n], f"{entry} m")
    check_close(out["V"], v[:n], v_err[:n], f"{entry} v")
    check_close(out["P"], p[:n], p_err[:n], f"{entry} P")
    if entry in COPY_SHAPES:
        rows, cols = COPY_SHAPES[entry]
        for k in ("P", "Mo", "V"):  # the same adamw_update on the same values: the same bits
            assert out[k].tobytes() == outs["adamw"][k][:n].tobytes(), f"{entry} {k} differs from adamw's"
        Wh = out["Wh"]
        pm = p[:n].reshape(rows, cols)
        check_close(Wh[:, :cols], pm, stored_bound(pm, p_err[:n].reshape(rows, cols), path), "working copy")
        if cols % 2:
            assert not Wh[:, cols].any(), "padding stays zero"


def test_adamw_skips_when_not_applied(path):
    """apply = 0 (the scaler found an overflow): parameters, moments and the copy keep every bit."""
    inp, outs = run("adamw/apply0", path)
    for entry, out in outs.items():
        n = out["P"].size
        for k in ("P", "Mo", "V"):
            assert out[k].tobytes() == inp[k][:n].tobytes(), f"{entry} changed {k}"
    for entry, (_, cols) in COPY_SHAPES.items():
        assert (outs[entry]["Wh"][:, :cols] == 3.0).all()


class _OptimizerSteps:
    """A plan of scaler_step + adamw on n parameters P (zeros), a fixed gradient G, moments Mo, V
    (zeros), with the scaler constants and AdamW hyperparameters a model's plan takes from `cfg`.
    step() clears P, runs the program and reads state, P, Mo and V back in the same submit (one
    map a step: a readback is the slow part on a CPU adapter)."""

    READ = ("state", "P", "Mo", "V")

    def __init__(self, path, cfg, G):
        import wgpu

        from webmp.engine.plan import PlanBuilder
        from webmp.engine.runtime import Runtime
        from webmp.engine.state import STATE_BYTES, STATE_FIELDS, initial_state
        from webmp.models.common import scaler_constants

        pb = PlanBuilder(path)
        pb.buffer("state", STATE_BYTES, "other", "state", (len(STATE_FIELDS),), initial_state(1.0, 1))
        pb.u32("flags", (4,), "other")
        pb.f32("partials", (1,), "other", [1.0])
        pb.f32("loss_rows", (1,), "other", [1.0])
        pb.u32("metrics", (cfg.log_every, 8), "other")
        self.n = n = len(G)
        for name, init in (("P", np.zeros(n)), ("G", G), ("Mo", np.zeros(n)), ("V", np.zeros(n))):
            pb.f32(name, (n,), "other", init)
        c = scaler_constants(cfg, 1, 1)
        ops.scaler_step(pb, "step", c, partials="partials", loss_rows="loss_rows", metrics="metrics")
        hyper = {"WD": cfg.weight_decay, "BETA1": cfg.beta1, "BETA2": cfg.beta2, "EPS": cfg.eps}
        ops.adamw(pb, "step", P="P", G="G", Mo="Mo", V="V", N=n, **hyper)
        plan = pb.kernel_plan(state="state", metrics="metrics", ring=cfg.log_every)
        self.rt = rt = Runtime(plan, bytes(pb.blob), default_gpu())
        self.sizes = [rt.buffers[k].size for k in self.READ]
        self.staging = rt.device.create_buffer(
            size=sum(self.sizes), usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
        )
        self.map_read = wgpu.MapMode.READ

    def step(self) -> dict:
        rt = self.rt
        enc = rt.device.create_command_encoder()
        enc.clear_buffer(rt.buffers["P"])
        rt.encode(enc, "step")
        off = 0
        for name, size in zip(self.READ, self.sizes, strict=True):
            enc.copy_buffer_to_buffer(rt.buffers[name], 0, self.staging, off, size)
            off += size
        rt.device.queue.submit([enc.finish()])
        self.staging.map_sync(self.map_read)
        try:
            raw = bytes(self.staging.read_mapped())
        finally:
            self.staging.unmap()
        out, off = {}, 0
        for name, size in zip(self.READ, self.sizes, strict=True):
            chunk = raw[off : off + size]
            off += size
            out[name] = decode_state(chunk) if name == "state" else np.frombuffer(chunk, np.float32)[: self.n]
        return out


ADAM_STEPS = 3000


@pytest.mark.slow  # 3000 steps each (test_adamw checks the update in the fast tier)
@pytest.mark.parametrize("beta1,beta2", [(0.9, 0.999), (0.9, 0.95)])
def test_adamw_bias_corrections_over_many_steps(beta1, beta2):
    """3000 optimizer steps (scaler_step + adamw, the state's opt_step counting on the GPU) against
    float64 AdamW with its own bias corrections 1 - beta^t (for the f32 betas the moments use):
    each step's bc1, bc2 within BIAS_CORRECTION_ERROR of the exact value, and each step's update
    (P cleared before the step, so P holds -update) and moments, from the GPU's moments before
    the step, within the f32 bounds of test_adamw. Then single steps at opt_step up to 2^24 - 1.
    `1 - pow(beta, t)` in f32 failed this: bc2 off by 1.2e-4 at t = 1 for beta2 = 0.999."""
    from webmp.config import TrainConfig

    cfg = TrainConfig(
        precision="fp32", lr=1e-2, warmup=0, schedule="constant", weight_decay=0.0, beta1=beta1,
        beta2=beta2, log_every=1, checkpoint_every=0, steps=ADAM_STEPS,
    )  # fmt: skip
    rng = np.random.default_rng(17)
    G = (rng.choice([-1, 1], 16) * 10.0 ** rng.uniform(-3, 1, 16)).astype(np.float32)
    opt = _OptimizerSteps("fp32", cfg, G)
    b1, b2, eps, lr = (float(np.float32(v)) for v in (beta1, beta2, cfg.eps, cfg.lr))
    g = G.astype(np.float64)
    Mo = V = np.zeros(len(G))
    bc_rel = ref.BIAS_CORRECTION_ERROR
    for t in range(1, ADAM_STEPS + 1):
        out = opt.step()
        st = out["state"]
        assert st["opt_step"] == t and st["apply"] == 1
        bc1, bc2 = ref.adam_bias_correction(beta1, t), ref.adam_bias_correction(beta2, t)
        check_close(st["bc1"], bc1, bc_rel * bc1, f"step {t}: bc1")
        check_close(st["bc2"], bc2, bc_rel * bc2, f"step {t}: bc2")
        m = b1 * Mo + (1 - b1) * g
        v = b2 * V + (1 - b2) * g * g
        upd = lr * (m / bc1) / (np.sqrt(v / bc2) + eps)
        m_err = 8 * U32 * (b1 * np.abs(Mo) + (1 - b1) * np.abs(g))
        v_err = 8 * U32 * (b2 * V + (1 - b2) * g * g)
        upd_err = lr / bc1 * m_err / np.sqrt(v / bc2) + np.abs(upd) * (
            0.5 * v_err / v + 24 * U32 + 1.5 * bc_rel
        )
        Mo, V = out["Mo"].astype(np.float64), out["V"].astype(np.float64)
        check_close(Mo, m, m_err, f"step {t}: m")
        check_close(V, v, v_err, f"step {t}: v")
        check_close(out["P"], -upd, upd_err, f"step {t}: update")
    # the counter far along: x = t ln(beta) down to the cutoff, and f32(t) exact below 2^24
    for t in np.unique(np.geomspace(ADAM_STEPS, 2**24 - 1, 60).astype(np.int64)):
        opt.rt.write("state", encode_state({**st, "opt_step": int(t) - 1}))
        st = opt.step()["state"]
        assert st["opt_step"] == t
        for k, beta in (("bc1", beta1), ("bc2", beta2)):
            want = ref.adam_bias_correction(beta, int(t))
            check_close(st[k], want, bc_rel * want, f"opt_step {t}: {k}")


# --- the gradient-range lens ----------------------------------------------------------------------


def _grad_hist_values(path: str) -> np.ndarray:
    """[9, 23] values (odd columns: each row's last word holds a pad the kernel must skip) at the
    bucket edges: zeros of both signs, every f16 subnormal power of two and its neighbours, the
    normal floor 2^-14 and the value below it, 2^e and the largest value below 2^(e+1) across the
    range, 65504, Inf, NaN; in fp32 also values below 2^E_MIN (an f32 subnormal), above 2^E_MAX
    and near f32's max; the rest random magnitudes of both signs."""
    f16_edges = [0.0, -0.0, 2.0**-24, 3 * 2.0**-24, 2.0**-15, 2.0**-14 - 2.0**-24, 2.0**-14, 65504.0]
    f16_edges += [np.inf, -np.inf, np.nan, 65472.0, -(2.0**15), 2.0**15 - 32]
    for e in range(-24, 16):
        f16_edges += [2.0**e, -(2.0**e) * 1.5, 2.0**e * (2 - 2.0**-10)]
    values = f16_edges
    if path == "fp32":
        values += [
            2.0**-149,
            2.0**-130,
            2.0**-60,
            2.0**-49,
            2.0**-48,
            2.0**20 * 1.99,
            2.0**21,
            2.0**100,
            3e38,
        ]
    rng = np.random.default_rng(7)
    rest = 9 * 23 - len(values)
    random = rng.choice([-1, 1], rest) * 2.0 ** rng.uniform(-30, 18, rest)
    x = np.concatenate([values, random]).reshape(9, 23)
    with np.errstate(over="ignore"):
        return ref.round_h(x, path) if path != "fp32" else x.astype(np.float32).astype(np.float64)


@kernel_case("grad_hist/edges")
def _grad_hist_case(name, path):
    x = _grad_hist_values(path)
    base, nb = 3, ops.grad_hist_buckets()
    counts = np.full(base + nb + 2, 0, np.uint32)
    out = run_op(
        ops.grad_hist,
        {"X": x, "counts": counts},
        ["counts"],
        ROWS=9,
        COLS=23,
        BASE=base,
        path=path,
        gpu=default_gpu(),
    )
    return {"X": x}, out


def test_grad_hist_counts_like_numpy(path):
    """Every value lands in the bucket of floor(log2 |x|) that numpy's frexp gives, exactly; zeros,
    f16 subnormals, the values either side of each power of two, 65504 (overflow on the f16
    paths, as the training's overflow test says; 2^15 in fp32), Inf and NaN (overflow), and the
    pads of odd rows are not counted. The counters before BASE and after the matrix's stay 0."""
    inp, out = run("grad_hist/edges", path)
    x, got = inp["X"], out["counts"]
    base, nb = 3, ops.grad_hist_buckets()
    with np.errstate(invalid="ignore"):
        want = ref.grad_hist(x, path, ops.GRAD_HIST_E_MIN, ops.GRAD_HIST_E_MAX)
    assert got[:base].tolist() == [0] * base and got[base + nb :].tolist() == [0, 0]
    assert got[base : base + nb].tolist() == want.tolist()
    assert want.sum() == x.size and want[0] >= 2 and want[-1] >= 3
    assert want[2 + (-24 - ops.GRAD_HIST_E_MIN)] > 0  # the smallest f16 subnormal has its bucket
    if path == "fp32":
        assert want[1] >= 3 and want[-2] >= 3  # below 2^E_MIN, above 2^E_MAX


def test_grad_hist_counts_f32_subnormals_by_their_exponent(path):
    """With E_MIN = -149 (f32's smallest subnormal, 2^-149) every f32 subnormal gets the bucket of its
    own exponent (a subnormal's bits are m * 2^-149: floor(log2) = msb(m) - 149), either side of the
    normal floor 2^-126; on the f16 paths the same matrix's values are rounded to f16 (zeros, then
    2^-24 and up: above E_MAX = -100)."""
    e_min, e_max = -149, -26  # 128 buckets: the most one dispatch holds
    tiny = [2.0**-149, 3 * 2.0**-149, 2.0**-148, 2.0**-140, 2.0**-127, 2.0**-126 - 2.0**-149, 2.0**-126]
    tiny += [2.0**-125, 2.0**-100, 2.0**-30, 2.0**-20]
    x = np.array(tiny + [-v for v in tiny] + [0.0], np.float32).astype(np.float64).reshape(1, -1)
    if path != "fp32":
        x = ref.round_h(x, path)
    nb = ops.grad_hist_buckets(e_min, e_max)
    out = run_op(
        ops.grad_hist,
        {"X": x, "counts": np.zeros(nb, np.uint32)},
        ["counts"],
        ROWS=1,
        COLS=x.shape[1],
        BASE=0,
        E_MIN=e_min,
        E_MAX=e_max,
        path=path,
        gpu=default_gpu(),
    )
    want = ref.grad_hist(x, path, e_min, e_max)
    assert out["counts"].tolist() == want.tolist()
    if path == "fp32":  # the subnormals are where the reference puts them, one bucket each
        assert (
            want[2 + (-149 - e_min)] == 2 and want[2 + (-148 - e_min)] == 4 and want[2 + (-127 - e_min)] == 4
        )


# --- native and emulated f16 agree bit for bit ---------------------------------------------------

test_native_matches_emulated = CASES.native_matches_emulated()


# --- gradient accumulation ----------------------------------------------------------------------


@pytest.mark.parametrize("micro", [0, 1, 3])
def test_grad_accum_sums_the_micro_batches_gradients(micro, path):
    """A = G on micro-batch 0 (every bit copied, A's old values ignored, NaN included), else A + G
    within one f32 ulp; a non-finite G raises the master-gradient flag in whichever micro-batch it
    appears, whatever the sum makes of it."""
    rng = np.random.default_rng(micro)
    n = 1000
    G = (rng.standard_normal(n) * 300).astype(np.float32)
    A = (rng.standard_normal(n) * 300).astype(np.float32)
    A[5] = np.nan  # a stale sum from an earlier step: the first micro-batch overwrites it
    for bad in (None, np.inf):
        g = G.copy()
        if bad is not None:
            g[700] = bad
        out = run_op(
            ops.grad_accum,
            {"G": g, "A": A, "state": {"micro": micro}, "flags": np.zeros(4, np.uint32)},
            ["A", "flags"],
            N=n,
            path=path,
            gpu=default_gpu(),
        )
        want = ref.grad_accum(A, g, micro)
        got = out["A"].astype(np.float64)
        finite = np.isfinite(want)
        if micro == 0:
            assert got.tobytes() == want.tobytes()
        else:
            check_close(got[finite], want[finite], np.abs(want[finite]) * 2.0**-23, "A + G")
            assert np.array_equal(np.isfinite(got), finite)
        assert out["flags"][0] == (0 if bad is None else FLAG_MASTER_GRAD)


def test_accum_rows_and_micro_next_place_the_micro_batches(path):
    """accum_rows copies the rows into slot state.micro of the step's (one rank's: slots of its
    rows; a data-parallel rank's: its shard's place in each slot of the global rows, 50 here);
    micro_next counts the micro-batches modulo N, so the step's last leaves 0."""
    rows, n = 37, 4
    src = np.arange(rows, dtype=np.float32) + 0.5
    for micro in range(n):
        for stride, offset in ((rows, 0), (50, 13)):
            out = run_op(
                ops.accum_rows,
                {"src": src, "state": {"micro": micro}, "dst": np.full(stride * n, -1.0, np.float32)},
                ["dst"],
                rows=rows,
                micro_batches=n,
                stride=stride,
                offset=offset,
                path=path,
                gpu=default_gpu(),
            )
            want = np.full(stride * n, -1.0, np.float32)
            want[micro * stride + offset : micro * stride + offset + rows] = src
            assert out["dst"].tobytes() == want.tobytes()
        state = run_op(
            ops.micro_next, {"state": {"micro": micro, "data_pos": 7}}, ["state"], micro_batches=n, path=path
        )["state"]
        assert state["micro"] == (micro + 1) % n and state["data_pos"] == 7
