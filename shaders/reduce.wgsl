// Contract (webmp/wgsl.py): no bindings; the family file defines `alias RedT` and `const WG: u32`.
// Workgroup tree reductions (sum, max) of RedT values (f32 or vec2<f32>; max is componentwise) over
// WG threads (a power of two: the family's @workgroup_size).

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
