// Input gradient through the previous layer's activation:
//   dZprev = (dZ * W^T) .* act'(Zprev), with W stored [N=in, K=out] (TRANS_B=1).
// The product is accumulated in f32, multiplied by act' in f32 and rounded to f16 once.
// Values that do not fit the storage format raise the overflow flag.
@group(0) @binding(2) var<storage, read> Zprev: array<HW>;
@group(0) @binding(3) var<storage, read_write> C: array<HW>;
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>>;

override OUT_ACT: u32 = 0u;  // activation whose derivative multiplies the product (ACT_*)

@compute @workgroup_size(16, 16)
fn matmul_dgrad(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
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
      let z = h_unpack(Zprev[r * nw + c / 2u]);
      var v = acc_pair(i, p) * vec2<f32>(act_grad(z.x, OUT_ACT), act_grad(z.y, OUT_ACT));
      if (c + 1u >= N) { v.y = 0.0; }
      bad = bad || h_overflows(v.x) || h_overflows(v.y);
      C[r * nw + c / 2u] = h_pack(v);
    }
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
