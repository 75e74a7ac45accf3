// Tiled matmul core: C[M,N] = op(A)[M,K] * op(B)[K,N] with f16 operands (read from packed HW
// words) and f32 accumulation. The variant files
// (matmul_fwd, matmul_logits, matmul_wgrad, matmul_dgrad) add their output bindings, the entry
// point (@workgroup_size(WG_X, WG_Y)) and the epilogue.
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

fn act4(v: vec4<f32>) -> vec4<f32> {
  if (A_ACT == ACT_NONE) { return v; }
  return vec4<f32>(h_round(act_fwd(v.x, A_ACT)), h_round(act_fwd(v.y, A_ACT)),
                   h_round(act_fwd(v.z, A_ACT)), h_round(act_fwd(v.w, A_ACT)));
}

// Word j of row i of an h matrix with `cols` columns and `rows` rows, as two f32 values; zero
// outside the matrix, and the padding half of an odd row is masked too.
fn a_word(i: u32, j: u32, rows: u32, cols: u32) -> vec2<f32> {
  let cw = (cols + 1u) / 2u;
  if (i >= rows || j >= cw) { return vec2<f32>(0.0); }
  let w = h_unpack(A[i * cw + j]);
  return vec2<f32>(w.x, select(0.0, w.y, 2u * j + 1u < cols));
}

fn b_word(i: u32, j: u32, rows: u32, cols: u32) -> vec2<f32> {
  let cw = (cols + 1u) / 2u;
  if (i >= rows || j >= cw) { return vec2<f32>(0.0); }
  let w = h_unpack(B[i * cw + j]);
  return vec2<f32>(w.x, select(0.0, w.y, 2u * j + 1u < cols));
}

// Stages the K slice starting at k0 of op(A) rows row0.. and op(B) columns col0.. .
fn stage(row0: u32, col0: u32, k0: u32, tid: u32) {
  if (TRANS_A == 1u) {
    // A stored [K, M]: words run along m, so two words make one vec4 of the tile
    for (var e = tid; e < BK * BM4; e += THREADS) {
      let k = e / BM4;
      let g = e % BM4;
      let w = (row0 >> 1u) + 2u * g;
      let v = vec4<f32>(a_word(k0 + k, w, K, M), a_word(k0 + k, w + 1u, K, M));
      tile_a[e] = act4(v);
    }
  } else {
    // A stored [M, K]: words run along k; four rows' words make two vec4s (k and k + 1)
    for (var e = tid; e < (BK / 2u) * BM4; e += THREADS) {
      let kw = e % (BK / 2u);
      let g = e / (BK / 2u);
      let j = (k0 >> 1u) + kw;
      let r = row0 + 4u * g;
      let w0 = a_word(r, j, M, K);
      let w1 = a_word(r + 1u, j, M, K);
      let w2 = a_word(r + 2u, j, M, K);
      let w3 = a_word(r + 3u, j, M, K);
      tile_a[2u * kw * BM4 + g] = act4(vec4<f32>(w0.x, w1.x, w2.x, w3.x));
      tile_a[(2u * kw + 1u) * BM4 + g] = act4(vec4<f32>(w0.y, w1.y, w2.y, w3.y));
    }
  }
  if (TRANS_B == 1u) {
    // B stored [N, K]: words run along k
    for (var e = tid; e < (BK / 2u) * BN4; e += THREADS) {
      let kw = e % (BK / 2u);
      let g = e / (BK / 2u);
      let j = (k0 >> 1u) + kw;
      let c = col0 + 4u * g;
      let w0 = b_word(c, j, N, K);
      let w1 = b_word(c + 1u, j, N, K);
      let w2 = b_word(c + 2u, j, N, K);
      let w3 = b_word(c + 3u, j, N, K);
      tile_b[2u * kw * BN4 + g] = vec4<f32>(w0.x, w1.x, w2.x, w3.x);
      tile_b[(2u * kw + 1u) * BN4 + g] = vec4<f32>(w0.y, w1.y, w2.y, w3.y);
    }
  } else {
    // B stored [K, N]: words run along n
    for (var e = tid; e < BK * BN4; e += THREADS) {
      let k = e / BN4;
      let g = e % BN4;
      let w = (col0 >> 1u) + 2u * g;
      tile_b[e] = vec4<f32>(b_word(k0 + k, w, K, N), b_word(k0 + k, w + 1u, K, N));
    }
  }
}

// Accumulates this thread's TM x TN block of the workgroup's BM x BN tile into `acc`.
fn mm_tile(wg: vec3<u32>, lid: vec3<u32>) {
  let row0 = wg.y * BM4 * 4u;
  let col0 = wg.x * BN4 * 4u;
  let tid = lid.y * WG_X + lid.x;
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
fn h_overflows4(v: vec4<f32>) -> bool {
  return h_overflows(v.x) || h_overflows(v.y) || h_overflows(v.z) || h_overflows(v.w);
}
