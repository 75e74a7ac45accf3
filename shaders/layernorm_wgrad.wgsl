// LayerNorm parameter gradients, column sums in f32:
//   dgamma[c] = sum_r dY[r,c] * xhat[r,c],  dbeta[c] = sum_r dY[r,c]
@group(0) @binding(0) var<storage, read> dY: array<HW>;          // [M, N]
@group(0) @binding(1) var<storage, read> Z: array<HW>;           // [M, N]
@group(0) @binding(2) var<storage, read> stats: array<f32>;      // [M, 2]
@group(0) @binding(3) var<storage, read_write> dgamma: array<f32>;
@group(0) @binding(4) var<storage, read_write> dbeta: array<f32>;

override M: u32;
override N: u32;

@compute @workgroup_size(64)
fn layernorm_wgrad(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= N) { return; }
  let nw = (N + 1u) / 2u;
  let odd = (c & 1u) == 1u;
  var sg = 0.0;
  var sb = 0.0;
  for (var r = 0u; r < M; r++) {
    let d2 = h_unpack(dY[r * nw + c / 2u]);
    let z2 = h_unpack(Z[r * nw + c / 2u]);
    let d = select(d2.x, d2.y, odd);
    let xhat = (select(z2.x, z2.y, odd) - stats[2u * r]) * stats[2u * r + 1u];
    sg += d * xhat;
    sb += d;
  }
  dgamma[c] = sg;
  dbeta[c] = sb;
}
