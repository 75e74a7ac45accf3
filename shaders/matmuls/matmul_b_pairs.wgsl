// Contract (webmp/wgsl.py): a matmul file (after the prelude); binding 3 B2; defines B2_QUADS,
// BQuad, b2_pair, b2_quad. B again, two words an element: the register core reads op(B)'s rows a pair of words at
// a time with B_PAIRS (one load where there were two; lavapipe compiles a storage load lane by
// lane, so the count of loads is what costs). The same buffer, bound twice (webmp.ops.matmul).
@group(0) @binding(3) var<storage, read> B2: array<HWLoad2>;

// Pair i of B's words (words 2i, 2i + 1): four values.
fn b2_pair(i: u32) -> vec4<f32> { return h_load2(B2[i]); }

// Quad i (words 4i .. 4i + 3): eight values. Only matmul_b_quads.wgsl loads them at once: the K
// loop asks for quads only where B2_QUADS says so.
const B2_QUADS = false;
struct BQuad { lo: vec4<f32>, hi: vec4<f32> }
fn b2_quad(i: u32) -> BQuad { return BQuad(b2_pair(2u * i), b2_pair(2u * i + 1u)); }
