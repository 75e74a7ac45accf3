// Fused causal attention backward, first kernel (flash.wgsl): Dsum_i = rowsum(dO_i * O_i) of every
// query row, in f32 over c = 0 .. DH - 1 in order, from O as stored (h). It stands for
// c_i = sum_j P_ij dP_ij of the softmax backward (equal for O = P V exactly). Grid
// [ceil(T / WG), B * H], a thread a row.
@group(0) @binding(0) var<storage, read> O: array<HW>;          // [B*T, D]
@group(0) @binding(1) var<storage, read> dO: array<HW>;         // [B*T, D]
@group(0) @binding(2) var<storage, read_write> Dsum: array<f32>;  // [B*H*T]: row z * T + i

@compute @workgroup_size(WG)
fn flash_bwd_dot(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let z = wg.y;
  let b = z / H;
  let h = z % H;
  let i = wg.x * WG + lid.x;
  if (i >= T) { return; }
  var acc = 0.0;
  for (var c = 0u; c < DH; c += 2u) {
    let w = o_word(b, i, h, c);
    let o = h_unpack(O[w]);
    let g = h_unpack(dO[w]);
    acc += g.x * o.x;
    acc += g.y * o.y;
  }
  Dsum[z * T + i] = acc;
}
