// Contract (webmp/wgsl.py): no bindings; goes before colsum / layernorm_wgrad, which define
// `fn column_terms(r: u32, c: u32) -> vec2<f32>` and an entry point calling column_sums.
// Column sums in f32 over the M rows of [M, N] matrices in the activation format, one thread a column.

override M: u32;
override N: u32;

// Element c of a stored row, given the word holding columns c & ~1 and c | 1.
fn h_element(w: HW, c: u32) -> f32 {
  let v = h_unpack(w);
  return select(v.x, v.y, (c & 1u) == 1u);
}

// The two sums of column c over all rows, summed in row order; (0, 0) past the last column.
fn column_sums(c: u32) -> vec2<f32> {
  var s = vec2<f32>(0.0);
  if (c >= N) { return s; }
  for (var r = 0u; r < M; r++) { s += column_terms(r, c); }
  return s;
}
