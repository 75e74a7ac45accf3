// RMSNorm backward to the input, in f32. Two forms, the same bits: rmsnorm_bwd (a workgroup a
// row: lane t = local index, workgroup_sum) and rmsnorm_bwd_thread (a thread a row, WG rows a
// workgroup: the thread runs every lane in turn, serial_reduce).
//   g = dY * gamma,  xhat = X * rstd,  dX = rstd * (g - xhat * mean(g * xhat)), stored in the
//   activation format.
@group(0) @binding(0) var<storage, read> dY: array<HW>;         // [M, N]
@group(0) @binding(1) var<storage, read> X: array<HW>;          // [M, N]
@group(0) @binding(2) var<storage, read> rstd: array<f32>;      // [M]
@group(0) @binding(3) var<storage, read> gamma: array<f32>;     // [N]
@group(0) @binding(4) var<storage, read_write> dX: array<HW>;   // [M, N]
@group(0) @binding(5) var<storage, read_write> flags: array<atomic<u32>>;

override M: u32;
override N: u32;

const WG: u32 = 64u;
alias RedT = f32;  // what workgroup_sum and serial_reduce (reduce.wgsl) add

fn gamma2(c: u32) -> vec2<f32> { return vec2<f32>(gamma[c], select(0.0, gamma[min(c + 1u, N - 1u)], c + 1u < N)); }

// Lane l's partial sum of g * xhat over the words w = l, l + WG, ... of row r (padding has g = 0).
fn lane_acc(r: u32, l: u32) -> f32 {
  let nw = (N + 1u) / 2u;
  var acc = 0.0;
  for (var w = l; w < nw; w += WG) {
    let g = h_unpack(dY[r * nw + w]) * gamma2(2u * w);
    acc += dot(g, h_unpack(X[r * nw + w]) * rstd[r]);
  }
  return acc;
}
// Stores words w0, w0 + step, ... of row r's dX (m: the mean of g * xhat); whether a value did not fit.
fn store_row(r: u32, w0: u32, step: u32, m: f32) -> bool {
  let nw = (N + 1u) / 2u;
  let s = rstd[r];
  var bad = false;
  for (var w = w0; w < nw; w += step) {
    let g = h_unpack(dY[r * nw + w]) * gamma2(2u * w);
    var v = s * (g - h_unpack(X[r * nw + w]) * s * m);
    if (2u * w + 1u >= N) { v.y = 0.0; }
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    dX[r * nw + w] = h_pack(v);
  }
  return bad;
}

@compute @workgroup_size(WG)
fn rmsnorm_bwd(
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
) {
  let r = grid_row(wg, nwg);
  if (r >= M) { return; }  // the 2-D grid's last workgroups (uniform: a whole workgroup returns)
  let t = lid.x;
  let m = workgroup_sum(lane_acc(r, t), t) / f32(N);
  if (store_row(r, t, WG, m)) { atomicOr(&flags[0], FLAG_H_STORE); }
}

@compute @workgroup_size(WG)
fn rmsnorm_bwd_thread(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r = gid.x;
  if (r >= M) { return; }
  for (var l = 0u; l < WG; l++) { lanes[l] = lane_acc(r, l); }
  let m = serial_reduce(RED_SUM) / f32(N);
  if (store_row(r, 0u, 1u, m)) { atomicOr(&flags[0], FLAG_H_STORE); }
}
