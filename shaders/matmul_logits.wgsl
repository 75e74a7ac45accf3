// Output layer: logits = act_in(A) * W + bias, kept in f32 because they feed the f32 softmax.
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> C: array<f32>;

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_logits(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  mm_tile(wg, lid);
  for (var j = 0u; j < TN / 4u; j++) {
    let c = out_col(wg, lid, j);
    if (c >= N) { break; }
    for (var i = 0u; i < TM; i++) {
      let r = out_row(wg, lid, i);
      if (r >= M) { break; }
      for (var t = 0u; t < 4u; t++) {
        if (c + t < N) { C[r * N + c + t] = acc[i][j][t] + bias[c + t]; }
      }
    }
  }
}
