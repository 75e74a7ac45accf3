// Contract (webmp/wgsl.py): no bindings; the variant declares C (array<HW>) and flags; after matmul.wgsl.
// The f16 (h) output of matmul_fwd, matmul_dgrad and matmul_plain: stores and the overflow flag.
// The variant owns the bindings C: array<HW> and flags: array<atomic<u32>> because their numbers
// differ (5 and 6 after fwd's bias or dgrad's Zprev, 4 and 5 in matmul_plain).

fn h_overflows4(v: vec4<f32>) -> bool {
  return h_overflows(v.x) || h_overflows(v.y) || h_overflows(v.z) || h_overflows(v.w);
}

// Stores the 4-column group v (zero beyond N) of row r from column c (of batch mm_z); true when a
// value does not fit the storage format. c is a multiple of 4 and C's offsets are even, so the
// group is two whole words (one when c + 2 >= N): columns of a neighbouring batch sharing C's rows
// (another head's) are never written.
fn store_h4(r: u32, c: u32, v: vec4<f32>) -> bool {
  let w = out_index(r, c, N + (N & 1u)) / 2u;
  C[w] = h_pack(v.xy);
  if (c + 2u < N) { C[w + 1u] = h_pack(v.zw); }
  return h_overflows4(v);
}

// mm_run, raising the overflow flag when a stored value did not fit.
fn mm_run_h(wg: vec3<u32>, lid: vec3<u32>) {
  if (mm_run(wg, lid)) { atomicOr(&flags[0], FLAG_H_STORE); }
}
