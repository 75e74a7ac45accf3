// Contract (webmp/wgsl.py): first file of every kernel (before any declaration); no bindings.
// bf16 storage path (`--precision bf16`): two bf16 values per u32 (low half first), the layout of
// the f16 paths, converted in integer arithmetic on the f32 bits (so NaN and infinity survive a
// compiler that assumes them away): f32 -> bf16 rounds to nearest, ties to even, NaN stays NaN
// (quiet, its sign kept: ml_dtypes' bits, webmp.engine.formats); bf16 -> f32 is exact (the high
// half of the word). Arithmetic runs in f32. bf16 has f32's exponent range: no loss scaling.

alias HW = u32;
// |x| >= 0x7f7f8000 (half-way from bf16's largest finite value to 2^128) rounds to Inf, or is
// Inf or NaN: the activation cannot be stored
const H_OVERFLOW_BITS: u32 = 0x7f7f8000u;

fn bf16_bits(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let rounded = (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
  let nan = ((b >> 16u) & 0x8000u) | 0x7fc0u;
  return select(rounded, nan, (b & 0x7fffffffu) > 0x7f800000u);
}
fn h_unpack(w: HW) -> vec2<f32> { return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u)); }
fn h_pack(v: vec2<f32>) -> HW { return bf16_bits(v.x) | (bf16_bits(v.y) << 16u); }
// Four values, two words, stored at once (matmul_h_store4.wgsl).
alias HW4 = vec2<u32>;
fn h_pack4(v: vec4<f32>) -> HW4 { return vec2<u32>(h_pack(v.xy), h_pack(v.zw)); }
// A word of h values as read by the matmuls' operand loads (the same bits as HW).
alias HWLoad = u32;
fn h_load(w: HWLoad) -> vec2<f32> { return h_unpack(w); }
alias HWLoad2 = vec2<u32>;  // two consecutive words in one load (matmul_reg.wgsl's B_PAIRS)
alias HWLoad4 = vec4<u32>;  // four (matmul_b_quads.wgsl)
fn h_load2(w: HWLoad2) -> vec4<f32> { return vec4<f32>(h_unpack(w.x), h_unpack(w.y)); }
// Two words' first values as one word, and their second values (transpose_h.wgsl): bits, not values.
fn h_low_halves(a: HWLoad, b: HWLoad) -> HWLoad { return (a & 0xffffu) | (b << 16u); }
fn h_high_halves(a: HWLoad, b: HWLoad) -> HWLoad { return (a >> 16u) | (b & 0xffff0000u); }
fn h_round(x: f32) -> f32 { return bitcast<f32>(bf16_bits(x) << 16u); }
// The f32 bit patterns of a word's two values, exactly (webmp grad_hist reads them).
fn h_load_bits(w: HWLoad) -> vec2<u32> { return vec2<u32>(w << 16u, w & 0xffff0000u); }
