// Overflow check and sum of squares of one master-gradient tensor (f32), before any update.
// Each workgroup writes one partial sum of the unscaled squares to partials[base[0] + workgroup];
// the scaler kernel adds them up. Non-finite values are found by their exponent bits.
// No size constants: the tensor's length is G's (its buffer holds exactly the tensor), the grid
// is the dispatch's, and where its partials go is the word in `base` (one small buffer per
// offset, webmp.ops.grad_stats), so every tensor of a model shares one pipeline.
@group(0) @binding(0) var<storage, read> G: array<f32>;
@group(0) @binding(1) var<storage, read> state: State;
@group(0) @binding(2) var<storage, read_write> partials: array<f32>;
@group(0) @binding(3) var<storage, read_write> flags: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read> base: array<u32>;  // [1]: this tensor's first partial

const WG: u32 = 256u;
alias RedT = f32;  // what workgroup_sum (reduce.wgsl) adds

@compute @workgroup_size(WG)
fn grad_stats(
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let t = lid.x;
  let n = arrayLength(&G);
  let inv_scale = 1.0 / state.scale;
  var s = 0.0;
  var bad = false;
  for (var i = wg.x * WG + t; i < n; i += nwg.x * WG) {
    let g = G[i];
    bad = bad || f32_nonfinite(g);
    let u = g * inv_scale;
    s += u * u;
  }
  if (bad) { atomicOr(&flags[0], FLAG_MASTER_GRAD); }
  let total = workgroup_sum(s, t);
  if (t == 0u) { partials[base[0] + wg.x] = total; }
}
