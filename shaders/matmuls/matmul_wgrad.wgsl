// Weight gradient: dW[M=in, N=out] = act_in(H)^T * dZ, with H stored [K=batch, in] (TRANS_A=1).
// Written in f32: these are the master gradients. With the batch constants of matmul.wgsl the same
// f32 product gives the attention scores S = Q K^T and dP = dO V^T (see webmp/ops/attention.py).
@group(0) @binding(4) var<storage, read_write> C: array<F32Out>;

fn col4(c: u32) -> vec4<f32> { return vec4<f32>(0.0); }  // no per-column values

fn store4(r: u32, c: u32, acc4: vec4<f32>, _col: vec4<f32>) -> bool {
  store_f32x4(r, c, acc4);
  return false;
}

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_wgrad(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  _ = mm_run(wg, lid);  // no overflow flag: C is f32
}
