// Input gradient through the previous layer's activation:
//   dZprev = (dZ * W^T) .* act'(Zprev), with W stored [N=in, K=out] (TRANS_B=1).
// The product is accumulated in f32, multiplied by act' in f32 and rounded to f16 once.
// Values that do not fit the storage format raise the overflow flag.
@group(0) @binding(4) var<storage, read> Zprev: array<HW>;
@group(0) @binding(5) var<storage, read_write> C: array<HWOut>;
@group(0) @binding(6) var<storage, read_write> flags: array<atomic<u32>>;

fn act_grad2(z: vec2<f32>) -> vec2<f32> { return vec2<f32>(act_grad(z.x, OUT_ACT), act_grad(z.y, OUT_ACT)); }

fn col4(c: u32) -> vec4<f32> { return vec4<f32>(0.0); }  // no per-column values

fn store4(r: u32, c: u32, acc4: vec4<f32>, _col: vec4<f32>) -> bool {
  let w = h_index(r, c, N);
  var g = vec4<f32>(act_grad2(h_unpack(Zprev[w])), 0.0, 0.0);
  if (c + 2u < N) { g = vec4<f32>(g.xy, act_grad2(h_unpack(Zprev[w + 1u]))); }
  return store_h4(r, c, mask_cols(acc4 * g, c));
}

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_dgrad(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  mm_run_h(wg, lid);
}
