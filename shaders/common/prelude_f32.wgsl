// Contract (webmp/wgsl.py): first file of every kernel (before any declaration); no bindings.
// fp32 reference precision: the kernels written for packed f16 pairs store f32 pairs instead,
// so the very same kernel code runs with no f16 rounding anywhere.

alias HW = vec2<f32>;
const H_OVERFLOW_BITS: u32 = 0x7f800000u;  // Inf or NaN

fn h_unpack(w: HW) -> vec2<f32> { return w; }
fn h_pack(v: vec2<f32>) -> HW { return v; }
// Four values, two words, stored at once (matmul_h_store4.wgsl).
alias HW4 = vec4<f32>;
fn h_pack4(v: vec4<f32>) -> HW4 { return v; }
// A word of h values as read by the matmuls' operand loads (the same bits as HW).
alias HWLoad = vec2<f32>;
fn h_load(w: HWLoad) -> vec2<f32> { return w; }
alias HWLoad2 = vec4<f32>;  // two consecutive words in one load (matmul_reg.wgsl's B_PAIRS)
fn h_load2(w: HWLoad2) -> vec4<f32> { return w; }
// Two words' first values as one word, and their second values (transpose_h.wgsl).
fn h_low_halves(a: HWLoad, b: HWLoad) -> HWLoad { return vec2<f32>(a.x, b.x); }
fn h_high_halves(a: HWLoad, b: HWLoad) -> HWLoad { return vec2<f32>(a.y, b.y); }
fn h_round(x: f32) -> f32 { return x; }
// The f32 bit patterns of a word's two values, exactly (webmp grad_hist reads them).
fn h_load_bits(w: HWLoad) -> vec2<u32> { return bitcast<vec2<u32>>(w); }
