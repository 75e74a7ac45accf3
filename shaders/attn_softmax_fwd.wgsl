// Causal softmax of the attention scores, forward, in f32; one workgroup per row (attn_softmax.wgsl):
//   P[j] = exp((S[j] - m) * SCALE) / sum_{k <= i} exp((S[k] - m) * SCALE)   for j <= i, else 0,
// with m = max_{k <= i} S[k]. SCALE > 0 commutes with the max, so the maximum of the raw scores is
// subtracted before scaling: every exp argument is <= 0 (no overflow, however large the logits),
// and a constant added to a row cancels exactly wherever the differences are exact in f32.
// P is stored in the activation format; a value that does not fit (NaN from non-finite scores)
// raises the overflow flag.
@group(0) @binding(0) var<storage, read> S: array<f32>;       // [Z * T, T]: Q K^T, unscaled
@group(0) @binding(1) var<storage, read_write> P: array<HW>;  // [Z * T, T]
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>>;

var<private> s_row: u32;   // this row's first element in S
var<private> s_max: f32;
var<private> s_sum: f32;

fn causal_value(j: u32) -> f32 { return exp((S[s_row + j] - s_max) * SCALE) / s_sum; }

@compute @workgroup_size(WG)
fn attn_softmax_fwd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = wg.x;
  let r = wg.y * T + i;
  let t = lid.x;
  s_row = r * T;
  var m = S[s_row];  // key 0 is visible from every query
  for (var j = t; j <= i; j += WG) { m = max(m, S[s_row + j]); }
  s_max = workgroup_max(m, t);
  var sum = 0.0;
  for (var j = t; j <= i; j += WG) { sum += exp((S[s_row + j] - s_max) * SCALE); }
  s_sum = workgroup_sum(sum, t);
  let nw = (T + 1u) / 2u;
  var bad = false;
  for (var w = t; w < nw; w += WG) {
    let v = causal_word(i, w);
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    P[r * nw + w] = h_pack(v);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
