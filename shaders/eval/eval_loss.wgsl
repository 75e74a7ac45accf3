// Validation loss of a language model, summed on the GPU in a fixed order (no float atomics):
// eval_loss_chunk sums one chunk's row losses, logsumexp(l_r) - l_r[y_r] in f32 (the
// softmax_xent loss; rows labelled NO_LABEL are padding and add 0), into partial[chunk[0]] (the
// chunk counter of eval.wgsl);
// eval_loss_total adds partial[0 .. CHUNKS) in order into total[0]. The mean is total / counted,
// counted from eval_count.
@group(0) @binding(0) var<storage, read> logits: array<f32>;         // [B, C]
@group(0) @binding(1) var<storage, read> labels: array<u32>;         // [B]
@group(0) @binding(2) var<storage, read_write> partial: array<f32>;  // [CHUNKS]
@group(0) @binding(3) var<storage, read_write> total: array<f32>;    // [1]
@group(0) @binding(4) var<storage, read> chunk: array<u32>;          // [1]: the current chunk

override B: u32;
override C: u32;
override CHUNKS: u32 = 1u;

alias RedT = f32;
const WG: u32 = 256u;

fn row_loss(r: u32) -> f32 {
  let label = labels[r];
  if (label == NO_LABEL) { return 0.0; }
  let row = r * C;
  var mx = logits[row];
  for (var c = 1u; c < C; c++) { mx = max(mx, logits[row + c]); }
  var sum = 0.0;
  for (var c = 0u; c < C; c++) { sum += exp(logits[row + c] - mx); }
  return log(sum) - (logits[row + label] - mx);  // as softmax_xent.wgsl: no cancellation in mx + log(sum)
}

@compute @workgroup_size(256)
fn eval_loss_chunk(@builtin(local_invocation_index) t: u32) {
  var acc = 0.0;
  for (var r = t; r < B; r += WG) { acc += row_loss(r); }
  let s = workgroup_sum(acc, t);
  if (t == 0u && chunk[0] < CHUNKS) { partial[chunk[0]] = s; }
}

@compute @workgroup_size(1)
fn eval_loss_total() {
  var s = 0.0;
  for (var i = 0u; i < CHUNKS; i++) { s += partial[i]; }
  total[0] = s;
}
