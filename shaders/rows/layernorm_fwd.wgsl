// LayerNorm forward over the last dimension, statistics in f32. Two forms, the same bits:
// layernorm_fwd (a workgroup a row: lane t = local index, workgroup_sum) and layernorm_fwd_thread
// (a thread a row, WG rows a workgroup: the thread runs every lane in turn, serial_reduce).
//   Y = (Z - mean) * rstd * gamma + beta, stored in the activation format; mean and rstd are kept
//   in f32 for the backward pass.
@group(0) @binding(0) var<storage, read_write> Z: array<HW>;    // [M, N] (add_layernorm_fwd.wgsl adds into it)
@group(0) @binding(1) var<storage, read> gamma: array<f32>;     // [N]
@group(0) @binding(2) var<storage, read> beta: array<f32>;      // [N]
@group(0) @binding(3) var<storage, read_write> Y: array<HW>;    // [M, N]
@group(0) @binding(4) var<storage, read_write> stats: array<f32>; // [M, 2]: mean, rstd
@group(0) @binding(5) var<storage, read_write> flags: array<atomic<u32>>;

override M: u32;
override N: u32;
override EPS: f32 = 1e-5;

const WG: u32 = 64u;
alias RedT = f32;  // what workgroup_sum and serial_reduce (reduce.wgsl) add

// Lane l's partials over the words w = l, l + WG, ... of row r: the sum (padding is 0), then the
// sum of squared deviations from the mean.
fn lane_sum(r: u32, l: u32) -> f32 {
  let nw = (N + 1u) / 2u;
  var s = 0.0;
  for (var w = l; w < nw; w += WG) { let z = h_unpack(Z[r * nw + w]); s += z.x + z.y; }
  return s;
}
fn lane_sq(r: u32, l: u32, mean: f32) -> f32 {
  let nw = (N + 1u) / 2u;
  var q = 0.0;
  for (var w = l; w < nw; w += WG) {
    let d = h_unpack(Z[r * nw + w]) - mean;
    q += d.x * d.x;
    if (2u * w + 1u < N) { q += d.y * d.y; }
  }
  return q;
}
// Stores words w0, w0 + step, ... of row r's Y; whether a value did not fit.
fn store_row(r: u32, w0: u32, step: u32, mean: f32, rstd: f32) -> bool {
  let nw = (N + 1u) / 2u;
  var bad = false;
  for (var w = w0; w < nw; w += step) {
    let c = 2u * w;
    let z = h_unpack(Z[r * nw + w]);
    var v = vec2<f32>((z.x - mean) * rstd * gamma[c] + beta[c], 0.0);
    if (c + 1u < N) { v.y = (z.y - mean) * rstd * gamma[c + 1u] + beta[c + 1u]; }
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    Y[r * nw + w] = h_pack(v);
  }
  return bad;
}

@compute @workgroup_size(WG)
fn layernorm_fwd(
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
) {
  let r = grid_row(wg, nwg);
  if (r >= M) { return; }  // the 2-D grid's last workgroups (uniform: a whole workgroup returns)
  if (layernorm_row_workgroup(r, lid.x)) { atomicOr(&flags[0], FLAG_H_STORE); }
}

// Row r by the workgroup, lane t = local index; whether lane t's values did not fit.
fn layernorm_row_workgroup(r: u32, t: u32) -> bool {
  let mean = workgroup_sum(lane_sum(r, t), t) / f32(N);
  let rstd = inverseSqrt(workgroup_sum(lane_sq(r, t, mean), t) / f32(N) + EPS);
  let bad = store_row(r, t, WG, mean, rstd);
  if (t == 0u) { stats[2u * r] = mean; stats[2u * r + 1u] = rstd; }
  return bad;
}

// Row r by one thread, every lane in turn; whether a value did not fit.
fn layernorm_row_serial(r: u32) -> bool {
  for (var l = 0u; l < WG; l++) { lanes[l] = lane_sum(r, l); }
  let mean = serial_reduce(RED_SUM) / f32(N);
  for (var l = 0u; l < WG; l++) { lanes[l] = lane_sq(r, l, mean); }
  let rstd = inverseSqrt(serial_reduce(RED_SUM) / f32(N) + EPS);
  let bad = store_row(r, 0u, 1u, mean, rstd);
  stats[2u * r] = mean;
  stats[2u * r + 1u] = rstd;
  return bad;
}

@compute @workgroup_size(WG)
fn layernorm_fwd_thread(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r = gid.x;
  if (r >= M) { return; }
  if (layernorm_row_serial(r)) { atomicOr(&flags[0], FLAG_H_STORE); }
}
