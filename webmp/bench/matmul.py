"""`webmp bench`'s matmul section: GFLOP/s of our kernel on each precision path (f16 native, f16
emulated, bf16, f32) at the size's square and training shapes, each matmul core at a fixed tile choice
beside the tuned one, numpy float32 on the host and PyTorch on its best device when importable; and
every distinct matmul shape of the GPT's plan with the plan's own tiles, and their median. Every
shape is checked against numpy before it is timed; GPU time = many dispatches in one pass, one
submit, one wait."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ..engine.tiles import DEFAULT_TILES, Tiles, TileTable
from ..tune import matmul_cases
from ..tune import native as tune

PRODUCTS = {  # name -> (variant, trans_a, trans_b); the three products a training step runs
    "A.B": ("matmul_fwd", 0, 0),
    "At.B": ("matmul_wgrad", 1, 0),
    "A.Bt": ("matmul_dgrad", 0, 1),
}

# A tile choice per matmul core (webmp.ops.MATMUL_CORES), timed beside the tuned choice at every
# benchmarked shape: what each core does here, whatever the tuner picked.
CORE_TILES: dict[str, Tiles] = {
    "tiled": DEFAULT_TILES,
    "reg": {"core": "reg", "WG_X": 8, "WG_Y": 4, "TM": 16, "TN": 4, "B_PAIRS": 1},
    "reg_sg": {"core": "reg_sg", "WG_X": 8, "WG_Y": 4, "TM": 16, "TN": 8, "B_PAIRS": 1},
}


def _best_of(fn, n=3):
    return min(fn() for _ in range(n))


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _numpy_gflops(a, b, flops, target_s):
    """numpy float32 a @ b: the better of BLAS's own threading and one thread (a busy small
    machine can make multi-threaded BLAS far slower than one thread)."""
    from threadpoolctl import threadpool_limits

    def measure():
        once = max(1e-6, _best_of(lambda: _timed(lambda: a @ b), 2))
        reps = int(min(50, max(1, target_s / once)))
        return flops * reps / _best_of(lambda: _timed(lambda: [a @ b for _ in range(reps)]), 5) / 1e9

    threaded = measure()
    with threadpool_limits(limits=1, user_api="blas"):
        single = measure()
    return max(threaded, single)


def torch_matmul(case, target_s: float) -> dict:
    """PyTorch on its best device: CUDA fp32 (TF32 off) and fp16, else CPU fp32. {} if absent."""
    try:
        import torch
    except ImportError:
        return {}
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    a = case.a.T if case.trans_a else case.a
    b = case.b.T if case.trans_b else case.b
    ref = a @ b
    out: dict[str, Any] = {"torch_device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for name, dt in [("torch_fp32", torch.float32)] + (
        [("torch_fp16", torch.float16)] if dev == "cuda" else []
    ):
        ta = torch.tensor(a, dtype=dt, device=dev)
        tb = torch.tensor(b, dtype=dt, device=dev)
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        got = (ta @ tb).float().cpu().numpy()
        out[name + "_max_abs_err"] = float(np.abs(got - ref).max())

        def batch(reps, ta=ta, tb=tb, sync=sync):
            sync()
            t0 = time.perf_counter()
            for _ in range(reps):
                ta @ tb
            sync()
            return time.perf_counter() - t0

        once = max(1e-6, batch(1))
        reps = int(min(200, max(2, target_s / once)))
        out[name] = case.flops * reps / _best_of(lambda reps=reps: batch(reps)) / 1e9
    return out


def matmul_shapes(preset) -> list[tuple]:
    """(kind, product, (M, N, K)): squares, and each training shape's three products."""
    shapes = [("square", "A.B", (n, n, n)) for n in preset["square"]]
    for batch, fin, fout in preset["train"]:  # batch x in x out: forward, weight grad, input grad
        shapes += [
            ("train", "A.B", (batch, fout, fin)),
            ("train", "At.B", (fin, fout, batch)),
            ("train", "A.Bt", (batch, fin, fout)),
        ]
    return shapes


def core_cases(gpu, path, M, N, K, variant, ta, tb) -> dict[str, tune.MatmulCase | None]:
    """Each core (CORE_TILES) that the device runs at this product, checked: None where its result
    is wrong here (its figure is NaN; the tuner, which checks the same way, never chooses it)."""
    out: dict[str, tune.MatmulCase | None] = {}
    for core, tiles in CORE_TILES.items():
        if not matmul_cases.fits(tiles, gpu.device.limits, gpu.has_subgroups):
            continue
        case = tune.MatmulCase(gpu, path, M, N, K, variant, ta, tb, tiles=tiles)
        out[core] = case if case.check() <= 1.0 else None
    return out


def matmul_line(row) -> str:
    g = row["gflops"]
    cells = "  ".join(f"{k} {v:8.2f}" for k, v in g.items())
    return f"{row['kind']:6} {row['product']:5} {row['M']:>5}x{row['N']:<5}x{row['K']:<5} {cells}"


