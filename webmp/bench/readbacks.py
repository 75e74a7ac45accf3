"""`webmp bench`'s readbacks section: every GPU->host read the real training loop
(webmp.train.loop.Trainer) makes, counted against what its logging schedule asks for."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..config import TrainConfig


def bench_readbacks(
    gpu, steps: int, log_every: int, checkpoint_every: int = 0, config: dict | None = None, data=None
) -> dict:
    """Trains `config` (TrainConfig fields; default the digits MLP) on `data` (default: what the
    config names) for `steps` steps with webmp.train.loop.Trainer and records every GPU->host read it
    makes: metrics-ring maps (Runtime.readbacks) and whole-buffer reads (Runtime.read).
    Checkpoints (off by default: only the final one) are readbacks too and are counted. The
    schedule asks for ceil(steps / log_every) maps: one every log_every steps and one after the
    last step."""
    from ..train.loop import Trainer

    fields = {**(config or {}), "steps": steps, "log_every": log_every, "checkpoint_every": checkpoint_every}
    cfg = TrainConfig(**fields)
    with tempfile.TemporaryDirectory() as tmp:
        tr = Trainer(cfg, out=Path(tmp) / "run", gpu=gpu, dataset=data, progress=False, log=None)
        rt = tr.runtime
        reads = []  # (step being run or just finished, kind)
        run, read = rt.run, rt.read

        def counted_run(program, read_metrics=False, **kw):  # kw: the lens's histograms=
            out = run(program, read_metrics=read_metrics, **kw)
            if read_metrics:
                reads.append((tr.step + 1, "metrics"))
            return out

        def counted_read(name):
            reads.append((tr.step, f"read:{name}"))
            return read(name)

        setattr(rt, "run", counted_run)  # noqa: B010 (count the Trainer's own calls)
        setattr(rt, "read", counted_read)  # noqa: B010
        before = rt.readbacks
        loop_end = []
        finish = tr.finish

        def marked_finish():
            loop_end.append((len(reads), rt.readbacks))
            return finish()

        setattr(tr, "finish", marked_finish)  # noqa: B010
        tr.run()
    in_loop, maps_in_loop = loop_end[0]
    loop_reads = reads[:in_loop]
    between = [r for r in loop_reads if r[0] % log_every != 0 and r[0] != steps]
    return {
        "model": cfg.model,
        "steps": steps,
        "log_every": log_every,
        "expected_readbacks": -(-steps // log_every),
        "readbacks_in_loop": len(loop_reads),
        "runtime_readbacks_in_loop": maps_in_loop - before,
        "limit_per_100_steps": 100 / log_every,
        "readbacks_per_100_steps": len(loop_reads) * 100 / steps,
        "readbacks_between_logs": len(between),
        "reads_after_training": sorted({k for _, k in reads[in_loop:]}),
    }


def readback_line(name: str, rb: dict) -> str:
    return (
        f"{name}: {rb['readbacks_in_loop']} reads in {rb['steps']} steps at log_every="
        f"{rb['log_every']} (the schedule's {rb['expected_readbacks']}; Runtime.readbacks "
        f"{rb['runtime_readbacks_in_loop']}), {rb['readbacks_between_logs']} between log intervals"
    )
