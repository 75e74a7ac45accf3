// Contract (webmp/wgsl.py): after matmul_operands.wgsl, before the core; defines A_CONV (0) and
// conv_word as matmul_a_patches.wgsl does, for products whose A is stored as it is read. No bindings.

const A_CONV: u32 = 0u;

// Never called: every use is behind `A_CONV == 1u`.
fn conv_word(r: u32, j: u32) -> vec2<f32> { return vec2<f32>(0.0); }
