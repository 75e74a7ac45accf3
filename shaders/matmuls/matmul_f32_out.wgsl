// Contract (webmp/wgsl.py): no bindings; the variant declares C (array<F32Out>); after the core.
// The f32 output of matmul_logits and matmul_wgrad: a 4-column group's stores, any N and layout
// (matmul_f32_out4.wgsl: C in whole 4-column groups).

alias F32Out = f32;

// Stores the 4-column group v of row r from column c (of batch mm_z), the columns before N. Written
// out rather than looped over v[t]: indexing a vector by a loop variable made the kernel compile
// markedly slower in the browser (docs/benchmarks.md "Cold start").
fn store_f32x4(r: u32, c: u32, v: vec4<f32>) {
  let o = out_index(r, c, N);
  C[o] = v.x;
  if (c + 1u < N) { C[o + 1u] = v.y; }
  if (c + 2u < N) { C[o + 2u] = v.z; }
  if (c + 3u < N) { C[o + 3u] = v.w; }
}
