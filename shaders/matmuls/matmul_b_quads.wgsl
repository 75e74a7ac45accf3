// Contract (webmp/wgsl.py): a matmul file (after the prelude) in place of matmul_b_pairs.wgsl, on
// the f16 paths, where B's rows and batches start on whole quads and its buffer is whole quads
// (webmp.ops.b_quads); binding 3 B2; defines B2_QUADS, BQuad, b2_pair, b2_quad.
// B again, four words (eight f16 values) an element: with B_PAIRS the register core's K loop
// reads the eight columns of a 16 x 8 block's step at k in one load (four loads a step become
// two). That also shortens the 16 x 8 K loop's code enough that lavapipe's compiler no longer
// lays it out fast or 1.2-1.4x slower by chance (docs/benchmarks.md "fourth pass").
@group(0) @binding(3) var<storage, read> B2: array<HWLoad4>;

// Pair i of B's words (words 2i, 2i + 1): four values, from the quad holding it.
fn b2_pair(i: u32) -> vec4<f32> {
  let q = B2[i / 2u];
  return h_load2(select(q.zw, q.xy, i % 2u == 0u));
}

// Quad i (words 4i .. 4i + 3): eight values.
const B2_QUADS = true;
struct BQuad { lo: vec4<f32>, hi: vec4<f32> }
fn b2_quad(i: u32) -> BQuad {
  let q = B2[i];
  return BQuad(h_load2(q.xy), h_load2(q.zw));
}
