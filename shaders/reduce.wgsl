// Contract (webmp/wgsl.py): no bindings; the family file defines `alias RedT` and `const WG: u32`.
// A workgroup tree sum of RedT values (f32 or vec2<f32>) over WG threads (a power of two: the
// family's @workgroup_size).

var<workgroup> red: array<RedT, WG>;

// Sum of v over the WG threads of the workgroup (t: local index), returned to every thread. A fixed
// tree: for s = WG/2, WG/4, ..., 1, slot t < s adds slot t + s. Call from uniform control flow.
fn workgroup_sum(v: RedT, t: u32) -> RedT {
  red[t] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (t < s) { red[t] += red[t + s]; }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();  // `red` may be reused by the next call
  return total;
}
