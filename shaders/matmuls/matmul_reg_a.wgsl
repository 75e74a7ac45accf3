// Contract (webmp/wgsl.py): after matmul_reg.wgsl; defines k_loops and a_words. No bindings.
// Each thread loads all the words of op(A) it needs.

fn k_loops(row0: u32, col0: u32) { k_loop(row0, col0); }

fn a_words(row0: u32, k: u32) -> array<vec2<f32>, TM_MAX> { return own_a_words(row0, k); }