def bench_matmul(gpu, paths, preset, log) -> list[dict]:
    """Every shape on every path with the tiles a run would use (and each core at CORE_TILES for
    the first `core_rows` shapes), each checked against numpy first, then all timed together: the
    fastest of 5 rounds over all of them (tune.interleaved_gflops), so that a slow minute of a
    shared host hits every figure alike rather than the few shapes timed in it."""
    table = TileTable.for_adapter(gpu.name, gpu.info)
    rows: list[tuple[dict, tune.MatmulCase]] = []  # each row and its last path's case (for numpy's)
    timed: list[tuple[dict, str, str | None, tune.MatmulCase]] = []  # (row, path, core or None, case)
    for kind, product, (M, N, K) in matmul_shapes(preset):
        variant, ta, tb = PRODUCTS[product]
        row: dict[str, Any] = {
            "kind": kind,
            "product": product,
            "M": M,
            "N": N,
            "K": K,
            "gflops": {},
            "error_ratio": {},
            "tiles": {},
            "cores": {},
        }
        case: tune.MatmulCase | None = None
        for path in paths:
            case = tune.MatmulCase(
                gpu, path, M, N, K, variant, ta, tb, tiles=table.for_shape(path, M, N, K, ta, tb)
            )
            err = case.check()
            row["error_ratio"][path] = round(err, 4)
            row["tiles"][path] = case.tiles
            if err > 1.0:
                raise RuntimeError(
                    f"matmul {product} {M}x{N}x{K} on the {path} path is wrong "
                    f"(worst error {err:.3g} x its tolerance); not timing it"
                )
            timed.append((row, path, None, case))
            if preset.get("core_rows") is None or len(rows) < preset["core_rows"]:
                row["cores"][path] = {}
                for core, core_case in core_cases(gpu, path, M, N, K, variant, ta, tb).items():
                    if core_case is None:
                        row["cores"][path][core] = math.nan
                    else:
                        timed.append((row, path, core, core_case))
        assert case is not None, "bench_matmul needs at least one path"
        rows.append((row, case))
    gflops = tune.interleaved_gflops([c for *_, c in timed], preset["matmul_s"], rounds=5)
    for (row, path, timed_core, _), g in zip(timed, gflops, strict=True):
        if timed_core is None:
            row["gflops"][path] = g
        else:
            row["cores"][path][timed_core] = g
    for row, case in rows:
        _, ta, tb = PRODUCTS[row["product"]]
        a = (case.a.T if ta else case.a).astype(np.float32)
        b = (case.b.T if tb else case.b).astype(np.float32)
        row["gflops"]["numpy_f32"] = _numpy_gflops(a, b, case.flops, preset["matmul_s"])
        extra = torch_matmul(case, preset["matmul_s"])
        row["gflops"].update({k: v for k, v in extra.items() if k in ("torch_fp32", "torch_fp16")})
        row.update({k: v for k, v in extra.items() if k not in ("torch_fp32", "torch_fp16")})
        log("  matmul " + matmul_line(row))
    return [row for row, _ in rows]


def bench_model_matmuls(gpu, plans: dict, paths, target_s: float, log) -> dict:
    """GFLOP/s of every distinct matmul shape of the GPT's mixed plan, with the tiles the plan uses
    (the tune cache's, else the defaults), per path, and their median per path: the fastest of 5
    rounds over all the shapes and paths (tune.interleaved_gflops). Attention's
    batched products are timed batched as the model dispatches them (`batch` batch-heads a
    dispatch; operands one batch after another rather than interleaved by head: the same
    arithmetic, tiles and grid)."""
    table = TileTable.for_adapter(gpu.name, gpu.info)
    out: dict[str, Any] = {}
    for (name, precision), (plan, _, _) in plans.items():
        if precision != "mixed" or name != "gpt":  # the GPT's shapes are the ones at stake
            continue
        products = list(dict.fromkeys(s[1:] for s in tune.plan_shapes(plan)))
        rows: list[dict] = []
        timed: list[tuple[dict, str, tune.MatmulCase]] = []
        for M, N, K, ta, tb, batch in products:
            row: dict[str, Any] = {
                "M": M,
                "N": N,
                "K": K,
                "trans_a": ta,
                "trans_b": tb,
                "batch": batch,
                "gflops": {},
                "tiles": {},
            }
            for path in paths:
                tiles = table.for_shape(path, M, N, K, ta, tb)
                case = tune.MatmulCase(gpu, path, M, N, K, "matmul_wgrad", ta, tb, tiles=tiles, batch=batch)
                if case.check() > 1.0:
                    raise RuntimeError(f"matmul {M}x{N}x{K} ({ta}{tb}) with {tiles} on {path} is wrong")
                timed.append((row, path, case))
                row["tiles"][path] = tiles
            rows.append(row)
        gflops = tune.interleaved_gflops([case for _, _, case in timed], target_s, rounds=5)
        for (row, path, _), gf in zip(timed, gflops, strict=True):
            row["gflops"][path] = gf
        median = {path: float(np.median([r["gflops"][path] for r in rows])) for path in paths}
        out[name] = {"shapes": rows, "median_gflops": median}
        log(
            f"  {name}: median over its {len(rows)} matmul shapes "
            + "  ".join(f"{p} {g:.2f}" for p, g in median.items())
        )
    return out
