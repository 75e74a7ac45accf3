// Overflow check and sum of squares of one master-gradient tensor (f32), before any update.
// Each workgroup writes one partial sum of the unscaled squares to partials[BASE + workgroup];
// the scaler kernel adds them up. Non-finite values are found by their exponent bits.
@group(0) @binding(0) var<storage, read> G: array<f32>;
@group(0) @binding(1) var<storage, read> state: State;
@group(0) @binding(2) var<storage, read_write> partials: array<f32>;
@group(0) @binding(3) var<storage, read_write> flags: array<atomic<u32>>;

override N: u32;
override BASE: u32;
override NWG: u32;   // workgroups in this dispatch

const WG: u32 = 256u;
alias RedT = f32;  // what workgroup_sum (reduce.wgsl) adds

@compute @workgroup_size(WG)
fn grad_stats(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let t = lid.x;
  let inv_scale = 1.0 / state.scale;
  var s = 0.0;
  var bad = false;
  for (var i = wg.x * WG + t; i < N; i += NWG * WG) {
    let g = G[i];
    bad = bad || f32_nonfinite(g);
    let u = g * inv_scale;
    s += u * u;
  }
  if (bad) { atomicOr(&flags[0], FLAG_MASTER_GRAD); }
  let total = workgroup_sum(s, t);
  if (t == 0u) { partials[BASE + wg.x] = total; }
}
