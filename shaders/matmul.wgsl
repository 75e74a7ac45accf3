// Contract (webmp/wgsl.py): owns bindings 0 (A), 1 (B) and all overrides; the variant defines col4, store4.
// Tiled matmul core: C[M,N] = op(A)[M,K] * op(B)[K,N] with f16 operands (read from packed HW
// words) and f32 accumulation, for each batch z of the grid's z dimension (one batch: the MLP).
// A variant file (matmul_fwd, matmul_logits, matmul_wgrad, matmul_dgrad, matmul_plain; fwd, dgrad
// and plain after matmul_h_out.wgsl) adds its bindings, its epilogue (col4 and store4: see mm_run)
// and an entry point (@workgroup_size(WG_X, WG_Y)) that calls mm_run.
//
// Storage layout of an HW ("h") matrix [rows, cols]: row-major, rows * ceil(cols/2) words,
// two consecutive columns per word, low half first; an odd row's last half is zero padding.
//
// Blocking: a workgroup of WG_X x WG_Y threads computes a BM x BN tile of C (BM = WG_Y * TM,
// BN = WG_X * TN), stepping through K in slices of BK. Each slice of op(A) and op(B) is staged in
// workgroup memory as vec4 groups ([k][m/4] and [k][n/4]), filled with whole-word loads from
// global memory; transposed operands are transposed while they are staged, never materialised.
// Each thread keeps a TM x TN block of f32 accumulators in registers: row groups ly + i*WG_Y and
// column groups lx + j*WG_X (4 rows / 4 columns each), so neighbouring threads read neighbouring
// vec4s of the tiles and write neighbouring words of C.
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
// Tiles hold f32 on every precision path: f16 values are exact in f32, so converting once while
// staging (instead of once per use in the inner loop) changes no result and leaves the inner loop
// identical for native f16, emulated f16 and fp32; only h_unpack (the prelude) differs.

@group(0) @binding(0) var<storage, read> A: array<HW>;
@group(0) @binding(1) var<storage, read> B: array<HW>;

override M: u32;
override N: u32;
override K: u32;
override TRANS_A: u32 = 0u;  // 1: A is stored [K, M] and read transposed
override TRANS_B: u32 = 0u;  // 1: B is stored [N, K] and read transposed
override A_ACT: u32 = 0u;    // activation applied to A's values as they are loaded (ACT_*)
// matmul_dgrad's epilogue: the activation whose derivative multiplies the product (ACT_*).
// Declared here because naga 29 (wgpu-py 0.32) panics on an override declared after the
// override-sized workgroup arrays below.
override OUT_ACT: u32 = 0u;
// Batched operands (see the header), declared here for the same reason. Per operand: the offset,
// the strides per b and per h, the row stride (elements).
override Z_INNER: u32 = 1u;  // batch index z = b * Z_INNER + h
override A_OFF: u32 = 0u;  override A_SB: u32 = 0u;  override A_SH: u32 = 0u;  override A_LD: u32 = 0u;
override B_OFF: u32 = 0u;  override B_SB: u32 = 0u;  override B_SH: u32 = 0u;  override B_LD: u32 = 0u;
override C_OFF: u32 = 0u;  override C_SB: u32 = 0u;  override C_SH: u32 = 0u;  override C_LD: u32 = 0u;

// Tile shape, chosen per adapter and shape class by webmp/tune.py (see op_matmul in plan.py).
// The defaults (64 x 64 tiles) match webmp.tune.DEFAULT_TILES.
override WG_X: u32 = 8u;     // threads along N
override WG_Y: u32 = 8u;     // threads along M
override TM: u32 = 8u;       // rows per thread: 4 or 8
override TN: u32 = 8u;       // columns per thread: 4 or 8
override BK: u32 = 16u;      // K slice per tile: even
const TM_MAX: u32 = 8u;      // register arrays need constant sizes; loops run to TM / TN
const TN4_MAX: u32 = 2u;

override BM4: u32 = WG_Y * TM / 4u;  // row groups per tile
override BN4: u32 = WG_X * TN / 4u;  // column groups per tile
override THREADS: u32 = WG_X * WG_Y;

var<workgroup> tile_a: array<vec4<f32>, BK * BM4>;  // [k][m/4]
var<workgroup> tile_b: array<vec4<f32>, BK * BN4>;  // [k][n/4]
var<private> acc: array<array<vec4<f32>, TN4_MAX>, TM_MAX>;
var<private> mm_z: u32;  // this workgroup's batch index (workgroup_id.z), set by mm_tile

