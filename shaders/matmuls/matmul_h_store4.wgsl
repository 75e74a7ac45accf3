// Contract (webmp/wgsl.py): no bindings; after matmul_h_out.wgsl; defines HWOut (C's element) and
// store_h4. Only where N and C's offsets and row stride are multiples of 4 (webmp.ops.c_quads), so
// every 4-column group is one whole element of C.
// One store for four values: lavapipe compiles each store lane by lane, so two words in one store
// halve that cost (and an f16 pair is two 16-bit stores there: HW4 is u32 words).

alias HWOut = HW4;

// store_h4 of matmul_h_store.wgsl: the group v of row r from column c, all four inside C.
fn store_h4(r: u32, c: u32, v: vec4<f32>) -> bool {
  C[out_index(r, c, N) / 4u] = h_pack4(v);
  return h_overflows4(v);
}
