// Forward linear layer: C = act_in(A) * W + bias, stored as f16 (h). A_ACT applies the previous
// layer's activation on load, so only pre-activations are kept for the backward pass.
@group(0) @binding(4) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> C: array<HWOut>;
@group(0) @binding(6) var<storage, read_write> flags: array<atomic<u32>>;

fn col4(c: u32) -> vec4<f32> {
  return mask_cols(vec4<f32>(bias[c], bias[min(c + 1u, N - 1u)], bias[min(c + 2u, N - 1u)],
                             bias[min(c + 3u, N - 1u)]), c);
}

fn store4(r: u32, c: u32, acc4: vec4<f32>, b: vec4<f32>) -> bool {
  return store_h4(r, c, mask_cols(acc4 + b, c));
}

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_fwd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  mm_run_h(wg, lid);
}
