// Contract (webmp/wgsl.py): after reduce.wgsl, attn_softmax.wgsl and attn_softmax_fwd.wgsl, whose
// S, P, flags, row functions and reductions it uses.
// The causal softmax of one query row per head (text generation's one-position program,
// webmp/models/net_sample.py): S and P are [Z, T] (row z: head z's scores of the newest query
// against the T keys of its cache), and the query is i = min(n, T) - 1 with n = seq_len[0], read
// on the GPU. Row z is computed exactly as attn_softmax_fwd's workgroup form computes query i of
// batch-head z in a window (the same lane partials, the same reduction tree, the same store), so
// equal scores give equal bits; keys j > i (stale cache rows) are masked, never read.
@group(0) @binding(3) var<storage, read> seq_len: array<u32>;  // [1]

@compute @workgroup_size(WG)
fn attn_softmax_row(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = clamp(seq_len[0], 1u, T) - 1u;
  let t = lid.x;
  set_row(wg.x);
  s_max = workgroup_max(lane_max(i, t), t);
  s_sum = workgroup_sum(lane_sum(i, t), t);
  causal_store(i, t, WG);
}
