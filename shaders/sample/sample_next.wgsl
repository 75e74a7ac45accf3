// The next token of text generation (webmp sample), appended on the GPU: with n = seq_len[0] the
// tokens held so far, it reads row min(n, T) - 1 of logits (the window's last real position,
// sample_window.wgsl), writes the token to seq[n] and sets seq_len[0] = n + 1; nothing when
// n >= CAPACITY (seq is full) or n == 0.
//   TEMPERATURE == 0: the argmax, ties to the lowest token id.
//   TEMPERATURE > 0: a draw from softmax(logits / TEMPERATURE) in f32, the row maximum m subtracted:
//     weights e_c = exp((l_c - m) / TEMPERATURE), or 0 where m - l_c >= CUTOFF (the host passes
//     87 * TEMPERATURE: exp(-87) is near f32's smallest normal, and the quotient stays finite);
//     the token is the first c whose running sum e_0 + ... + e_c exceeds u * (e_0 + ... + e_{V-1}),
//     u = sample_uniform(n) in [0, 1) (a counter-based hash of SEED and the position n).
// One workgroup of WG threads; thread t owns the columns t * PER .. t * PER + PER - 1 (PER =
// cdiv(V, WG)). Sums run in a fixed order: each thread its columns in order, then thread 0 the
// WG chunk sums in order. References: webmp.reference.sample_uniform (the RNG's numpy twin, bit
// for bit), sample_probs, sample_draw, sample_draw_bound.
@group(0) @binding(0) var<storage, read> logits: array<f32>;          // [T, V]
@group(0) @binding(1) var<storage, read_write> seq: array<u32>;       // [CAPACITY]
@group(0) @binding(2) var<storage, read_write> seq_len: array<u32>;   // [1]

override V: u32;                   // vocabulary size
override T: u32;                   // rows of logits (the context length)
override CAPACITY: u32;            // tokens seq can hold
override TEMPERATURE: f32 = 0.0;
override CUTOFF: f32 = 0.0;        // 87 * TEMPERATURE (rounded to f32 by the host)
override SEED: u32 = 0u;

const WG: u32 = 64u;
var<workgroup> part_v: array<f32, WG>;  // per thread: its columns' maximum, then their weights' sum
var<workgroup> part_i: array<u32, WG>;  // per thread: where its maximum is (V: no columns)
var<workgroup> w_n: u32;
var<workgroup> w_max: f32;
var<workgroup> w_token: u32;
var<workgroup> w_chunk: u32;            // the thread whose columns hold the draw
var<workgroup> w_before: f32;           // the sum of the chunks before it
var<workgroup> w_goal: f32;             // u * total

// Uniform in [0, 1): the top 24 bits of the hash, times 2^-24 (exact in f32).
fn sample_uniform(pos: u32) -> f32 {
  return f32(pcg_hash(SEED ^ pcg_hash(pos)) >> 8u) * 5.9604644775390625e-08;
}

fn weight(l: f32, m: f32) -> f32 {
  if (m - l < CUTOFF) { return exp((l - m) / TEMPERATURE); }
  return 0.0;
}

@compute @workgroup_size(64)
fn sample_next(@builtin(local_invocation_index) t: u32) {
  if (t == 0u) { w_n = seq_len[0]; }
  let n = workgroupUniformLoad(&w_n);
  let row = (clamp(n, 1u, T) - 1u) * V;
  let per = (V + WG - 1u) / WG;
  let lo = min(t * per, V);
  let hi = min(lo + per, V);

  // the argmax: the first maximum of each thread's columns, then of the threads in order
  var best = lo;
  var best_v = logits[row + min(lo, V - 1u)];
  for (var c = lo + 1u; c < hi; c++) {
    let v = logits[row + c];
    if (v > best_v) { best = c; best_v = v; }
  }
  part_v[t] = best_v;
  part_i[t] = best;
  workgroupBarrier();
  if (t == 0u) {
    var b = 0u;
    for (var k = 1u; k < WG; k++) {
      if (part_i[k] < V && part_v[k] > part_v[b]) { b = k; }
    }
    w_token = part_i[b];
    w_max = part_v[b];
  }
  workgroupBarrier();

  if (TEMPERATURE > 0.0) {
    let m = w_max;
    var s = 0.0;
    for (var c = lo; c < hi; c++) { s += weight(logits[row + c], m); }
    part_v[t] = s;
    workgroupBarrier();
    if (t == 0u) {
      var total = 0.0;
      for (var k = 0u; k < WG; k++) { total += part_v[k]; }
      let goal = sample_uniform(n) * total;
      // the first chunk whose end passes the goal (else, after rounding, the last non-empty one)
      var sum = 0.0;
      var found = WG;
      var found_before = 0.0;
      var last = 0u;
      var last_before = 0.0;
      for (var k = 0u; k < WG; k++) {
        if (part_v[k] > 0.0) { last = k; last_before = sum; }
        if (found == WG && sum + part_v[k] > goal) { found = k; found_before = sum; }
        sum += part_v[k];
      }
      if (found == WG) { found = last; found_before = last_before; }
      w_chunk = found;
      w_before = found_before;
      w_goal = goal;
    }
    workgroupBarrier();
    if (t == w_chunk) {
      // the first column whose running sum passes the goal (else the chunk's last weighted one)
      var acc = w_before;
      var token = V;
      var last_c = V;
      for (var c = lo; c < hi; c++) {
        let e = weight(logits[row + c], m);
        if (e > 0.0) { last_c = c; }
        acc += e;
        if (token == V && acc > w_goal) { token = c; }
      }
      if (token == V) { token = last_c; }
      if (token < V) { w_token = token; }  // (else non-finite logits: keep the argmax)
    }
    workgroupBarrier();
  }

  if (t == 0u && n > 0u && n < CAPACITY) {
    seq[n] = w_token;
    seq_len[0] = n + 1u;
  }
}