// First element of batch mm_z of an operand with offset `off` and batch strides `sb`, `sh`.
fn batch_start(off: u32, sb: u32, sh: u32) -> u32 {
  return off + (mm_z / Z_INNER) * sb + (mm_z % Z_INNER) * sh;
}

// Element index of C(r, c) in batch mm_z; `natural_ld` is the row stride when C_LD is 0.
fn out_index(r: u32, c: u32, natural_ld: u32) -> u32 {
  return batch_start(C_OFF, C_SB, C_SH) + r * select(C_LD, natural_ld, C_LD == 0u) + c;
}

fn act4(v: vec4<f32>) -> vec4<f32> {
  if (A_ACT == ACT_NONE) { return v; }
  return vec4<f32>(h_round(act_fwd(v.x, A_ACT)), h_round(act_fwd(v.y, A_ACT)),
                   h_round(act_fwd(v.z, A_ACT)), h_round(act_fwd(v.w, A_ACT)));
}

// Which operand a staging helper works on. WGSL (without the unrestricted_pointer_parameters
// extension) cannot pass storage or workgroup arrays to functions; a constant selector folds away
// once the helpers are inlined.
const OPERAND_A: u32 = 0u;
const OPERAND_B: u32 = 1u;

// Word index of word j of row i of an operand of batch mm_z whose rows are cw words long
// (X_OFF, X_SB, X_SH, X_LD: see the header).
fn operand_word(off: u32, sb: u32, sh: u32, ld: u32, i: u32, j: u32, cw: u32) -> u32 {
  return (batch_start(off, sb, sh) + i * select(ld, 2u * cw, ld == 0u)) / 2u + j;
}

// Word j of row i of the operand's h matrix with `rows` rows and `cols` columns, as two f32
// values; zero outside the matrix, and the padding half of an odd row is masked too.
fn load_word(op: u32, i: u32, j: u32, rows: u32, cols: u32) -> vec2<f32> {
  let cw = (cols + 1u) / 2u;
  if (i >= rows || j >= cw) { return vec2<f32>(0.0); }
  var w: vec2<f32>;
  if (op == OPERAND_A) {
    w = h_unpack(A[operand_word(A_OFF, A_SB, A_SH, A_LD, i, j, cw)]);
  } else {
    w = h_unpack(B[operand_word(B_OFF, B_SB, B_SH, B_LD, i, j, cw)]);
  }
  return vec2<f32>(w.x, select(0.0, w.y, 2u * j + 1u < cols));
}

// Element e of the operand's tile; A_ACT applies to A.
fn put_tile(op: u32, e: u32, v: vec4<f32>) {
  if (op == OPERAND_A) { tile_a[e] = act4(v); } else { tile_b[e] = v; }
}

// Stages the K slice starting at k0 of one operand: op(A) rows p0.. (P = M, G4 = BM4) or op(B)
// columns p0.. (P = N, G4 = BN4), into its tile [k][p/4]. `along_k`: the stored words run along k
// (A [M, K], B [N, K]); otherwise along p (A [K, M], B [K, N]).
fn stage_operand(op: u32, along_k: bool, p0: u32, P: u32, G4: u32, k0: u32, tid: u32) {
  if (along_k) {
    // the words of four rows make two vec4s (k and k + 1)
    for (var e = tid; e < (BK / 2u) * G4; e += THREADS) {
      let kw = e % (BK / 2u);
      let g = e / (BK / 2u);
      let j = (k0 >> 1u) + kw;
      let r = p0 + 4u * g;
      let w0 = load_word(op, r, j, P, K);
      let w1 = load_word(op, r + 1u, j, P, K);
      let w2 = load_word(op, r + 2u, j, P, K);
      let w3 = load_word(op, r + 3u, j, P, K);
      put_tile(op, 2u * kw * G4 + g, vec4<f32>(w0.x, w1.x, w2.x, w3.x));
      put_tile(op, (2u * kw + 1u) * G4 + g, vec4<f32>(w0.y, w1.y, w2.y, w3.y));
    }
  } else {
    // two words make one vec4
    for (var e = tid; e < BK * G4; e += THREADS) {
      let k = e / G4;
      let w = (p0 >> 1u) + 2u * (e % G4);
      put_tile(op, e, vec4<f32>(load_word(op, k0 + k, w, K, P), load_word(op, k0 + k, w + 1u, K, P)));
    }
  }
}

