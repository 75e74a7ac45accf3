// Contract (webmp/wgsl.py): a matmul core, after matmul_operands.wgsl and before the file that
// loads op(A) (matmul_reg_a.wgsl, or matmul_reg_a_sg.wgsl with subgroups); defines the tile-shape
// overrides, acc, row_words, a_word, a_stored, own_a_words, a_rows, k_loop, mm_tile, acc_group, out_row,
// out_col, rows_in_c, k_loop_compact. Expects `fn k_loops(row0: u32, col0: u32)` (runs k_loop or
// k_loop_compact) and `fn a_words(row0: u32, k: u32) -> array<vec2<f32>, TM_MAX>` (a_word t of
// step k for t < TM), which k_loop calls.
// No bindings.
//
// Register-blocked core without workgroup memory or barriers: each thread reads its operands
// straight from storage. On a CPU adapter (lavapipe runs a workgroup's invocations as SIMD lanes)
// a barrier costs more than the reuse that staging tiles in workgroup memory buys; GPUs favour the
// tiled core (matmul.wgsl). The tuner chooses per adapter and shape class.
//
// Thread (lx, ly) of workgroup (wx, wy) computes the TM x TN block of C at rows
// (wy * WG_Y + ly) * TM .. and columns (wx * WG_X + lx) * TN .. . K advances a word (two values) at
// a time: per step TM words of op(A) (k and k + 1 of a row; with TRANS_A, a pair of rows at k or
// at k + 1) and TN words of op(B) (with B_PAIRS, TN / 2 loads of two words; with B2_QUADS too,
// TN / 4 of four), and each accumulator takes its two fmas in k order. Rows and columns beyond C are
// computed from clamped reads and never stored; values beyond K are zeroed (they would add into
// stored outputs).
//
// Where the time goes on lavapipe: it compiles a storage load lane by lane (a bounds check and a
// branch per lane and value), so a step's TN words of op(B) cost more than its TM x TN x 2 fmas,
// which run 8 lanes an instruction. Taller blocks (TM 16) spread each B word over more fmas, the
// subgroup core shares the A words (matmul_reg_a_sg.wgsl) and B_PAIRS halves the B loads (with
// matmul_b_quads.wgsl's B2_QUADS, quarters them, and keeps the 16 x 8 loop short enough that its speed no longer depends on
// where lavapipe's compiler lays it out: docs/benchmarks.md "fourth pass").
//
// The loops over TM and TN are written out, with `if (TM > 4u)`-style guards that fold away once
// the overrides are known: lavapipe's compiler does not unroll them, and an accumulator array
// indexed by a loop variable lives in memory instead of registers (written out: 1.5x faster).

override WG_X: u32 = 8u;     // threads along N
override WG_Y: u32 = 4u;     // threads along M
override TM: u32 = 8u;       // rows per thread: 4, 8 or 16
override TN: u32 = 8u;       // columns per thread: 4 or 8
const TM_MAX: u32 = 16u;     // register arrays need constant sizes
const TN4_MAX: u32 = 2u;

var<private> acc: array<array<vec4<f32>, TN4_MAX>, TM_MAX>;
// A's first word in this workgroup's batch, set once by mm_tile rather than computed (a division
// and a remainder) for every load of op(A): see c_base.
var<private> a_base: u32;

// Words per stored row of an operand whose rows hold `cols` values (X_LD, or whole words).
fn row_words(ld: u32, cols: u32) -> u32 { return select(ld, cols + (cols & 1u), ld == 0u) / 2u; }

// Word t (< TM) of the op(A) words a thread needs at step k: without TRANS_A, row row0 + t's word
// holding k and k + 1; with TRANS_A (A [K, M], a word holds two rows), the word of rows
// row0 + 2t, row0 + 2t + 1 at k for t < TM / 2, and the word of rows row0 + 2(t - TM/2) .. at
// k + 1 for the others. Activation applied; reads clamped into the operand.
fn a_word(row0: u32, k: u32, t: u32) -> vec2<f32> {
  if (TRANS_A == 0u) {
    return act2(a_stored(min(row0 + t, M - 1u), k / 2u, row_words(a_lay.w, K)));
  }
  let half = TM / 2u;
  let kk = min(k + select(0u, 1u, t >= half), K - 1u);
  let j = min(row0 / 2u + t % half, (M + 1u) / 2u - 1u);
  return act2(a_stored(kk, j, row_words(a_lay.w, M)));
}

