// Contract (webmp/wgsl.py): first matmul file; owns bindings 0 (A), 1 (B), 2 (args) and every
// override but a core's tile shape; then A's two files (how its
// values load: matmul_a_act.wgsl or matmul_a_raw.wgsl, A_ACT, act2, act4; where from:
// matmul_a_dense.wgsl or matmul_a_patches.wgsl, A_CONV, conv_word); a core (matmul.wgsl,
// matmul_reg.wgsl) follows and defines mm_tile, acc_group, out_row, out_col and rows_in_c; the
// variant defines col4, store4.
// The operands of the matmul kernels: C[M,N] = op(A)[M,K] * op(B)[K,N] with f16 operands (read
// from packed HW words) and f32 accumulation, for each batch z of the grid's z dimension (one
// batch: the MLP). A core computes the products: matmul.wgsl stages tiles in workgroup memory,
// matmul_reg.wgsl reads register blocks straight from storage (no workgroup memory, no barriers).
// A variant file (matmul_fwd, matmul_logits, matmul_wgrad, matmul_dgrad, matmul_plain; fwd, dgrad
// and plain after matmul_h_out.wgsl) adds its bindings, its epilogue (col4 and store4: see mm_run)
// and an entry point (@workgroup_size(WG_X, WG_Y)) that calls mm_run.
//
// Storage layout of an HW ("h") matrix [rows, cols]: row-major, rows * ceil(cols/2) words,
// two consecutive columns per word, low half first; an odd row's last half is zero padding.
//
// Batched, strided operands (attention): workgroup z is a batch index, split as z = b * Z_INNER + h
// (b: batch, h: head). Operand X (A, B or C) of batch z starts at element
//   X_OFF + b * X_SB + h * X_SH
// of its buffer, and its rows are X_LD elements apart (0: the natural stride, its column count
// rounded up to whole words, or N for an f32 C). All of these are in elements; for h matrices
// they must be even (whole words: webmp.ops checks), so staging keeps its whole-word loads and a
// store never shares a word with a neighbouring batch. The defaults (one batch, offset 0, natural
// strides) address exactly as before: the MLP's matmuls compute the same values.
//
// Every core accumulates each output in k order, one fma per k from zero, on f32 values (f16
// values are exact in f32): the cores compute the same values on one adapter.

@group(0) @binding(0) var<storage, read> A: array<HWLoad>;
@group(0) @binding(1) var<storage, read> B: array<HWLoad>;
// Binding 3, B2 (B again, several words an element, for the register core's B_PAIRS loads), is
// declared by matmul_b_pairs.wgsl or matmul_b_quads.wgsl, whichever webmp.ops.matmul includes.
// This product's sizes and operand layouts (RUNTIME_DIMS; the batch constants below, in order).
struct MatmulArgs {
  dims: vec4<u32>,  // M, N, K, Z_INNER
  a: vec4<u32>,     // A_OFF, A_SB, A_SH, A_LD
  b: vec4<u32>,
  c: vec4<u32>,
}
@group(0) @binding(2) var<uniform> args: MatmulArgs;

// The product's sizes and its operands' layouts. Fixed per pipeline (SIZE_M, SIZE_N, SIZE_K and the
// batch constants) they fold into the code; with RUNTIME_DIMS = 1 they are read from `args` at run
// time, so one pipeline serves a variant's every size and layout: on lavapipe, which compiles each
// pipeline at its first dispatch, that is what a first step waits for (docs/benchmarks.md "Cold
// start"). A uniform, not a storage buffer: lavapipe then knows every lane sees the same K; read
// from storage, the K loop ran masked and the default MLP's step took twice as long. Set by mm_run
// before anything reads them.
override SIZE_M: u32 = 0u;
override SIZE_N: u32 = 0u;
override SIZE_K: u32 = 0u;
override RUNTIME_DIMS: u32 = 0u;
var<private> M: u32;
var<private> N: u32;
var<private> K: u32;
var<private> z_inner: u32;   // Z_INNER
var<private> a_lay: vec4<u32>;  // A_OFF, A_SB, A_SH, A_LD
var<private> b_lay: vec4<u32>;
var<private> c_lay: vec4<u32>;

