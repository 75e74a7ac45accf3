// LayerNorm parameter gradients, column sums in f32 (after columns.wgsl):
//   dgamma[c] = sum_r dY[r,c] * xhat[r,c],  dbeta[c] = sum_r dY[r,c]
@group(0) @binding(0) var<storage, read> dY: array<HW>;          // [M, N]
@group(0) @binding(1) var<storage, read> Z: array<HW>;           // [M, N]
@group(0) @binding(2) var<storage, read> stats: array<f32>;      // [M, 2]: mean, rstd
@group(0) @binding(3) var<storage, read_write> dgamma: array<f32>;
@group(0) @binding(4) var<storage, read_write> dbeta: array<f32>;

fn column_terms(r: u32, c: u32) -> vec2<f32> {
  let d = h_element(dY[h_index(r, c, N)], c);
  let xhat = (h_element(Z[h_index(r, c, N)], c) - stats[2u * r]) * stats[2u * r + 1u];
  return vec2<f32>(d * xhat, d);
}

@compute @workgroup_size(64)
fn layernorm_wgrad(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= N) { return; }
  let s = column_sums(c);
  dgamma[c] = s.x;
  dbeta[c] = s.y;
}
