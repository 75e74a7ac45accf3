"""One launcher per kernel family: its shader files, entry point, override constants, bindings and
workgroup counts, in one place.

A launcher adds one dispatch to a program of a `PlanBuilder`. Its buffer arguments are named like
the kernel's WGSL bindings (and take buffer names) — except attention_matmul's, named by their role
in attention (qkv, P, S, ...) because one buffer may be bound twice (qkv as A and B); its other
arguments are the sizes and constants the kernel needs. Models (webmp/models/), `webmp.testing.probe` and
the tests all dispatch through these functions, so a grid or a constant is computed in one place
only.

The modules follow the shader folders (shaders/<module>/): common (workgroup counts, activation
codes), matmuls, attention, rows (softmax cross-entropy, column sums, LayerNorm, RMSNorm),
elementwise (standalone activations, dropout), optim (grad_stats,
the gradient-range lens, the scaler, AdamW, gradient accumulation), data (batches and token
windows), embed (the token model's embedding, adds and transposes; round_h), eval, formats (the
bf16/fp8 casts), sample, conv (im2col and col2im, the pools, repack_h). Callers use the names below as
`ops.name`; the rest (grid, the workgroup sizes) stay in their modules.
"""

from __future__ import annotations

from .attention import (
    ATTENTION_PRODUCTS,
    HEAD_PARTS,
    attention_matmul,
    attention_row,
    attention_row_matmul,
    attention_scale,
    attention_shape,
    attn_softmax_bwd,
    attn_softmax_fwd,
    attn_softmax_row,
)
from .common import ACT_CODES, cdiv
from .conv import avgpool_bwd, avgpool_fwd, col2im, conv_out, im2col, maxpool_bwd, maxpool_fwd, repack_h
from .data import gather_eval, gather_train, gather_windows, gather_windows_eval
from .elementwise import act_bwd, act_fwd, dropout_bwd, dropout_fwd
from .embed import add_h, embed_fwd, embed_row, embed_wgrad, round_h, token_rows, transpose_h
from .eval import eval_count, eval_loss_chunk, eval_loss_total, eval_next_chunk, eval_reset
from .flash import (
    FLASH_MAX_HEAD,
    flash_attention_bwd,
    flash_attention_fwd,
    flash_bwd_dot,
    flash_bwd_grads,
    flash_supported,
    flash_tile,
)
from .formats import FP8_BUFFERS, cast_formats, decode_formats, fp8_cast, fp8_cast_weights, fp8_scales
from .matmuls import (
    H_OUT_VARIANTS,
    MATMUL_CORES,
    MATMUL_VARIANTS,
    Layout,
    b_pairs,
    b_quads,
    c_quads,
    core_constants,
    matmul,
    matmul_args,
    matmul_sources,
)
from .optim import (
    GRAD_HIST_E_MAX,
    GRAD_HIST_E_MIN,
    GRAD_HIST_MAX_BUCKETS,
    accum_rows,
    adam_log_beta,
    adamw,
    adamw_copy,
    grad_accum,
    grad_hist,
    grad_hist_buckets,
    grad_hist_clear,
    grad_stats,
    grad_stats_workgroups,
    micro_next,
    scaler_step,
)
from .rows import (
    ROW_FORMS,
    colsum,
    layernorm_bwd,
    layernorm_fwd,
    layernorm_wgrad,
    rmsnorm_bwd,
    rmsnorm_fwd,
    rmsnorm_wgrad,
    softmax_xent,
)
from .sample import (
    SAMPLE_CUTOFF,
    sample_next,
    sample_row_put,
    sample_row_take,
    sample_temperature,
    sample_window,
)

__all__ = [
    "ACT_CODES",
    "ATTENTION_PRODUCTS",
    "FLASH_MAX_HEAD",
    "GRAD_HIST_E_MAX",
    "GRAD_HIST_E_MIN",
    "GRAD_HIST_MAX_BUCKETS",
    "HEAD_PARTS",
    "H_OUT_VARIANTS",
    "MATMUL_CORES",
    "MATMUL_VARIANTS",
    "ROW_FORMS",
    "SAMPLE_CUTOFF",
    "Layout",
    "accum_rows",
    "act_bwd",
    "act_fwd",
    "adam_log_beta",
    "adamw",
    "adamw_copy",
    "add_h",
    "attention_matmul",
    "attention_row",
    "attention_row_matmul",
    "attention_scale",
    "attention_shape",
    "attn_softmax_bwd",
    "attn_softmax_fwd",
    "attn_softmax_row",
    "avgpool_bwd",
    "avgpool_fwd",
    "b_pairs",
    "b_quads",
    "c_quads",
    "cdiv",
    "col2im",
    "colsum",
    "conv_out",
    "core_constants",
    "dropout_bwd",
    "dropout_fwd",
    "embed_fwd",
    "embed_row",
    "flash_attention_bwd",
    "flash_attention_fwd",
    "flash_bwd_dot",
    "flash_bwd_grads",
    "flash_supported",
    "flash_tile",
    "embed_wgrad",
    "cast_formats",
    "decode_formats",
    "FP8_BUFFERS",
    "fp8_cast",
    "fp8_cast_weights",
    "fp8_scales",
    "eval_count",
    "eval_loss_chunk",
    "eval_loss_total",
    "eval_next_chunk",
    "eval_reset",
    "gather_eval",
    "gather_train",
    "gather_windows",
    "gather_windows_eval",
    "grad_accum",
    "grad_hist",
    "grad_hist_buckets",
    "grad_hist_clear",
    "grad_stats",
    "grad_stats_workgroups",
    "im2col",
    "layernorm_bwd",
    "layernorm_fwd",
    "layernorm_wgrad",
    "matmul",
    "matmul_args",
    "matmul_sources",
    "maxpool_bwd",
    "maxpool_fwd",
    "rmsnorm_bwd",
    "rmsnorm_fwd",
    "rmsnorm_wgrad",
    "repack_h",
    "round_h",
    "sample_next",
    "sample_row_put",
    "sample_row_take",
    "sample_temperature",
    "sample_window",
    "micro_next",
    "scaler_step",
    "softmax_xent",
    "token_rows",
    "transpose_h",
]
