// Causal softmax of the attention scores, forward, in f32 (both forms: attn_softmax.wgsl):
//   P[j] = exp((S[j] - m) * SCALE) / sum_{k <= i} exp((S[k] - m) * SCALE)   for j <= i, else 0,
// with m = max_{k <= i} S[k]. SCALE > 0 commutes with the max, so the maximum of the raw scores is
// subtracted before scaling: every exp argument is <= 0 (no overflow, however large the logits),
// and a constant added to a row cancels exactly wherever the differences are exact in f32.
// P is stored in the activation format; a value that does not fit (NaN from non-finite scores)
// raises the overflow flag.
@group(0) @binding(0) var<storage, read_write> S: array<f32>;  // [Z * T, T]: Q K^T, unscaled (attn_row.wgsl writes it)
@group(0) @binding(1) var<storage, read_write> P: array<HW>;  // [Z * T, T]
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>>;

var<private> s_row: u32;   // this row's first element in S
var<private> p_row: u32;   // this row's first word in P
var<private> s_max: f32;
var<private> s_sum: f32;

fn causal_value(j: u32) -> f32 { return exp((S[s_row + j] - s_max) * SCALE) / s_sum; }
fn store_word(w: u32, v: vec2<f32>) { P[p_row + w] = h_pack(v); }

fn set_row(r: u32) { s_row = r * T; p_row = r * ((T + 1u) / 2u); }
// Lane l's partials over the visible keys j = l, l + WG, ... <= i: the max (from key 0, visible
// from every query, so an idle lane holds S[row]), then the sum of exps.
fn lane_max(i: u32, l: u32) -> f32 {
  var m = S[s_row];
  for (var j = l; j <= i; j += WG) { m = max(m, S[s_row + j]); }
  return m;
}
fn lane_sum(i: u32, l: u32) -> f32 {
  var sum = 0.0;
  for (var j = l; j <= i; j += WG) { sum += exp((S[s_row + j] - s_max) * SCALE); }
  return sum;
}

@compute @workgroup_size(WG)
fn attn_softmax_fwd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = wg.x;
  let t = lid.x;
  set_row(wg.y * T + i);
  s_max = workgroup_max(lane_max(i, t), t);
  s_sum = workgroup_sum(lane_sum(i, t), t);
  causal_store(i, t, WG);
}

@compute @workgroup_size(WG)
fn attn_softmax_fwd_thread(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= T) { return; }
  set_row(gid.y * T + i);
  for (var l = 0u; l < WG; l++) { lanes[l] = lane_max(i, l); }
  s_max = serial_reduce(RED_MAX);
  for (var l = 0u; l < WG; l++) { lanes[l] = lane_sum(i, l); }
  s_sum = serial_reduce(RED_SUM);
  causal_store(i, 0u, 1u);
}
