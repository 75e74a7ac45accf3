// Gradient accumulation: micro-batch state.micro's per-row losses into its slot of the step's rows,
// dst[micro * n + i] = src[i] (n = src's length), so the scaler sums the step's losses in the
// order of one batch of N times the rows.
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> state: State;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(64)
fn accum_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = arrayLength(&src);
  let base = state.micro * n;
  for (var i = gid.x; i < n; i += nwg.x * 64u) { dst[base + i] = src[i]; }
}
