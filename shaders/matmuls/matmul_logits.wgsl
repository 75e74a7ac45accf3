// Output layer: logits = act_in(A) * W + bias, kept in f32 because they feed the f32 softmax.
@group(0) @binding(4) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> C: array<F32Out>;

fn col4(c: u32) -> vec4<f32> {
  return vec4<f32>(bias[c], bias[min(c + 1u, N - 1u)], bias[min(c + 2u, N - 1u)], bias[min(c + 3u, N - 1u)]);
}

fn store4(r: u32, c: u32, acc4: vec4<f32>, b: vec4<f32>) -> bool {
  store_f32x4(r, c, acc4 + b);
  return false;
}

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_logits(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  _ = mm_run(wg, lid);  // no overflow flag: C is f32
}
