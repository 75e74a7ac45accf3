// Test-set accuracy: argmax of each row's logits against its label (rows with NO_LABEL are
// padding). eval_reset clears the counters and the chunk counter before the first chunk;
// eval_next_chunk advances the chunk counter after each chunk (the evaluation's gathers and
// eval_loss_chunk read it, so the chunks share their pipelines).
@group(0) @binding(0) var<storage, read> logits: array<f32>;   // [B, C]
@group(0) @binding(1) var<storage, read> labels: array<u32>;   // [B]
@group(0) @binding(2) var<storage, read_write> result: array<atomic<u32>>;  // correct, counted
@group(0) @binding(3) var<storage, read_write> chunk: array<u32>;  // [1]: the current chunk

override B: u32;
override C: u32;

@compute @workgroup_size(1)
fn eval_reset() {
  atomicStore(&result[0], 0u);
  atomicStore(&result[1], 0u);
  chunk[0] = 0u;
}

@compute @workgroup_size(1)
fn eval_next_chunk() {
  chunk[0] += 1u;
}

@compute @workgroup_size(64)
fn eval_count(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r = gid.x;
  if (r >= B || labels[r] == NO_LABEL) { return; }
  var best = 0u;
  for (var c = 1u; c < C; c++) {
    if (logits[r * C + c] > logits[r * C + best]) { best = c; }
  }
  if (best == labels[r]) { atomicAdd(&result[0], 1u); }
  atomicAdd(&result[1], 1u);
}
