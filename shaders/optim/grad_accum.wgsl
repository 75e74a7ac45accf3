// Gradient accumulation (--grad-accum N), after micro-batch state.micro's backward pass: its f32
// gradient G is added into the step's sum A (micro-batch 0 copies it). G's own non-finite values
// raise FLAG_MASTER_GRAD here, micro-batch by micro-batch, so the verdict never depends on what the
// sum makes of them (grad_stats checks the sum too: finite terms can overflow f32 together).
// No size constants: the length is G's, so every tensor shares one pipeline.
@group(0) @binding(0) var<storage, read> G: array<f32>;
@group(0) @binding(1) var<storage, read> state: State;
@group(0) @binding(2) var<storage, read_write> A: array<f32>;
@group(0) @binding(3) var<storage, read_write> flags: array<atomic<u32>>;

@compute @workgroup_size(64)
fn grad_accum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = arrayLength(&G);
  let first = state.micro == 0u;
  var bad = false;
  for (var i = gid.x; i < n; i += nwg.x * 64u) {
    let g = G[i];
    bad = bad || f32_nonfinite(g);
    if (first) { A[i] = g; } else { A[i] = A[i] + g; }
  }
  if (bad) { atomicOr(&flags[0], FLAG_MASTER_GRAD); }
}
