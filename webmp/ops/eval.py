"""Evaluation (shaders/eval/): the accuracy counters, the chunk counter and the chunked cross-entropy
sum."""

from __future__ import annotations

from ..engine.plan import PlanBuilder
from .common import cdiv


def _counters(
    pb: PlanBuilder, program: str, entry: str, logits: str, labels: str, result: str, chunk: str,
    B: int, C: int, workgroups: int,
) -> None:  # fmt: skip
    pb.dispatch(
        program,
        ["eval.wgsl"],
        entry,
        {"B": B, "C": C},
        {"logits": logits, "labels": labels, "result": result, "chunk": chunk},
        [workgroups],
    )


def eval_reset(
    pb: PlanBuilder, program: str, *, logits: str, labels: str, result: str, chunk: str, B: int, C: int
) -> None:
    """Zero the (correct, counted) counters and the chunk counter chunk[0]."""
    _counters(pb, program, "eval_reset", logits, labels, result, chunk, B, C, 1)


def eval_next_chunk(
    pb: PlanBuilder, program: str, *, logits: str, labels: str, result: str, chunk: str, B: int, C: int
) -> None:
    """chunk[0] += 1: the next chunk for the evaluation's gathers and eval_loss_chunk, which read
    it on the GPU (so every chunk runs the same pipelines)."""
    _counters(pb, program, "eval_next_chunk", logits, labels, result, chunk, B, C, 1)


def eval_count(
    pb: PlanBuilder, program: str, *, logits: str, labels: str, result: str, chunk: str, B: int, C: int
) -> None:
    """Count the rows whose argmax is the label (rows labelled NO_LABEL are not counted)."""
    _counters(pb, program, "eval_count", logits, labels, result, chunk, B, C, cdiv(B, 64))


def eval_loss_chunk(
    pb: PlanBuilder,
    program: str,
    *,
    logits: str,
    labels: str,
    partial: str,
    total: str,
    chunk: str,
    B: int,
    C: int,
    chunks: int,
) -> None:
    """partial[chunk[0]] = the sum of the B rows' cross-entropy losses in f32 (NO_LABEL rows add
    0), by one workgroup in a fixed order (nothing is written for a chunk[0] >= chunks)."""
    if chunks < 1:
        raise ValueError(f"chunks must be positive, got {chunks}")
    pb.dispatch(
        program,
        ["reduce.wgsl", "eval_loss.wgsl"],
        "eval_loss_chunk",
        {"B": B, "C": C, "CHUNKS": chunks},
        {"logits": logits, "labels": labels, "partial": partial, "total": total, "chunk": chunk},
        [1],
    )


def eval_loss_total(
    pb: PlanBuilder, program: str, *, logits: str, labels: str, partial: str, total: str, chunk: str,
    B: int, C: int, chunks: int,
) -> None:  # fmt: skip
    """total[0] = partial[0] + ... + partial[chunks - 1], in that order."""
    pb.dispatch(
        program,
        ["reduce.wgsl", "eval_loss.wgsl"],
        "eval_loss_total",
        {"B": B, "C": C, "CHUNKS": chunks},
        {"logits": logits, "labels": labels, "partial": partial, "total": total, "chunk": chunk},
        [1],
    )
