// Causal softmax of the attention scores, backward, in f32; one workgroup per row (attn_softmax.wgsl):
//   dS[j] = P[j] * (dP[j] - c) * SCALE   for j <= i, else 0,   c = sum_{k <= i} dP[k] P[k],
// the gradient with respect to the unscaled scores S = Q K^T (the 1/sqrt(d) of the forward folded
// in). P is read as stored (h); c is an f32 reduction. dS is stored in the activation format; a
// value that does not fit (a large loss scale) raises the overflow flag.
@group(0) @binding(0) var<storage, read> P: array<HW>;         // [Z * T, T]
@group(0) @binding(1) var<storage, read> dP: array<f32>;       // [Z * T, T]: dO V^T
@group(0) @binding(2) var<storage, read_write> dS: array<HW>;  // [Z * T, T]
@group(0) @binding(3) var<storage, read_write> flags: array<atomic<u32>>;

var<private> s_row: u32;   // this row's first element in dP
var<private> p_row: u32;   // this row's first word in P and dS
var<private> dot: f32;     // c

fn causal_value(j: u32) -> f32 {
  return h_unpack(P[p_row + j / 2u])[j % 2u] * (dP[s_row + j] - dot) * SCALE;
}

@compute @workgroup_size(WG)
fn attn_softmax_bwd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = wg.x;
  let r = wg.y * T + i;
  let t = lid.x;
  let nw = (T + 1u) / 2u;
  s_row = r * T;
  p_row = r * nw;
  var c = 0.0;
  for (var w = t; 2u * w <= i; w += WG) {
    let p = h_unpack(P[p_row + w]);
    c += p.x * dP[s_row + 2u * w];
    if (2u * w + 1u <= i) { c += p.y * dP[s_row + 2u * w + 1u]; }
  }
  dot = workgroup_sum(c, t);
  var bad = false;
  for (var w = t; w < nw; w += WG) {
    let v = causal_word(i, w);
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    dS[p_row + w] = h_pack(v);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