// Word j of stored row i of A (rows `ld` words apart) as two f32 values; with A_CONV, of the
// implicit patch matrix (matmul_operands.wgsl's conv_word).
fn a_stored(i: u32, j: u32, ld: u32) -> vec2<f32> {
  if (A_CONV == 1u) { return conv_word(i, j); }
  return h_load(A[a_base + i * ld + j]);
}

// All the a_words of step k, each loaded by this thread.
fn own_a_words(row0: u32, k: u32) -> array<vec2<f32>, TM_MAX> {
  var w: array<vec2<f32>, TM_MAX>;
  w[0] = a_word(row0, k, 0u);
  w[1] = a_word(row0, k, 1u);
  w[2] = a_word(row0, k, 2u);
  w[3] = a_word(row0, k, 3u);
  if (TM > 4u) {
    w[4] = a_word(row0, k, 4u);
    w[5] = a_word(row0, k, 5u);
    w[6] = a_word(row0, k, 6u);
    w[7] = a_word(row0, k, 7u);
  }
  if (TM > 8u) {
    w[8] = a_word(row0, k, 8u);
    w[9] = a_word(row0, k, 9u);
    w[10] = a_word(row0, k, 10u);
    w[11] = a_word(row0, k, 11u);
    w[12] = a_word(row0, k, 12u);
    w[13] = a_word(row0, k, 13u);
    w[14] = a_word(row0, k, 14u);
    w[15] = a_word(row0, k, 15u);
  }
  return w;
}

// op(A)[row0 + i, k] and [row0 + i, k + 1] (a[i].x, a[i].y) from the step's words; `hi` false
// zeroes the k + 1 values (K odd, last step).
fn a_pair(lo: vec2<f32>, hi_word: vec2<f32>, hi: bool) -> vec2<f32> {
  return vec2<f32>(lo.x, select(0.0, hi_word.x, hi));
}
fn a_rows(w: array<vec2<f32>, TM_MAX>, hi: bool) -> array<vec2<f32>, TM_MAX> {
  if (TRANS_A == 0u) {
    return array<vec2<f32>, TM_MAX>(
      a_pair(w[0], w[0].yy, hi), a_pair(w[1], w[1].yy, hi), a_pair(w[2], w[2].yy, hi), a_pair(w[3], w[3].yy, hi),
      a_pair(w[4], w[4].yy, hi), a_pair(w[5], w[5].yy, hi), a_pair(w[6], w[6].yy, hi), a_pair(w[7], w[7].yy, hi),
      a_pair(w[8], w[8].yy, hi), a_pair(w[9], w[9].yy, hi), a_pair(w[10], w[10].yy, hi), a_pair(w[11], w[11].yy, hi),
      a_pair(w[12], w[12].yy, hi), a_pair(w[13], w[13].yy, hi), a_pair(w[14], w[14].yy, hi), a_pair(w[15], w[15].yy, hi));
  }
  let z = vec2<f32>(0.0);
  if (TM == 4u) {  // rows 0, 1 from words 0 (k) and 2 (k + 1); rows 2, 3 from words 1 and 3
    return array<vec2<f32>, TM_MAX>(
      a_pair(w[0], w[2], hi), a_pair(w[0].yx, w[2].yx, hi), a_pair(w[1], w[3], hi), a_pair(w[1].yx, w[3].yx, hi),
      z, z, z, z, z, z, z, z, z, z, z, z);
  }
  if (TM == 8u) {
    return array<vec2<f32>, TM_MAX>(
      a_pair(w[0], w[4], hi), a_pair(w[0].yx, w[4].yx, hi), a_pair(w[1], w[5], hi), a_pair(w[1].yx, w[5].yx, hi),
      a_pair(w[2], w[6], hi), a_pair(w[2].yx, w[6].yx, hi), a_pair(w[3], w[7], hi), a_pair(w[3].yx, w[7].yx, hi),
      z, z, z, z, z, z, z, z);
  }
  return array<vec2<f32>, TM_MAX>(  // TM 16: rows 2t, 2t + 1 from words t (k) and t + 8 (k + 1)
    a_pair(w[0], w[8], hi), a_pair(w[0].yx, w[8].yx, hi), a_pair(w[1], w[9], hi), a_pair(w[1].yx, w[9].yx, hi),
    a_pair(w[2], w[10], hi), a_pair(w[2].yx, w[10].yx, hi), a_pair(w[3], w[11], hi), a_pair(w[3].yx, w[11].yx, hi),
    a_pair(w[4], w[12], hi), a_pair(w[4].yx, w[12].yx, hi), a_pair(w[5], w[13], hi), a_pair(w[5].yx, w[13].yx, hi),
    a_pair(w[6], w[14], hi), a_pair(w[6].yx, w[14].yx, hi), a_pair(w[7], w[15], hi), a_pair(w[7].yx, w[15].yx, hi));
}

