// The newest token's embedding row (text generation's one-position program,
// webmp/models/net_sample.py): X [1, D] = row r of what sample_window then embed_fwd compute over
// the window, r = min(n, T) - 1 with n = seq_len[0]: wte[token] + wpe[r], added in f32 and stored
// as embed_fwd stores (a value that does not fit raises the overflow flag), token the window's
// idx[r] as sample_window picks it from seq. One dispatch instead of the window's embedding and
// sample_row_take, the same bits.
@group(0) @binding(0) var<storage, read> seq: array<u32>;      // [CAPACITY]
@group(0) @binding(1) var<storage, read> seq_len: array<u32>;  // [1]
@group(0) @binding(2) var<storage, read> wte: array<f32>;      // [V, D]
@group(0) @binding(3) var<storage, read> wpe: array<f32>;      // [T, D]
@group(0) @binding(4) var<storage, read_write> X: array<HW>;   // [1, D]
@group(0) @binding(5) var<storage, read_write> flags: array<atomic<u32>>;

override T: u32;         // context length
override D: u32;         // width
override CAPACITY: u32;  // tokens seq can hold

@compute @workgroup_size(64)
fn embed_row(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = clamp(seq_len[0], 1u, T) - 1u;  // sample_row_take's row
  let n = min(seq_len[0], CAPACITY);       // sample_window's idx[r]
  let shown = min(n, T);
  let token = select(0u, seq[min(n - shown + r, CAPACITY - 1u)], r < shown);
  let dw = (D + 1u) / 2u;
  var bad = false;
  for (var w = gid.x; w < dw; w += nwg.x * 64u) {
    let c = 2u * w;
    let tok = token * D + c;
    let pos = r * D + c;
    var v = vec2<f32>(wte[tok] + wpe[pos], 0.0);
    if (c + 1u < D) { v.y = wte[tok + 1u] + wpe[pos + 1u]; }
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    X[w] = h_pack(v);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
