// Contract (webmp/wgsl.py): no bindings; after reduce.wgsl; overrides T, SCALE; the variant defines causal_value.
// Rows of the causal attention matrices [Z * T, T] of Z = batch * heads products: the scores S and
// dP in f32 (T values a row), P and dS in the activation format (rows of (T + 1) / 2 words, an odd
// row ending in a zero pad). Workgroup (i, z) owns row z * T + i: query i of batch-head z, whose
// visible keys are j <= i (the diagonal always is, so no row is empty). Math is f32; the variant
// file (attn_softmax_fwd, attn_softmax_bwd) defines
//   fn causal_value(j: u32) -> f32: its output at visible column j of this workgroup's row
// and an entry point (@workgroup_size(WG)) that reduces the row and stores it with causal_word.

override T: u32;
override SCALE: f32;  // 1 / sqrt(head size), the scores' scale

const WG: u32 = 64u;  // threads per row
alias RedT = f32;     // what workgroup_sum and workgroup_max (reduce.wgsl) combine

// Word w of the output row of query i: causal_value(j) at visible columns j <= i, 0 where masked
// (and in the padding half of an odd row).
fn causal_word(i: u32, w: u32) -> vec2<f32> {
  var v = vec2<f32>(0.0);
  for (var h = 0u; h < 2u; h++) {
    let j = 2u * w + h;
    if (j <= i) { v[h] = causal_value(j); }
  }
  return v;
}
