// Contract (webmp/wgsl.py): no bindings; after matmul_h_out.wgsl; defines HWOut (C's element) and
// store_h4. Any N and layout (matmul_h_store4.wgsl: C in whole 4-column groups).

alias HWOut = HW;

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
