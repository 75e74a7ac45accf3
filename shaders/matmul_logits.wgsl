// Output layer: logits = act_in(A) * W + bias, kept in f32 because they feed the f32 softmax.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> C: array<f32>;

fn col4(c: u32) -> vec4<f32> { return vec4<f32>(0.0); }  // no per-column values

fn store4(r: u32, c: u32, acc4: vec4<f32>, _col: vec4<f32>) -> bool {
  for (var t = 0u; t < 4u; t++) {
    if (c + t < N) { C[out_index(r, c, N) + t] = acc4[t] + bias[c + t]; }
  }
  return false;
}

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_logits(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  _ = mm_run(wg, lid);  // no overflow flag: C is f32
}
