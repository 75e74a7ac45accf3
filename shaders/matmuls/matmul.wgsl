// Contract (webmp/wgsl.py): a matmul core, after matmul_operands.wgsl; defines the tile-shape
// overrides, mm_tile, acc_group, out_row, out_col, rows_in_c. No bindings.
// Workgroup-memory tiled core.
//
// Blocking: a workgroup of WG_X x WG_Y threads computes a BM x BN tile of C (BM = WG_Y * TM,
// BN = WG_X * TN), stepping through K in slices of BK. Each slice of op(A) and op(B) is staged in
// workgroup memory as vec4 groups ([k][m/4] and [k][n/4]), filled with whole-word loads from
// global memory; transposed operands are transposed while they are staged, never materialised.
// Each thread keeps a TM x TN block of f32 accumulators in registers: row groups ly + i*WG_Y and
// column groups lx + j*WG_X (4 rows / 4 columns each), so neighbouring threads read neighbouring
// vec4s of the tiles and write neighbouring words of C.
//
// Tiles hold f32 on every precision path: f16 values are exact in f32, so converting once while
// staging (instead of once per use in the inner loop) changes no result and leaves the inner loop
// identical for native f16, emulated f16 and fp32; only h_unpack (the prelude) differs.

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
  for (var k0 = 0u; k0 < uniform_k(); k0 += BK) {
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

// Column group j of `acc`, row by row (mm_run's stores).
fn acc_group(j: u32) -> array<vec4<f32>, TM_MAX> {
  if (j == 0u) {
    return array<vec4<f32>, TM_MAX>(acc[0][0], acc[1][0], acc[2][0], acc[3][0], acc[4][0], acc[5][0], acc[6][0], acc[7][0]);
  }
  return array<vec4<f32>, TM_MAX>(acc[0][1], acc[1][1], acc[2][1], acc[3][1], acc[4][1], acc[5][1], acc[6][1], acc[7][1]);
}

// Row of accumulator row i (0 <= i < TM) and first column of accumulator group j (0 <= j < TN/4).
fn out_row(wg: vec3<u32>, lid: vec3<u32>, i: u32) -> u32 {
  return 4u * (wg.y * BM4 + lid.y + (i / 4u) * WG_Y) + (i % 4u);
}
fn out_col(wg: vec3<u32>, lid: vec3<u32>, j: u32) -> u32 {
  return 4u * (wg.x * BN4 + lid.x + j * WG_X);
}
// How many of this thread's rows lie inside C: out_row grows with i, so they are the first ones.
fn rows_in_c(wg: vec3<u32>, lid: vec3<u32>) -> u32 {
  var n = 0u;
  while (n < TM && out_row(wg, lid, n) < M) { n++; }
  return n;
}
