"""WGSL sources: where they live, how a kernel's sources are joined, and its binding layout.

A kernel is a list of files from shaders/ joined in order with "\n" (`join_sources`): a precision
prelude, common.wgsl, then the family's file(s), shared ones first and the file with the entry
point last (runtimes label the module with the last file). The lists are spelled out in
webmp/ops/, one launcher per family (`PlanBuilder.kernel` adds the first two; `matmul_sources`
for the matmul variants). A file is named by its file name alone, wherever it sits under
shaders/ (shaders/common/ for the preludes, common.wgsl and reduce.wgsl, else the folder of its
family: matmuls/, attention/, rows/, optim/, data/, embed/, eval/, sample/, as webmp/ops/'s
modules); `webmp.resources.shader_path` finds it.
Bindings are read from the `@group(0) @binding(i) var<storage, ...>` (or `var<uniform>`)
declarations of all the files (`parse_bindings`), so the plan can carry explicit bind group layouts
that both runtimes create without further logic.

The contract between the files of a kernel (what a shared file owns, and what it expects the files
after it to define):

- prelude_{native,emulated,f32,bf16}.wgsl: no bindings. Defines HW, H_OVERFLOW_BITS, h_unpack,
  h_pack, h_round, HW4 / h_pack4 (four values stored at once: u32 words on both f16 paths), and
  HWLoad / h_load: the same words as the matmul operands read them (u32 and
  unpack2x16float on both f16 paths: lavapipe reads a vec2<f16> as two 16-bit loads, which made
  the native matmuls ~1.4x slower than the emulated ones; the values are the same), HWLoad2 /
  h_load2 (two such words in one load), HWLoad4 (four, on the f16 paths), and
  h_load_bits (a word's two values as f32 bit patterns, exactly), h_low_halves / h_high_halves
  (two words' first and second values as one word each: bits, not values). The f16 preludes'
  h_round uses common.wgsl's f16_round, their h_load_bits its f16_bits_to_f32.
- common.wgsl: no bindings. Defines State, FLAG_*, NO_LABEL, f32_nonfinite, h_overflows,
  f16_round, f16_bits_to_f32, h_index, ACT_*, act_fwd, act_grad, and the seeded data order pcg_hash and
  seeded_permute (used by gather.wgsl and windows.wgsl; numpy twin webmp.data.tables.permute).
- columns.wgsl (before colsum, layernorm_wgrad): no bindings; overrides M, N. Defines h_element and
  column_sums. Expects `fn column_terms(r: u32, c: u32) -> vec2<f32>` (what row r adds to the
  two sums of column c) and an entry point that calls column_sums.
- reduce.wgsl (before layernorm_fwd, layernorm_bwd, grad_stats, scaler, attn_softmax): no
  bindings. Defines the workgroup array `red`, RED_SUM, RED_MAX, workgroup_reduce, workgroup_sum
  and workgroup_max, and for the thread-per-row forms the private array `lanes` and
  serial_reduce (workgroup_reduce's tree run by one thread over WG lane partials: the same bits).
  Expects `alias RedT` (f32 or vec2<f32>) and `const WG: u32` (the workgroup size, a power of two).
- The row kernels (attn_softmax_fwd, attn_softmax_bwd, layernorm_fwd, layernorm_bwd) each have two
  entry points in their file, the same bits (webmp.ops.ROW_FORMS, launcher argument `rows`):
  `<name>` (a workgroup a row, lane t = local index) and `<name>_thread` (a thread a row, WG rows a
  workgroup, rows past the end return at once; the thread computes every lane's partial in turn
  and reduces with serial_reduce). Lane partials and per-element stores are functions both call.
- add_layernorm_fwd.wgsl (after layernorm_fwd.wgsl, whose Z it adds into: binding 6 A): entries
  add_layernorm_fwd and add_layernorm_fwd_thread, add_h then that form's LayerNorm in one dispatch
  (layernorm_row_workgroup, layernorm_row_serial), a storage barrier between them.
- matmul_operands.wgsl (first matmul file): bindings 0 A, 1 B, 2 args (a uniform MatmulArgs: the
  sizes and operand layouts, read at run time with RUNTIME_DIMS). Defines every override of the
  matmul kernels but the tile shape (SIZE_M, SIZE_N, SIZE_K, RUNTIME_DIMS, TRANS_A, TRANS_B,
  A_ACT, OUT_ACT, B_PAIRS, the batch constants Z_INNER and {A,B,C}_{OFF,SB,SH,LD}, the CONV_*
  geometry; naga 29 panics on some overrides declared in a later file), the private M, N, K,
  z_inner, a_lay, b_lay, c_lay (set by mm_run), uniform_k, mm_z, batch_start, out_index,
  operand_word, load_word, mask_cols, out_rows, store_group, mm_run.
  Expects A's two files, then a core (the tile-shape overrides, TM_MAX, TN4_MAX, `acc`, mm_tile
  filling it, acc_group, out_row, out_col, rows_in_c), then
  `fn col4(c: u32) -> vec4<f32>`, `fn store4(r: u32, c: u32, v: vec4<f32>, col: vec4<f32>) -> bool`
  (storing at out_index) and an entry point that calls mm_run (see mm_run).
- A's files, right after matmul_operands.wgsl (webmp.ops.matmul_sources chooses; no bindings):
  matmul_a_act.wgsl (A_ACT's activation applied as A loads) or matmul_a_raw.wgsl (none), each
  defining act2 and act4; matmul_a_patches.wgsl (const A_CONV = 1, ConvTap, conv_coord,
  conv_tap, conv_load, conv_word: A an image batch read as its patch matrix,
  webmp.ops.conv.implicit_patches) or matmul_a_dense.wgsl (const A_CONV = 0 and a conv_word
  never called). A product compiles only the loader code it runs.
- matmul_b_pairs.wgsl or matmul_b_quads.wgsl (webmp.ops.b_quads chooses): binding 3 B2 (B
  again, two or four words an element, HWLoad2 or HWLoad4: the register core's B_PAIRS loads).
  Define B2_QUADS (which of the two), BQuad, b2_pair (four values) and b2_quad (eight).
- The cores (webmp.ops.MATMUL_CORES, chosen by tiles["core"]): matmul.wgsl ("tiled": workgroup
  memory tiles; overrides WG_X, WG_Y, TM, TN, BK); matmul_reg.wgsl ("reg", "reg_sg": register
  blocks read straight from storage; overrides WG_X, WG_Y, TM, TN; reads B_PAIRS; its a_stored
  loads a word of A, or with A_CONV of the implicit patches), which expects
  `fn k_loops(row0, col0)` (runs its K loop, k_loop or k_loop_compact) and `fn a_words(row0, k)` from
  matmul_reg_a.wgsl ("reg") or matmul_reg_a_sg.wgsl ("reg_sg", subgroup builtins: see
  SOURCE_FEATURES; its override SG_LAYOUT = 1 runs k_loop alone where the plan knows the subgroup
  layout: webmp.engine.subgroups). No bindings.
- sg_layout_probe.wgsl (on its own): binding 0 out; overrides WG_X, WG_Y; entry sg_layout_probe
  (webmp.engine.subgroups' check of a device's subgroups before SG_LAYOUT kernels run).
- matmul_h_out.wgsl (between the core and matmul_fwd / matmul_dgrad / matmul_plain), then one
  store file, matmul_h_store.wgsl (any N) or matmul_h_store4.wgsl (C in aligned 4-column groups:
  webmp.ops.c_quads): no bindings. They define h_overflows4, mm_run_h, and HWOut (C's element:
  HW, or the prelude's HW4) and store_h4. Expect the bindings `C: array<HWOut>` and
  `flags: array<atomic<u32>>` from the variant (their numbers differ between variants).
- matmul_f32_out.wgsl or matmul_f32_out4.wgsl (the same choice; between the core and
  matmul_logits / matmul_wgrad): no bindings. Define F32Out (f32 or vec4<f32>) and store_f32x4.
  Expect the binding `C: array<F32Out>` from the variant.
- attn_softmax.wgsl (after reduce.wgsl, before attn_softmax_fwd / attn_softmax_bwd): no bindings;
  overrides T, SCALE. Defines WG and RedT (for reduce.wgsl), causal_word and causal_store. Expects
  `fn causal_value(j: u32) -> f32` (the output at visible column j of the current row),
  `fn store_word(w: u32, v: vec2<f32>)` (stores word w of the current row's output), the binding
  `flags`, and both entry points (attn_softmax_{fwd,bwd} and _thread), which store rows with
  causal_store. attn_softmax_row.wgsl (after attn_softmax_fwd.wgsl, text generation's one query row
  a head) adds binding 3 seq_len and the entry point attn_softmax_row, built of the fwd file's row
  functions; attn_row.wgsl (after it) adds 4 qkv, 5 cache, 6 O and the entry point attn_row.
- adamw.wgsl: bindings 0 state, 1 P, 2 G, 3 Mo, 4 V; overrides WD, BETA1, BETA2, EPS (no sizes:
  adamw loops over arrayLength(&P)); defines adamw_update and the entry point adamw.
  adamw_copy.wgsl adds binding 5 Wh (its length is the loop's), the override COLS (set only for
  an odd column count) and the entry point adamw_copy.
- The files with the entry points own the rest: matmul_fwd 3 bias, 4 C, 5 flags; matmul_dgrad
  3 Zprev, 4 C, 5 flags; matmul_plain 3 C, 4 flags; matmul_logits 3 bias, 4 C (f32); matmul_wgrad
  3 C (f32); attn_softmax_fwd 0 S, 1 P, 2 flags; attn_softmax_bwd 0 P, 1 dP, 2 dS, 3 flags; the
  other families (colsum, eval, gather and gather_eval (after gather_rows.wgsl: copy_row, no
  bindings), layernorm_*, softmax_xent, grad_stats, scaler) all of theirs, from 0.
- Token-model families, each one file after the prelude and common.wgsl, all bindings their own:
  windows.wgsl (gather_windows: 0 tokens, 1 state, 2 idx, 3 targets), windows_eval.wgsl
  (gather_windows_eval: 0 tokens, 1 chunk, 2 idx, 3 targets),
  embed.wgsl (embed_fwd: 0 idx, 1 wte, 2 wpe, 3 X (h), 4 flags), embed_row.wgsl (embed_row: 0 seq,
  1 seq_len, 2 wte, 3 wpe, 4 X (h), 5 flags), token_rows.wgsl (token_rows:
  0 idx, 1 spans, 2 order), embed_wgrad.wgsl (embed_wgrad: 0 spans, 1 order, 2 dX (h), 3 dwte,
  4 dwpe), add.wgsl (add_h: 0 A (h), 1 Y (h), 2 flags), transpose_h.wgsl (transpose_h: 0 X, 1 Y, both h
  as HWLoad; overrides ROWS, COLS), sample_window.wgsl (sample_window: 0 seq,
  1 seq_len, 2 idx), sample_next.wgsl (sample_next: 0 logits (f32), 1 seq, 2 seq_len),
  sample_rows.wgsl (sample_row_take, sample_row_put: 0 seq_len, 1 X, 2 Y (h)).
- The gradient-range lens: grad_hist_clear.wgsl (grad_hist_clear: 0 counts, u32) and
  grad_hist.wgsl (grad_hist: 0 X (h, as HWLoad), 1 counts (atomic u32)).
- round_h.wgsl (round_h: 0 x, 1 out, both f32): an inspection kernel no model dispatches, the
  prelude's h_round on any f32 input (tests check its ties to even).

Rules:
- The prelude comes first: `enable f16;` (prelude_native) must precede every declaration.
- Otherwise module-scope declarations are order-independent, which is what lets a shared file use
  names that a later file defines (RedT, WG, col4, store4, C, flags, column_terms, causal_value).
- The bindings of all the files are 0..n-1, each declared once (checked by parse_bindings), and
  names are unique across the files of a kernel.
- Every function in the module is validated, called or not, so a shared file may only use names
  that every kernel including it defines. That is why each matmul variant defines col4 even when
  it has no per-column values, and why the stores live in the h and f32 store files (C is h in
  fwd, dgrad and plain, f32 in logits and wgrad).
- naga 29 (wgpu-py 0.32) panics (handlevec.rs, in process_overrides) on an `override` declared
  after a workgroup array sized by an override expression (matmul's tile_a, tile_b). Hence every
  override of the matmul kernels, OUT_ACT (matmul_dgrad's) included, is declared in
  matmul_operands.wgsl or before those arrays in matmul.wgsl, and the files after the core
  declare none. reduce.wgsl's array has a const size,
  so its families may declare overrides anywhere (attn_softmax.wgsl declares T and SCALE).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Literal, TypedDict

from ..resources import shader_path

PRELUDES = {
    "native": "prelude_native.wgsl",
    "emulated": "prelude_emulated.wgsl",
    "fp32": "prelude_f32.wgsl",
    "bf16": "prelude_bf16.wgsl",
}
# Files that use an optional WebGPU feature (its WebGPU name; the plan requires it). wgpu-py's naga
# takes subgroup builtins without a directive (it rejects `enable subgroups;`), browsers need the
# directive, and Tint also `diagnostic(off, subgroup_uniformity);` (matmul_reg_a_sg.wgsl broadcasts
# under a subgroup-uniform branch it cannot prove; naga prints an error for the rule's name):
# web/runner.js puts both before each module of a plan that requires subgroups.
SOURCE_FEATURES = {"matmul_reg_a_sg.wgsl": "subgroups"}

_BINDING = re.compile(
    r"@group\(0\)\s*@binding\((\d+)\)\s*var<(uniform|storage,\s*read|storage,\s*read_write)>\s*(\w+)\s*:\s*([^;]+);"
)


@cache
def read_shader(name: str) -> str:
    return shader_path(name).read_text()


def source_features(sources: list[str] | tuple[str, ...]) -> set[str]:
    return {SOURCE_FEATURES[s] for s in sources if s in SOURCE_FEATURES}


def join_sources(sources: list[str] | tuple[str, ...]) -> str:
    return "\n".join(read_shader(s) for s in sources)


# Uniform structs of the kernels, by the scalar type all their members are vectors of (what the
# buffer bound to them holds: the plan's dtype)
UNIFORM_STRUCTS = {"MatmulArgs": "u32"}


def element_kind(wgsl_type: str) -> str:
    """'h' for activation-format words, else the scalar type ('f32', 'u32', 'atomic', 'State')."""
    t = wgsl_type.replace(" ", "")
    if t in ("array<HW>", "array<HWLoad>", "array<HWLoad2>", "array<HWLoad4>", "array<HWOut>"):
        return "h"
    if t == "array<F32Out>":  # f32 values, one or four an element (matmul_f32_out*.wgsl)
        return "f32"
    if t.startswith("array<atomic<"):
        return "atomic"
    if t in UNIFORM_STRUCTS:
        return UNIFORM_STRUCTS[t]
    m = re.fullmatch(r"(?:array|vec\d)<(\w+)>", t)  # a uniform's vector: its scalar type
    return m.group(1) if m else t


BindingType = Literal["read-only-storage", "storage", "uniform"]


class Binding(TypedDict):
    binding: int
    name: str
    type: BindingType
    element: str  # see element_kind


# WGSL address space and access -> the binding type of a bind group layout entry (both runtimes)
_BINDING_TYPES: dict[str, BindingType] = {
    "storage,read": "read-only-storage",
    "storage,read_write": "storage",
    "uniform": "uniform",
}


@cache  # a plan builder asks for the same kernels' bindings many times; callers copy each (Binding(**b))
def parse_bindings(sources: tuple[str, ...]) -> tuple[Binding, ...]:
    found: dict[int, Binding] = {}
    for name in sources:
        for m in _BINDING.finditer(read_shader(name)):
            idx = int(m.group(1))
            if idx in found:
                raise ValueError(f"binding {idx} declared twice in {sources}")
            found[idx] = {
                "binding": idx,
                "name": m.group(3),
                "type": _BINDING_TYPES[m.group(2).replace(" ", "")],
                "element": element_kind(m.group(4)),
            }
    if sorted(found) != list(range(len(found))):
        raise ValueError(f"bindings of {sources} are not 0..n-1: {sorted(found)}")
    return tuple(found[i] for i in range(len(found)))
