// Gradient accumulation: micro-batch state.micro's per-row losses into their place among the
// step's, dst[micro * STRIDE + OFFSET + i] = src[i] (i < src's length), so the scaler sums the
// step's losses in the order of one batch of all the micro-batches' rows. One rank: STRIDE is the
// micro-batch's rows, OFFSET 0; a data-parallel rank's slots are those of its shard in the global
// order (STRIDE the global micro-batch's rows, OFFSET its shard's first), the rest stays zero.
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> state: State;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

override STRIDE: u32;
override OFFSET: u32 = 0u;

@compute @workgroup_size(64)
fn accum_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = arrayLength(&src);
  let base = state.micro * STRIDE + OFFSET;
  for (var i = gid.x; i < n; i += nwg.x * 64u) { dst[base + i] = src[i]; }
}