// op(B)[k, c .. c + 3] (k0) and [k + 1, c .. c + 3] (k1, zero when `hi` is false).
struct BRows { k0: vec4<f32>, k1: vec4<f32> }
fn b_rows(base: u32, ld: u32, c: u32, k: u32, hi: bool) -> BRows {
  if (B_PAIRS == 1u) {  // B [K, N], base and ld even: words c / 2 and c / 2 + 1 are pair c / 4
    let p = min(c / 4u, ((N + 1u) / 2u - 1u) / 2u);  // columns past N: any pair, never stored
    let k1 = b2_pair((base + min(k + 1u, K - 1u) * ld) / 2u + p);
    return BRows(b2_pair((base + k * ld) / 2u + p), select(vec4<f32>(0.0), k1, hi));
  }
  if (TRANS_B == 0u) {  // B [K, N]: words hold column pairs
    let cw = (N + 1u) / 2u;
    let j0 = min(c / 2u, cw - 1u);
    let j1 = min(c / 2u + 1u, cw - 1u);
    let r0 = base + k * ld;
    let r1 = base + min(k + 1u, K - 1u) * ld;
    let k1 = vec4<f32>(h_load(B[r1 + j0]), h_load(B[r1 + j1]));
    return BRows(vec4<f32>(h_load(B[r0 + j0]), h_load(B[r0 + j1])), select(vec4<f32>(0.0), k1, hi));
  }
  // B [N, K]: words hold k pairs of one column
  let w0 = h_load(B[base + min(c, N - 1u) * ld + k / 2u]);
  let w1 = h_load(B[base + min(c + 1u, N - 1u) * ld + k / 2u]);
  let w2 = h_load(B[base + min(c + 2u, N - 1u) * ld + k / 2u]);
  let w3 = h_load(B[base + min(c + 3u, N - 1u) * ld + k / 2u]);
  let k1 = vec4<f32>(w0.y, w1.y, w2.y, w3.y);
  return BRows(vec4<f32>(w0.x, w1.x, w2.x, w3.x), select(vec4<f32>(0.0), k1, hi));
}

// Row i's two fmas per column group, k then k + 1.
fn acc_row(i: u32, a: vec2<f32>, b0: BRows, b1: BRows) {
  acc[i][0] = fma(vec4<f32>(a.y), b0.k1, fma(vec4<f32>(a.x), b0.k0, acc[i][0]));
  if (TN > 4u) { acc[i][1] = fma(vec4<f32>(a.y), b1.k1, fma(vec4<f32>(a.x), b1.k0, acc[i][1])); }
}

// Accumulates this thread's TM x TN block of C into `acc`.
fn mm_tile(wg: vec3<u32>, lid: vec3<u32>) {
  mm_z = wg.z;
  a_base = batch_start(a_lay) / 2u;
  let row0 = (wg.y * WG_Y + lid.y) * TM;
  let col0 = (wg.x * WG_X + lid.x) * TN;
  acc = array<array<vec4<f32>, TN4_MAX>, TM_MAX>();
  k_loops(row0, col0);
}

// The K loop, its op(A) words from a_words.
fn k_loop(row0: u32, col0: u32) {
  let b_base = batch_start(b_lay) / 2u;
  let b_ld = row_words(b_lay.w, select(N, K, TRANS_B == 1u));
  var b1 = BRows(vec4<f32>(0.0), vec4<f32>(0.0));
  for (var k = 0u; k < K; k += 2u) {
    let hi = k + 1u < K;
    var b0: BRows;
    if (TN > 4u && B_PAIRS == 1u && B2_QUADS) {  // base, ld whole quads: columns col0 .. col0 + 7 are quad q
      let q = min(col0 / 8u, b_ld / 4u - 1u);  // columns past N: any quad of the row, never stored
      let k0 = b2_quad((b_base + k * b_ld) / 4u + q);
      let k1 = b2_quad((b_base + min(k + 1u, K - 1u) * b_ld) / 4u + q);
      let z = vec4<f32>(0.0);
      b0 = BRows(k0.lo, select(z, k1.lo, hi));
      b1 = BRows(k0.hi, select(z, k1.hi, hi));
    } else {
      b0 = b_rows(b_base, b_ld, col0, k, hi);
      if (TN > 4u) { b1 = b_rows(b_base, b_ld, col0 + 4u, k, hi); }
    }
    let a = a_rows(a_words(row0, k), hi);
    acc_row(0u, a[0], b0, b1);
    acc_row(1u, a[1], b0, b1);
    acc_row(2u, a[2], b0, b1);
    acc_row(3u, a[3], b0, b1);
    if (TM > 4u) {
      acc_row(4u, a[4], b0, b1);
      acc_row(5u, a[5], b0, b1);
      acc_row(6u, a[6], b0, b1);
      acc_row(7u, a[7], b0, b1);
    }
    if (TM > 8u) {
      acc_row(8u, a[8], b0, b1);
      acc_row(9u, a[9], b0, b1);
      acc_row(10u, a[10], b0, b1);
      acc_row(11u, a[11], b0, b1);
      acc_row(12u, a[12], b0, b1);
      acc_row(13u, a[13], b0, b1);
      acc_row(14u, a[14], b0, b1);
      acc_row(15u, a[15], b0, b1);
    }
  }
}