// Stages the K slice starting at k0 of op(A) rows row0.. and op(B) columns col0.. .
fn stage(row0: u32, col0: u32, k0: u32, tid: u32) {
  stage_operand(OPERAND_A, TRANS_A == 0u, row0, M, BM4, k0, tid);
  stage_operand(OPERAND_B, TRANS_B == 1u, col0, N, BN4, k0, tid);
}

// Accumulates this thread's TM x TN block of the workgroup's BM x BN tile into `acc`.
fn mm_tile(wg: vec3<u32>, lid: vec3<u32>) {
  let row0 = wg.y * BM4 * 4u;
  let col0 = wg.x * BN4 * 4u;
  let tid = lid.y * WG_X + lid.x;
  mm_z = wg.z;
  for (var i = 0u; i < TM; i++) {
    for (var j = 0u; j < TN / 4u; j++) { acc[i][j] = vec4<f32>(0.0); }
  }
  var b: array<vec4<f32>, TN4_MAX>;
  for (var k0 = 0u; k0 < K; k0 += BK) {
    stage(row0, col0, k0, tid);
    workgroupBarrier();
    for (var k = 0u; k < BK; k++) {
      for (var j = 0u; j < TN / 4u; j++) { b[j] = tile_b[k * BN4 + lid.x + j * WG_X]; }
      for (var i = 0u; i < TM / 4u; i++) {
        let a = tile_a[k * BM4 + lid.y + i * WG_Y];
        for (var j = 0u; j < TN / 4u; j++) {
          acc[4u * i][j] = fma(vec4<f32>(a.x), b[j], acc[4u * i][j]);
          acc[4u * i + 1u][j] = fma(vec4<f32>(a.y), b[j], acc[4u * i + 1u][j]);
          acc[4u * i + 2u][j] = fma(vec4<f32>(a.z), b[j], acc[4u * i + 2u][j]);
          acc[4u * i + 3u][j] = fma(vec4<f32>(a.w), b[j], acc[4u * i + 3u][j]);
        }
      }
    }
    workgroupBarrier();
  }
}

// Row of accumulator row i (0 <= i < TM) and first column of accumulator group j (0 <= j < TN/4).
fn out_row(wg: vec3<u32>, lid: vec3<u32>, i: u32) -> u32 {
  return 4u * (wg.y * BM4 + lid.y + (i / 4u) * WG_Y) + (i % 4u);
}
fn out_col(wg: vec3<u32>, lid: vec3<u32>, j: u32) -> u32 {
  return 4u * (wg.x * BN4 + lid.x + j * WG_X);
}
// Zeroes the components of a 4-column group starting at column c that lie beyond N.
fn mask_cols(v: vec4<f32>, c: u32) -> vec4<f32> {
  return select(vec4<f32>(0.0), v, vec4<u32>(c, c + 1u, c + 2u, c + 3u) < vec4<u32>(N));
}

// Called by the variant's entry point: computes this thread's block of C and hands it to the
// variant's epilogue, one 4-column group of one row at a time, for the groups that start inside C:
//   fn col4(c: u32) -> vec4<f32>: what the variant needs of columns c..c+3 (fwd: the bias),
//     evaluated once per column group (loading the bias per row was ~10% slower at small K);
//   fn store4(r: u32, c: u32, v: vec4<f32>, col: vec4<f32>) -> bool: stores the accumulators v
//     of row r < M, columns c.. (c < N) of batch mm_z (out_index gives where) and says whether a
//     value overflowed the storage format.
// Returns whether any did.
fn mm_run(wg: vec3<u32>, lid: vec3<u32>) -> bool {
  mm_tile(wg, lid);
  var bad = false;
  for (var j = 0u; j < TN / 4u; j++) {
    let c = out_col(wg, lid, j);
    if (c >= N) { break; }
    let col = col4(c);
    for (var i = 0u; i < TM; i++) {
      let r = out_row(wg, lid, i);
      if (r >= M) { break; }
      let o = store4(r, c, acc[i][j], col);  // not `bad || store4(...)`: that would skip the store
      bad = bad || o;
    }
  }
  return bad;
}
