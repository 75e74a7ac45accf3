// Contract (webmp/wgsl.py): no bindings; the family file defines `alias RedT` and `const WG: u32`.
// Workgroup tree reductions (sum, max) of RedT values (f32 or vec2<f32>; max is componentwise) over
// WG threads (a power of two: the family's @workgroup_size), and the same tree run by one thread
// over WG "virtual lanes" (serial_reduce: the thread-per-row forms, no barriers), bit for bit.

var<workgroup> red: array<RedT, WG>;

const RED_SUM: u32 = 0u;
const RED_MAX: u32 = 1u;

fn red_op(a: RedT, b: RedT, op: u32) -> RedT {
  if (op == RED_MAX) { return max(a, b); }
  return a + b;
}

// v reduced with `op` over the WG threads of the workgroup (t: local index), returned to every
// thread. A fixed tree: for s = WG/2, WG/4, ..., 1, slot t < s combines slot t + s into itself.
// Call from uniform control flow.
fn workgroup_reduce(v: RedT, t: u32, op: u32) -> RedT {
  red[t] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (t < s) { red[t] = red_op(red[t], red[t + s], op); }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();  // `red` may be reused by the next call
  return total;
}

fn workgroup_sum(v: RedT, t: u32) -> RedT { return workgroup_reduce(v, t, RED_SUM); }
fn workgroup_max(v: RedT, t: u32) -> RedT { return workgroup_reduce(v, t, RED_MAX); }

// What lane l (0 <= l < WG) would pass to workgroup_reduce, for serial_reduce.
var<private> lanes: array<RedT, WG>;

// The tree of workgroup_reduce run by one thread over lanes[0 .. WG): for s = WG/2, ..., 1, slot
// t < s combines slot t + s into itself, red_op(lanes[t], lanes[t + s]) — the same f32 operations in
// the same order, so the result is bit-identical. Overwrites `lanes`.
fn serial_reduce(op: u32) -> RedT {
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    for (var t = 0u; t < s; t++) { lanes[t] = red_op(lanes[t], lanes[t + s], op); }
  }
  return lanes[0];
}

// The row of a workgroup-a-row kernel. Its grid is [x, y], y > 1 only where the rows exceed one
// dimension's 65535 workgroups (webmp/ops/rows.py _row_grid); the last row's workgroups past M return.
fn grid_row(wg: vec3<u32>, nwg: vec3<u32>) -> u32 { return wg.x + wg.y * nwg.x; }