// K for a loop that holds barriers (the tiled core): WGSL's uniformity analysis never takes a
// private variable as uniform, but does an override and a uniform buffer's value.
fn uniform_k() -> u32 { return select(SIZE_K, args.dims.z, RUNTIME_DIMS == 1u); }
override TRANS_A: u32 = 0u;  // 1: A is stored [K, M] and read transposed
override TRANS_B: u32 = 0u;  // 1: B is stored [N, K] and read transposed
override A_ACT: u32 = 0u;    // activation applied to A's values as they are loaded (ACT_*; matmul_a_act.wgsl)
// matmul_dgrad's epilogue: the activation whose derivative multiplies the product (ACT_*).
// Declared here because naga 29 (wgpu-py 0.32) panics on an override declared after the
// override-sized workgroup arrays of matmul.wgsl.
override OUT_ACT: u32 = 0u;
// matmul_reg.wgsl's pair loads of B (see B2), declared here for the same reason: 1 only where
// TRANS_B is 0 and every pair starts on an even word (webmp.ops.b_pairs decides; four words a
// load where B2's file is matmul_b_quads.wgsl: webmp.ops.b_quads).
override B_PAIRS: u32 = 0u;
// Batched operands (see the header), declared here for the same reason. Per operand: the offset,
// the strides per b and per h, the row stride (elements).
override Z_INNER: u32 = 1u;  // batch index z = b * Z_INNER + h
override A_OFF: u32 = 0u;  override A_SB: u32 = 0u;  override A_SH: u32 = 0u;  override A_LD: u32 = 0u;
override B_OFF: u32 = 0u;  override B_SB: u32 = 0u;  override B_SH: u32 = 0u;  override B_LD: u32 = 0u;
override C_OFF: u32 = 0u;  override C_SB: u32 = 0u;  override C_SH: u32 = 0u;  override C_LD: u32 = 0u;
// The geometry of a convolution's implicit patches (matmul_a_patches.wgsl, which reads A as them;
// webmp.ops.conv.implicit_patches), declared here for the same reason.
override CONV_C: u32 = 1u;  override CONV_H: u32 = 1u;  override CONV_W: u32 = 1u;
override CONV_KH: u32 = 1u;  override CONV_KW: u32 = 1u;  override CONV_SH: u32 = 1u;  override CONV_SW: u32 = 1u;
override CONV_PH: u32 = 0u;  override CONV_PW: u32 = 0u;  override CONV_OH: u32 = 1u;  override CONV_OW: u32 = 1u;
var<private> mm_z: u32;  // this workgroup's batch index (workgroup_id.z), set by the core

// First element of batch mm_z of an operand with layout `lay` (offset, strides per b and per h).
fn batch_start(lay: vec4<u32>) -> u32 {
  return lay.x + (mm_z / z_inner) * lay.y + (mm_z % z_inner) * lay.z;
}

// C's first element in batch mm_z, set once by mm_run before the stores: batch_start's division
// and remainder ran per stored row otherwise (with matmul_reg.wgsl's a_base, the fixed cost of a
// 1024 x 384 x 2 product went 0.51 -> 0.39 ms on lavapipe).
var<private> c_base: u32;

// Element index of C(r, c) in batch mm_z; `natural_ld` is the row stride when C_LD is 0.
fn out_index(r: u32, c: u32, natural_ld: u32) -> u32 {
  return c_base + r * select(c_lay.w, natural_ld, c_lay.w == 0u) + c;
}

// Which operand a load helper works on. WGSL (without the unrestricted_pointer_parameters
// extension) cannot pass storage or workgroup arrays to functions; a constant selector folds away
// once the helpers are inlined.
const OPERAND_A: u32 = 0u;
const OPERAND_B: u32 = 1u;

// Word index of word j of row i of an operand of batch mm_z whose rows are cw words long
// and layout `lay` (X_OFF, X_SB, X_SH, X_LD: see the header).
fn operand_word(lay: vec4<u32>, i: u32, j: u32, cw: u32) -> u32 {
  return (batch_start(lay) + i * select(lay.w, 2u * cw, lay.w == 0u)) / 2u + j;
}

