// Forward linear layer: C = act_in(A) * W + bias, stored as f16 (h). A_ACT applies the previous
// layer's activation on load, so only pre-activations are kept for the backward pass.
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> C: array<HW>;
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>>;

@compute @workgroup_size(16, 16)
fn matmul_fwd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  mm_tile(wg, lid);
  let c0 = out_col(wg, lid);
  let nw = (N + 1u) / 2u;
  var bad = false;
  for (var i = 0u; i < TM; i++) {
    let r = out_row(wg, lid, i);
    if (r >= M) { break; }
    for (var p = 0u; p < 2u; p++) {
      let c = c0 + 2u * p;
      if (c >= N) { break; }
      var v = acc_pair(i, p) + vec2<f32>(bias[c], select(0.0, bias[min(c + 1u, N - 1u)], c + 1u < N));
      if (c + 1u >= N) { v.y = 0.0; }
      bad = bad || h_overflows(v.x) || h_overflows(v.y);
      C[r * nw + c / 2u] = h_pack(v);
    }
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