// op(A)[row0 + i, k] and [row0 + i, k + 1] of any row i < TM, from its own loads (a_rows' pairing
// for one row: with TRANS_A its two words, k and k + 1).
fn a_row(row0: u32, k: u32, i: u32, hi: bool) -> vec2<f32> {
  if (TRANS_A == 0u) {
    let w = a_word(row0, k, i);
    return a_pair(w, w.yy, hi);
  }
  let lo = a_word(row0, k, i / 2u);
  let hi_word = a_word(row0, k, i / 2u + TM / 2u);
  return select(a_pair(lo.yx, hi_word.yx, hi), a_pair(lo, hi_word, hi), i % 2u == 0u);
}

// k_loop's products and order with its rows in a loop: compact code for a fallback path (its
// accumulators, indexed by the loop, live in memory; `acc` is written once, at the end, so it
// stays in registers in k_loop).
fn k_loop_compact(row0: u32, col0: u32) {
  let b_base = batch_start(b_lay) / 2u;
  let b_ld = row_words(b_lay.w, select(N, K, TRANS_B == 1u));
  var sums: array<array<vec4<f32>, TN4_MAX>, TM_MAX>;
  var b1 = BRows(vec4<f32>(0.0), vec4<f32>(0.0));
  for (var k = 0u; k < K; k += 2u) {
    let hi = k + 1u < K;
    let b0 = b_rows(b_base, b_ld, col0, k, hi);
    if (TN > 4u) { b1 = b_rows(b_base, b_ld, col0 + 4u, k, hi); }
    for (var i = 0u; i < TM; i++) {
      let a = a_row(row0, k, i, hi);
      sums[i][0] = fma(vec4<f32>(a.y), b0.k1, fma(vec4<f32>(a.x), b0.k0, sums[i][0]));
      if (TN > 4u) { sums[i][1] = fma(vec4<f32>(a.y), b1.k1, fma(vec4<f32>(a.x), b1.k0, sums[i][1])); }
    }
  }
  acc = sums;
}

// Column group j of `acc`, row by row (mm_run's stores).
fn acc_group(j: u32) -> array<vec4<f32>, TM_MAX> {
  if (j == 0u) {
    return array<vec4<f32>, TM_MAX>(
      acc[0][0], acc[1][0], acc[2][0], acc[3][0], acc[4][0], acc[5][0], acc[6][0], acc[7][0],
      acc[8][0], acc[9][0], acc[10][0], acc[11][0], acc[12][0], acc[13][0], acc[14][0], acc[15][0]);
  }
  return array<vec4<f32>, TM_MAX>(
    acc[0][1], acc[1][1], acc[2][1], acc[3][1], acc[4][1], acc[5][1], acc[6][1], acc[7][1],
    acc[8][1], acc[9][1], acc[10][1], acc[11][1], acc[12][1], acc[13][1], acc[14][1], acc[15][1]);
}

fn out_row(wg: vec3<u32>, lid: vec3<u32>, i: u32) -> u32 { return (wg.y * WG_Y + lid.y) * TM + i; }
fn rows_in_c(wg: vec3<u32>, lid: vec3<u32>) -> u32 {
  let r0 = out_row(wg, lid, 0u);
  return select(0u, min(TM, M - r0), r0 < M);
}
fn out_col(wg: vec3<u32>, lid: vec3<u32>, j: u32) -> u32 { return (wg.x * WG_X + lid.x) * TN + 4u * j; }
