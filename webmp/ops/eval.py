"""Evaluation (shaders/eval/): the accuracy counters and the chunked cross-entropy sum."""

from __future__ import annotations

from ..engine.plan import PlanBuilder
from .common import cdiv


def eval_reset(
    pb: PlanBuilder, program: str, *, logits: str, labels: str, result: str, B: int, C: int
) -> None:
    """Zero the (correct, counted) counters."""
    pb.dispatch(
        program,
        ["eval.wgsl"],
        "eval_reset",
        {"B": B, "C": C},
        {"logits": logits, "labels": labels, "result": result},
        [1],
    )


def eval_count(
    pb: PlanBuilder, program: str, *, logits: str, labels: str, result: str, B: int, C: int
) -> None:
    """Count the rows whose argmax is the label (rows labelled NO_LABEL are not counted)."""
    pb.dispatch(
        program,
        ["eval.wgsl"],
        "eval_count",
        {"B": B, "C": C},
        {"logits": logits, "labels": labels, "result": result},
        [cdiv(B, 64)],
    )


def eval_loss_chunk(
    pb: PlanBuilder,
    program: str,
    *,
    logits: str,
    labels: str,
    partial: str,
    total: str,
    B: int,
    C: int,
    chunk: int,
    chunks: int,
) -> None:
    """partial[chunk] = the sum of the B rows' cross-entropy losses in f32 (NO_LABEL rows add 0),
    by one workgroup in a fixed order."""
    if not 0 <= chunk < chunks:
        raise ValueError(f"chunk {chunk} not in 0 .. {chunks - 1}")
    pb.dispatch(
        program,
        ["reduce.wgsl", "eval_loss.wgsl"],
        "eval_loss_chunk",
        {"B": B, "C": C, "CHUNK": chunk, "CHUNKS": chunks},
        {"logits": logits, "labels": labels, "partial": partial, "total": total},
        [1],
    )


def eval_loss_total(
    pb: PlanBuilder, program: str, *, logits: str, labels: str, partial: str, total: str, B: int, C: int,
    chunks: int,
) -> None:  # fmt: skip
    """total[0] = partial[0] + ... + partial[chunks - 1], in that order."""
    pb.dispatch(
        program,
        ["reduce.wgsl", "eval_loss.wgsl"],
        "eval_loss_total",
        {"B": B, "C": C, "CHUNKS": chunks},
        {"logits": logits, "labels": labels, "partial": partial, "total": total},
        [1],
    )
