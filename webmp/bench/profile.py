"""`webmp bench --profile`: GPU time per kernel of a program from timestamp queries (one compute pass
per dispatch), summed by kernel and matmul shape, and by kernel family."""

from __future__ import annotations

import numpy as np

from .step import bare_dispatches


def _matmul_shape(kernel, dispatch) -> str:
    """MxNxK (T when an operand is transposed) of a matmul dispatch: its size constants, or with
    RUNTIME_DIMS its args buffer's name (webmp.ops.matmul_args names it by the sizes)."""
    c = kernel["constants"]
    if "SIZE_M" in c:
        mnk = f"{c['SIZE_M']}x{c['SIZE_N']}x{c['SIZE_K']}"
    else:
        mnk = next(b for b in dispatch["bind"] if b.startswith("matmul_args_"))[len("matmul_args_") :]
    return mnk + ("T" if c.get("TRANS_A") else "N") + ("T" if c.get("TRANS_B") else "N")


def profile_program(rt, program="train_step", steps: int = 3) -> dict | None:
    """GPU time per kernel from timestamp queries (one pass per dispatch); None without the feature."""
    import wgpu

    if "timestamp-query" not in rt.device.features:
        return None
    ds = rt.plan["programs"][program]
    bare = bare_dispatches(rt, program)
    n = 2 * len(ds)
    qs = rt.device.create_query_set(type="timestamp", count=n)
    resolved = rt.device.create_buffer(
        size=8 * n, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
    )
    kernels = {k["name"]: k for k in rt.plan["kernels"]}
    total: dict[tuple[str, str], float] = {}
    for _ in range(steps):
        enc = rt.device.create_command_encoder()
        for i, (pipeline, bg, (x, y, z)) in enumerate(bare):
            cpass = enc.begin_compute_pass(
                timestamp_writes={
                    "query_set": qs,
                    "beginning_of_pass_write_index": 2 * i,
                    "end_of_pass_write_index": 2 * i + 1,
                }
            )
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, bg)
            cpass.dispatch_workgroups(x, y, z)
            cpass.end()
        enc.resolve_query_set(qs, 0, n, resolved, 0)
        rt.device.queue.submit([enc.finish()])
        ticks = np.frombuffer(rt.device.queue.read_buffer(resolved), np.uint64).reshape(-1, 2)
        for d, (t0, t1) in zip(ds, ticks, strict=True):
            k = kernels[d["kernel"]]
            shape = _matmul_shape(k, d) if k["entry"].startswith("matmul") else ""
            key = (k["entry"], shape)
            total[key] = total.get(key, 0.0) + max(0, int(t1) - int(t0)) / 1e3 / steps  # ns -> us
    step_us = sum(total.values())
    rows = [
        {
            "kernel": e,
            "shape": s,
            "us_per_step": round(us, 2),
            "share": round(us / step_us, 4) if step_us else 0,
        }
        for (e, s), us in sorted(total.items(), key=lambda kv: -kv[1])
    ]
    by_family: dict[str, float] = {}
    for (e, _), us in total.items():
        by_family[e] = by_family.get(e, 0.0) + round(us, 2)
    return {
        "gpu_us_per_step": round(step_us, 1),
        "kernels": rows,
        "families": {k: round(v, 2) for k, v in sorted(by_family.items(), key=lambda kv: -kv[1])},
        "note": "one compute pass per dispatch, timestamps in ns as WebGPU defines them",
    }