// Word j of row i of the operand's h matrix with `rows` rows and `cols` columns, as two f32
// values; zero outside the matrix, and the padding half of an odd row is masked too. With A_CONV,
// A's words are the implicit patch matrix's (conv_word).
fn load_word(op: u32, i: u32, j: u32, rows: u32, cols: u32) -> vec2<f32> {
  let cw = (cols + 1u) / 2u;
  if (i >= rows || j >= cw) { return vec2<f32>(0.0); }
  var w: vec2<f32>;
  if (op == OPERAND_A && A_CONV == 1u) {
    w = conv_word(i, j);
  } else if (op == OPERAND_A) {
    w = h_load(A[operand_word(a_lay, i, j, cw)]);
  } else {
    w = h_load(B[operand_word(b_lay, i, j, cw)]);
  }
  return vec2<f32>(w.x, select(0.0, w.y, 2u * j + 1u < cols));
}

// Zeroes the components of a 4-column group starting at column c that lie beyond N.
fn mask_cols(v: vec4<f32>, c: u32) -> vec4<f32> {
  return select(vec4<f32>(0.0), v, vec4<u32>(c, c + 1u, c + 2u, c + 3u) < vec4<u32>(N));
}

// One accumulator column group of this thread, row by row: store_group's loop indexes this copy.
// lavapipe turns a loop-indexed read of a function's array (a parameter, a local) into a pass over
// every row with a compare and a blend each; a private array like this one it reads with a load per
// lane and value, which costs far less (a 1024 x 384 x 2 product's fixed cost 0.72 -> 0.53 ms with
// the loop below). A loop, not the rows written out: the kernels compile as fast as before
// (docs/benchmarks.md "fourth pass").
var<private> out_rows: array<vec4<f32>, TM_MAX>;

// Stores accumulator column group j of this thread through the variant's epilogue, its rows that
// lie inside C (the core's rows_in_c: a prefix of them); whether a value overflowed. The loop's
// length is that count rather than a check and a break per row: both cost on every lane.
fn store_group(wg: vec3<u32>, lid: vec3<u32>, j: u32) -> bool {
  let c = out_col(wg, lid, j);
  if (c >= N) { return false; }
  out_rows = acc_group(j);
  let col = col4(c);
  var bad = false;
  let rows = rows_in_c(wg, lid);
  for (var i = 0u; i < rows; i++) {
    // not `bad || store4(...)`: that would skip the store
    let o = store4(out_row(wg, lid, i), c, out_rows[i], col);
    bad = bad || o;
  }
  return bad;
}

// Called by the variant's entry point: computes this thread's block of C with the core (its
// mm_tile fills `acc`; acc_group(j) returns its column group j, row by row; out_row and out_col
// place accumulator row i and column group j; rows_in_c counts the rows inside C) and hands
// it to the variant's epilogue, one 4-column group of one row at a time, for the groups that
// start inside C:
//   fn col4(c: u32) -> vec4<f32>: what the variant needs of columns c..c+3 (fwd: the bias),
//     evaluated once per column group (loading the bias per row was ~10% slower at small K);
//   fn store4(r: u32, c: u32, v: vec4<f32>, col: vec4<f32>) -> bool: stores the accumulators v
//     of row r < M, columns c.. (c < N) of batch mm_z (out_index gives where) and says whether a
//     value overflowed the storage format.
// Returns whether any did. `acc` is only indexed by constants, in acc_group (an array indexed by a
// loop variable is kept in memory by lavapipe's compiler, registers are faster).
fn mm_run(wg: vec3<u32>, lid: vec3<u32>) -> bool {
  if (RUNTIME_DIMS == 1u) {
    M = args.dims.x;
    N = args.dims.y;
    K = args.dims.z;
    z_inner = args.dims.w;
    a_lay = args.a;
    b_lay = args.b;
    c_lay = args.c;
  } else {
    M = SIZE_M;
    N = SIZE_N;
    K = SIZE_K;
    z_inner = Z_INNER;
    a_lay = vec4<u32>(A_OFF, A_SB, A_SH, A_LD);
    b_lay = vec4<u32>(B_OFF, B_SB, B_SH, B_LD);
    c_lay = vec4<u32>(C_OFF, C_SB, C_SH, C_LD);
  }
  mm_tile(wg, lid);
  c_base = batch_start(c_lay);
  var bad = store_group(wg, lid, 0u);
  if (TN > 4u) {
    let o = store_group(wg, lid, 1u);
    bad = bad || o;
  }
  return bad;
}
