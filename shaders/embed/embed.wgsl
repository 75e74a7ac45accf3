// Token + position embedding: X[r, :] = wte[idx[r], :] + wpe[r % T, :], added in f32 from the f32
// master tables (like biases, embeddings have no f16 copy here) and stored once in the activation
// format; a value that does not fit raises the overflow flag. One thread per stored word (two
// columns), so the emulated path needs no atomics. Token ids must be < V (the host checks the
// stream: webmp.data.check_tokens).
@group(0) @binding(0) var<storage, read> idx: array<u32>;     // [R]
@group(0) @binding(1) var<storage, read> wte: array<f32>;     // [V, D]
@group(0) @binding(2) var<storage, read> wpe: array<f32>;     // [T, D]
@group(0) @binding(3) var<storage, read_write> X: array<HW>;  // [R, D]
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>>;

override R: u32;  // rows: B * T
override T: u32;  // context length
override D: u32;  // width

@compute @workgroup_size(64)
fn embed_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let dw = (D + 1u) / 2u;
  var bad = false;
  for (var i = gid.x; i < R * dw; i += nwg.x * 64u) {
    let r = i / dw;
    let c = 2u * (i % dw);
    let tok = idx[r] * D + c;
    let pos = (r % T) * D + c;
    var v = vec2<f32>(wte[tok] + wpe[pos], 0.0);
    if (c + 1u < D) { v.y = wte[tok + 1u] + wpe[pos + 1u]; }
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    X[i] = h_pack(v);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
