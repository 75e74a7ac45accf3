// The gradient-range lens: zeroes the N counters grad_hist.wgsl adds to (the first dispatch of
// program 'histograms').
@group(0) @binding(0) var<storage, read_write> counts: array<u32>;

override N: u32;

@compute @workgroup_size(64)
fn grad_hist_clear(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x < N) { counts[gid.x] = 0u; }
}
