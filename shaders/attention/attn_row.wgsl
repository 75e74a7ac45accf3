// Contract (webmp/engine/wgsl.py): after reduce.wgsl, attn_softmax.wgsl, attn_softmax_fwd.wgsl and
// attn_softmax_row.wgsl, whose S, P, flags, seq_len, row functions and reductions it uses.
// The newest token's attention in one dispatch (text generation's one-position program,
// webmp/models/net_sample.py), a workgroup a head: what sample_row_put, the row products "scores"
// and "values" (webmp/ops/attention.py) and attn_softmax_row compute one after the other, with the
// same arithmetic, so the same bits:
//   1. head h's q, k and v words of the row qkv [1, 3D] into row i of the cache [T, 3D] (the
//      window's qkv buffer), i = min(n, T) - 1, n = seq_len[0];
//   2. S [h, j] = q_h . k_j for the visible keys j <= i: the matmul cores' sum (f32 fma from 0, in
//      k order), stored f32 (the stale keys j > i are neither computed nor read);
//   3. P [h, :] = attn_softmax_row's row h;
//   4. O [h, :] = P [h, :] V_h over all T keys in key order (the masked keys' P is 0), as matmul_plain
//      sums and stores it (a value that does not fit raises the overflow flag).
// Each step reads what this workgroup wrote before its storageBarrier: the head's own slices.
@group(0) @binding(4) var<storage, read> qkv: array<HWLoad>;          // [1, 3D]: the newest row
@group(0) @binding(5) var<storage, read_write> cache: array<HWLoad>;  // [T, 3D]
@group(0) @binding(6) var<storage, read_write> O: array<HW>;          // [1, D]

override HEADS: u32;  // H
override HEAD: u32;   // d, even

@compute @workgroup_size(WG)
fn attn_row(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = clamp(seq_len[0], 1u, T) - 1u;
  let h = wg.x;
  let t = lid.x;
  let hw = HEAD / 2u;                 // words of a head's slice
  let third = HEADS * hw;             // words of q (of k, of v) in a row
  let row_words = 3u * third;
  for (var w = t; w < 3u * hw; w += WG) {
    let word = (w / hw) * third + h * hw + w % hw;
    cache[i * row_words + word] = qkv[word];
  }
  storageBarrier();
  for (var j = t; j <= i; j += WG) {
    var acc = 0.0;
    for (var w = 0u; w < hw; w++) {
      let q = h_load(qkv[h * hw + w]);
      let k = h_load(cache[j * row_words + third + h * hw + w]);
      acc = fma(q.y, k.y, fma(q.x, k.x, acc));
    }
    S[h * T + j] = acc;
  }
  storageBarrier();
  set_row(h);
  s_max = workgroup_max(lane_max(i, t), t);
  s_sum = workgroup_sum(lane_sum(i, t), t);
  causal_store(i, t, WG);
  storageBarrier();
  var bad = false;
  for (var w = t; w < hw; w += WG) {
    var acc = vec2<f32>(0.0);
    for (var j = 0u; j < T; j++) {
      let p = h_unpack(P[p_row + j / 2u])[j % 2u];
      acc = fma(vec2<f32>(p), h_load(cache[j * row_words + 2u * third + h * hw + w]), acc);
    }
    bad = bad || h_overflows(acc.x) || h_overflows(acc.y);
    O[h * hw + w] = h_pack(acc);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
