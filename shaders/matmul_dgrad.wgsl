// Input gradient through the previous layer's activation:
//   dZprev = (dZ * W^T) .* act'(Zprev), with W stored [N=in, K=out] (TRANS_B=1).
// The product is accumulated in f32, multiplied by act' in f32 and rounded to f16 once.
// Values that do not fit the storage format raise the overflow flag.
@group(0) @binding(2) var<storage, read> Zprev: array<HW>;
@group(0) @binding(3) var<storage, read_write> C: array<HW>;
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>>;

fn act_grad2(z: vec2<f32>) -> vec2<f32> { return vec2<f32>(act_grad(z.x, OUT_ACT), act_grad(z.y, OUT_ACT)); }

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_dgrad(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  mm_tile(wg, lid);
  let nw = (N + 1u) / 2u;
  var bad = false;
  for (var j = 0u; j < TN / 4u; j++) {
    let c = out_col(wg, lid, j);
    if (c >= N) { break; }
    for (var i = 0u; i < TM; i++) {
      let r = out_row(wg, lid, i);
      if (r >= M) { break; }
      let w = r * nw + c / 2u;
      var g = vec4<f32>(act_grad2(h_unpack(Zprev[w])), 0.0, 0.0);
      if (c + 2u < N) { g = vec4<f32>(g.xy, act_grad2(h_unpack(Zprev[w + 1u]))); }
      let v = mask_cols(acc[i][j] * g, c);
      bad = bad || h_overflows4(v);
      C[w] = h_pack(v.xy);
      if (c + 2u < N) { C[w + 1u] = h_pack(v.zw); }
    }
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
