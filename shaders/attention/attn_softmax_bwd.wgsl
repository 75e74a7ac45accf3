// Causal softmax of the attention scores, backward, in f32 (both forms: attn_softmax.wgsl):
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
fn store_word(w: u32, v: vec2<f32>) { dS[p_row + w] = h_pack(v); }

fn set_row(r: u32) { s_row = r * T; p_row = r * ((T + 1u) / 2u); }
// Lane l's partial of c over the visible words w = l, l + WG, ... (2w <= i).
fn lane_dot(i: u32, l: u32) -> f32 {
  var c = 0.0;
  for (var w = l; 2u * w <= i; w += WG) {
    let p = h_unpack(P[p_row + w]);
    c += p.x * dP[s_row + 2u * w];
    if (2u * w + 1u <= i) { c += p.y * dP[s_row + 2u * w + 1u]; }
  }
  return c;
}

@compute @workgroup_size(WG)
fn attn_softmax_bwd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = wg.x;
  let t = lid.x;
  set_row(wg.y * T + i);
  dot = workgroup_sum(lane_dot(i, t), t);
  causal_store(i, t, WG);
}

@compute @workgroup_size(WG)
fn attn_softmax_bwd_thread(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= T) { return; }
  set_row(gid.y * T + i);
  for (var l = 0u; l < WG; l++) { lanes[l] = lane_dot(i, l); }
  dot = serial_reduce(RED_SUM);
  causal_store(i, 0u, 1u);
}
