// RMSNorm forward over the last dimension (PyTorch's nn.RMSNorm), statistics in f32. Two forms,
// the same bits: rmsnorm_fwd (a workgroup a row: lane t = local index, workgroup_sum) and
// rmsnorm_fwd_thread (a thread a row, WG rows a workgroup: the thread runs every lane in turn,
// serial_reduce).
//   rstd = 1 / sqrt(mean(X^2) + EPS),  Y = X * rstd * gamma, stored in the activation format;
//   rstd is kept in f32 for the backward pass.
@group(0) @binding(0) var<storage, read> X: array<HW>;          // [M, N]
@group(0) @binding(1) var<storage, read> gamma: array<f32>;     // [N]
@group(0) @binding(2) var<storage, read_write> Y: array<HW>;    // [M, N]
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>; // [M]
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>>;

override M: u32;
override N: u32;
override EPS: f32;

const WG: u32 = 64u;
alias RedT = f32;  // what workgroup_sum and serial_reduce (reduce.wgsl) add

// Lane l's partial sum of squares over the words w = l, l + WG, ... of row r (padding is 0).
fn lane_sq(r: u32, l: u32) -> f32 {
  let nw = (N + 1u) / 2u;
  var q = 0.0;
  for (var w = l; w < nw; w += WG) { let x = h_unpack(X[r * nw + w]); q += x.x * x.x + x.y * x.y; }
  return q;
}
// Stores words w0, w0 + step, ... of row r's Y; whether a value did not fit.
fn store_row(r: u32, w0: u32, step: u32, s: f32) -> bool {
  let nw = (N + 1u) / 2u;
  var bad = false;
  for (var w = w0; w < nw; w += step) {
    let c = 2u * w;
    let x = h_unpack(X[r * nw + w]);
    var v = vec2<f32>(x.x * s * gamma[c], 0.0);
    if (c + 1u < N) { v.y = x.y * s * gamma[c + 1u]; }
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    Y[r * nw + w] = h_pack(v);
  }
  return bad;
}

@compute @workgroup_size(WG)
fn rmsnorm_fwd(
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
) {
  let r = grid_row(wg, nwg);
  if (r >= M) { return; }  // the 2-D grid's last workgroups (uniform: a whole workgroup returns)
  let t = lid.x;
  let s = inverseSqrt(workgroup_sum(lane_sq(r, t), t) / f32(N) + EPS);
  let bad = store_row(r, t, WG, s);
  if (t == 0u) { rstd[r] = s; }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}

@compute @workgroup_size(WG)
fn rmsnorm_fwd_thread(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r = gid.x;
  if (r >= M) { return; }
  for (var l = 0u; l < WG; l++) { lanes[l] = lane_sq(r, l); }
  let s = inverseSqrt(serial_reduce(RED_SUM) / f32(N) + EPS);
  let bad = store_row(r, 0u, 1u, s);
  rstd[r] = s;
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
