// The window of text generation (webmp sample): idx [T] = the last min(n, T) tokens of seq at
// positions 0, 1, ..., where n = seq_len[0] is the number of tokens seq holds (the prompt and
// those generated so far); the positions after them in a shorter window get token 0, padding
// that changes nothing before it (attention is causal). numpy twin: webmp.reference.sample_window.
@group(0) @binding(0) var<storage, read> seq: array<u32>;          // [CAPACITY]
@group(0) @binding(1) var<storage, read> seq_len: array<u32>;      // [1]
@group(0) @binding(2) var<storage, read_write> idx: array<u32>;    // [T]

override T: u32;         // context length
override CAPACITY: u32;  // tokens seq can hold

@compute @workgroup_size(64)
fn sample_window(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = min(seq_len[0], CAPACITY);
  let shown = min(n, T);
  let first = n - shown;
  for (var t = gid.x; t < T; t += nwg.x * 64u) {
    idx[t] = select(0u, seq[min(first + t, CAPACITY - 1u)], t < shown);
  }
}
