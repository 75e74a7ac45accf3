// Tiled matmul core: C[M,N] = op(A)[M,K] * op(B)[K,N] with f16 operands (read from packed HW
// words, rounded to f16 in workgroup tiles) and f32 accumulation. The variant files
// (matmul_fwd, matmul_logits, matmul_wgrad, matmul_dgrad) add their output bindings, the entry
// point and the epilogue.
//
// Storage layout of an HW ("h") matrix [rows, cols]: row-major, rows * ceil(cols/2) words,
// two consecutive columns per word, low half first; an odd row's last half is zero padding.

@group(0) @binding(0) var<storage, read> A: array<HW>;
@group(0) @binding(1) var<storage, read> B: array<HW>;

override M: u32;
override N: u32;
override K: u32;
override TRANS_A: u32 = 0u;  // 1: A is stored [K, M] and read transposed
override TRANS_B: u32 = 0u;  // 1: B is stored [N, K] and read transposed
override A_ACT: u32 = 0u;    // activation applied to A's values as they are loaded (ACT_*)

const WG_X: u32 = 16u;
const WG_Y: u32 = 16u;
const TM: u32 = 4u;          // rows per thread
const TN: u32 = 4u;          // columns per thread (two words)
const BM: u32 = WG_Y * TM;   // rows per workgroup
const BN: u32 = WG_X * TN;   // columns per workgroup
const BK: u32 = 16u;

var<workgroup> tile_a: array<HS, BK * BM>;  // [k][m]
var<workgroup> tile_b: array<HS, BK * BN>;  // [k][n]
var<private> acc: array<vec4<f32>, TM>;

fn h_get(w: vec2<f32>, col: u32) -> f32 { return select(w.x, w.y, (col & 1u) == 1u); }

fn load_a(m: u32, k: u32) -> f32 {
  var x: f32;
  if (TRANS_A == 1u) { x = h_get(h_unpack(A[k * ((M + 1u) / 2u) + (m >> 1u)]), m); }
  else { x = h_get(h_unpack(A[m * ((K + 1u) / 2u) + (k >> 1u)]), k); }
  if (A_ACT != ACT_NONE) { x = h_round(act_fwd(x, A_ACT)); }
  return x;
}

fn load_b(k: u32, n: u32) -> f32 {
  if (TRANS_B == 1u) { return h_get(h_unpack(B[n * ((K + 1u) / 2u) + (k >> 1u)]), k); }
  return h_get(h_unpack(B[k * ((N + 1u) / 2u) + (n >> 1u)]), n);
}

// Accumulates this thread's TM x TN block of the workgroup's BM x BN tile into `acc`.
fn mm_tile(wg: vec3<u32>, lid: vec3<u32>) {
  let row0 = wg.y * BM;
  let col0 = wg.x * BN;
  let tid = lid.y * WG_X + lid.x;
  for (var i = 0u; i < TM; i++) { acc[i] = vec4<f32>(0.0); }
  for (var k0 = 0u; k0 < K; k0 += BK) {
    for (var e = tid; e < BM * BK; e += WG_X * WG_Y) {
      let m = e / BK;
      let k = e % BK;
      var x = 0.0;
      if (row0 + m < M && k0 + k < K) { x = load_a(row0 + m, k0 + k); }
      tile_a[k * BM + m] = hs_from(x);
    }
    for (var e = tid; e < BK * BN; e += WG_X * WG_Y) {
      let k = e / BN;
      let n = e % BN;
      var x = 0.0;
      if (k0 + k < K && col0 + n < N) { x = load_b(k0 + k, col0 + n); }
      tile_b[k * BN + n] = hs_from(x);
    }
    workgroupBarrier();
    for (var k = 0u; k < BK; k++) {
      let bo = k * BN + lid.x * TN;
      let b = vec4<f32>(hs_to(tile_b[bo]), hs_to(tile_b[bo + 1u]), hs_to(tile_b[bo + 2u]), hs_to(tile_b[bo + 3u]));
      for (var i = 0u; i < TM; i++) {
        acc[i] += hs_to(tile_a[k * BM + lid.y * TM + i]) * b;
      }
    }
    workgroupBarrier();
  }
}

fn out_row(wg: vec3<u32>, lid: vec3<u32>, i: u32) -> u32 { return wg.y * BM + lid.y * TM + i; }
fn out_col(wg: vec3<u32>, lid: vec3<u32>) -> u32 { return wg.x * BN + lid.x * TN; }
// Column pair p (0 or 1) of row i of this thread's block.
fn acc_pair(i: u32, p: u32) -> vec2<f32> { return select(acc[i].xy, acc[i].zw, p == 1u); }
