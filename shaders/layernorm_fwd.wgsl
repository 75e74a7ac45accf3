// LayerNorm forward over the last dimension, statistics in f32: one workgroup per row.
//   Y = (Z - mean) * rstd * gamma + beta, stored in the activation format; mean and rstd are kept
//   in f32 for the backward pass.
@group(0) @binding(0) var<storage, read> Z: array<HW>;          // [M, N]
@group(0) @binding(1) var<storage, read> gamma: array<f32>;     // [N]
@group(0) @binding(2) var<storage, read> beta: array<f32>;      // [N]
@group(0) @binding(3) var<storage, read_write> Y: array<HW>;    // [M, N]
@group(0) @binding(4) var<storage, read_write> stats: array<f32>; // [M, 2]: mean, rstd
@group(0) @binding(5) var<storage, read_write> flags: array<atomic<u32>>;

override M: u32;
override N: u32;
override EPS: f32 = 1e-5;

const WG: u32 = 64u;
alias RedT = f32;  // what workgroup_sum (reduce.wgsl) adds

@compute @workgroup_size(WG)
fn layernorm_fwd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let r = wg.x;
  let t = lid.x;
  let nw = (N + 1u) / 2u;
  var s = 0.0;
  for (var w = t; w < nw; w += WG) { let z = h_unpack(Z[r * nw + w]); s += z.x + z.y; }  // padding is 0
  let mean = workgroup_sum(s, t) / f32(N);
  var q = 0.0;
  for (var w = t; w < nw; w += WG) {
    let d = h_unpack(Z[r * nw + w]) - mean;
    q += d.x * d.x;
    if (2u * w + 1u < N) { q += d.y * d.y; }
  }
  let rstd = inverseSqrt(workgroup_sum(q, t) / f32(N) + EPS);
  var bad = false;
  for (var w = t; w < nw; w += WG) {
    let c = 2u * w;
    let z = h_unpack(Z[r * nw + w]);
    var v = vec2<f32>((z.x - mean) * rstd * gamma[c] + beta[c], 0.0);
    if (c + 1u < N) { v.y = (z.y - mean) * rstd * gamma[c + 1u] + beta[c + 1u]; }
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    Y[r * nw + w] = h_pack(v);
  }
  if (t == 0u) { stats[2u * r] = mean; stats[2u * r + 1u] = rstd; }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
