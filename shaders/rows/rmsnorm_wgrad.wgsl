// RMSNorm weight gradient, column sums in f32 (after columns.wgsl):
//   dgamma[c] = sum_r dY[r,c] * X[r,c] * rstd[r]
@group(0) @binding(0) var<storage, read> dY: array<HW>;          // [M, N]
@group(0) @binding(1) var<storage, read> X: array<HW>;           // [M, N]
@group(0) @binding(2) var<storage, read> rstd: array<f32>;       // [M]
@group(0) @binding(3) var<storage, read_write> dgamma: array<f32>;

fn column_terms(r: u32, c: u32) -> vec2<f32> {
  let d = h_element(dY[h_index(r, c, N)], c);
  return vec2<f32>(d * (h_element(X[h_index(r, c, N)], c) * rstd[r]), 0.0);
}

@compute @workgroup_size(64)
fn rmsnorm_wgrad(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= N) { return; }
  dgamma[c] = column_sums(c).x;
}
