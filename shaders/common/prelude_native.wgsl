// Contract (webmp/wgsl.py): first file of every kernel (before any declaration); no bindings.
// f16 storage path with shader-f16: activations and working weights are stored as vec2<f16>
// (two values per 32-bit word, low half first). Arithmetic on them is done in f32: an f16*f16
// product is exact in f32, so matmuls get f32 accumulation of exact products.
enable f16;

alias HW = vec2<f16>;   // one stored word: two f16 values
const H_OVERFLOW_BITS: u32 = 0x477fe000u;  // |x| >= 65504 (f16 max), Inf or NaN

fn h_unpack(w: HW) -> vec2<f32> { return vec2<f32>(w); }
fn h_pack(v: vec2<f32>) -> HW { return HW(v); }
// Four values, two words, stored at once (matmul_h_store4.wgsl): u32 words, because lavapipe
// stores a vec2<f16> as two 16-bit stores (naga cannot bitcast f16 vectors to u32, so the words are
// packed by pack2x16float, as the emulated path stores every h value: the same bits).
alias HW4 = vec2<u32>;
fn h_pack4(v: vec4<f32>) -> HW4 { return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw)); }
// A word of h values as read by the matmuls' operand loads (the same bits as HW).
alias HWLoad = u32;
fn h_load(w: HWLoad) -> vec2<f32> { return unpack2x16float(w); }
alias HWLoad2 = vec2<u32>;  // two consecutive words in one load (matmul_reg.wgsl's B_PAIRS)
alias HWLoad4 = vec4<u32>;  // four (matmul_b_quads.wgsl; none on the fp32 path)
fn h_load2(w: HWLoad2) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }
// Two words' first values as one word, and their second values (transpose_h.wgsl): bits, not values.
fn h_low_halves(a: HWLoad, b: HWLoad) -> HWLoad { return (a & 0xffffu) | (b << 16u); }
fn h_high_halves(a: HWLoad, b: HWLoad) -> HWLoad { return (a >> 16u) | (b & 0xffff0000u); }
fn h_round(x: f32) -> f32 { return f16_round(x); }  // not f32(f16(x)): see common.wgsl
// The f32 bit patterns of a word's two values, exactly (webmp grad_hist reads them).
fn h_load_bits(w: HWLoad) -> vec2<u32> { return vec2<u32>(f16_bits_to_f32(w & 0xffffu), f16_bits_to_f32(w >> 16u)); }
