// Contract (webmp/wgsl.py): no bindings; after reduce.wgsl; overrides T, SCALE; the variant defines
// causal_value, store_word and the entry points.
// Rows of the causal attention matrices [Z * T, T] of Z = batch * heads products: the scores S and
// dP in f32 (T values a row), P and dS in the activation format (rows of (T + 1) / 2 words, an odd
// row ending in a zero pad). Row z * T + i is query i of batch-head z, whose visible keys are j <= i
// (the diagonal always is, so no row is empty). Math is f32. Two forms of each variant, the same
// bits: `<variant>` (a workgroup a row, grid [T, Z]: lane t = local index, reductions with
// workgroup_reduce) and `<variant>_thread` (a thread a row, WG rows a workgroup, grid
// [ceil(T / WG), Z]: the thread runs every lane in turn, reductions with serial_reduce). The variant
// file (attn_softmax_fwd, attn_softmax_bwd) defines
//   fn causal_value(j: u32) -> f32: its output at visible column j of the current row
//   fn store_word(w: u32, v: vec2<f32>): stores word w of the current row's output
// and both entry points (@workgroup_size(WG)), which reduce the row and store it with causal_store.

override T: u32;
override SCALE: f32;  // 1 / sqrt(head size), the scores' scale

const WG: u32 = 64u;  // threads per row (workgroup form), rows per workgroup (thread form)
alias RedT = f32;     // what workgroup_sum, workgroup_max and serial_reduce (reduce.wgsl) combine

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

// Stores words w0, w0 + step, ... of the output row of query i (causal_word), raising the overflow
// flag for a value that does not fit: step WG from lane w0 (workgroup form), or 0, 1 (thread form).
fn causal_store(i: u32, w0: u32, step: u32) {
  let nw = (T + 1u) / 2u;
  var bad = false;
  for (var w = w0; w < nw; w += step) {
    let v = causal_word(i, w);
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    store_word(w, v);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
