// Forward linear layer: C = act_in(A) * W + bias, stored as f16 (h). A_ACT applies the previous
// layer's activation on load, so only pre-activations are kept for the backward pass.
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> C: array<HW>;
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>>;

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_fwd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  mm_tile(wg, lid);
  let nw = (N + 1u) / 2u;
  var bad = false;
  for (var j = 0u; j < TN / 4u; j++) {
    let c = out_col(wg, lid, j);
    if (c >= N) { break; }
    let b = mask_cols(vec4<f32>(bias[c], bias[min(c + 1u, N - 1u)], bias[min(c + 2u, N - 1u)],
                                bias[min(c + 3u, N - 1u)]), c);
    for (var i = 0u; i < TM; i++) {
      let r = out_row(wg, lid, i);
      if (r >= M) { break; }
      let v = mask_cols(acc[i][j] + b, c);
      bad = bad || h_overflows4(v);
      C[r * nw + c / 2u] = h_pack(v.xy);
      if (c + 2u < N) { C[r * nw + c / 2u + 1u] = h_pack(v.zw); }
    }
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
