// Inspection kernel (webmp.ops.round_h; no model uses it): out[i] = h_round(x[i]), the rounding
// to the activation format that the matmuls apply to an activation on load (A_ACT), on any f32
// input, so tests can check it bit for bit (ties to even, subnormals) on each precision path.
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

override N: u32;

@compute @workgroup_size(64)
fn round_h(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < N; i += nwg.x * 64u) { out[i] = h_round(x[i]); }
}
