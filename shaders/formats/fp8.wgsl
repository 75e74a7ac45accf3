// fp8 training's per-tensor scaling (no bindings; after formats.wgsl): `--precision fp8` quantises a
// layer's input and weight to E4M3 and its output gradient to E5M2 where its matmuls read them, each
// tensor with its own power-of-two scale 2^e, and stores the dequantised value q * 2^-e in the bf16
// activation format: exact, since an fp8 value times a power of two in the clamped range below is a
// normal f32 with at most 3 significand bits. A matmul on those values computes exactly what an fp8
// GEMM followed by descaling computes, with no epilogue. Everything here is integer arithmetic on
// f32 bit patterns, so GPU and numpy (webmp.engine.fp8) agree bit for bit.

// e is clamped so that x * 2^e and q * 2^-e stay normal f32s (or exactly 0): the largest fp8
// value (< 2^16) times 2^111 is below f32's max, and the smallest (2^-16) times 2^-100 above its
// smallest normal; an f32 subnormal times 2^100 is far below half the smallest fp8 value.
const FP8_E_MIN: i32 = -111;
const FP8_E_MAX: i32 = 100;

// The bits of x (bit pattern) quantised with scale 2^e: round(x * 2^e) to `fmt` saturating, times 2^-e.
fn fp8_quantise_bits(bits: u32, e: i32, fmt: u32) -> u32 {
  let sign = bits & 0x80000000u;
  let field = i32((bits >> 23u) & 0xffu);
  var scaled = bits;  // infinities and NaN as they are (the cast saturates / keeps NaN)
  if (field == 0) {
    scaled = sign;  // zero, or an f32 subnormal: 0 once scaled and rounded
  } else if (field < 255) {
    let f = field + e;
    if (f < 1) { scaled = sign; }
    else if (f > 254) { scaled = sign | 0x7f800000u; }
    else { scaled = (bits & 0x807fffffu) | (u32(f) << 23u); }
  }
  let q = narrow_to_f32_bits(f32_bits_to_narrow(scaled, fmt, true), fmt);
  let qf = i32((q >> 23u) & 0xffu);
  if (qf == 0 || qf == 255) { return q; }  // +-0, or NaN
  return (q & 0x807fffffu) | (u32(qf - e) << 23u);
}

// The largest e with amax * 2^e <= the format's largest value (1.75 * 2^P for both: 448 = 1.75 * 2^8,
// 57344 = 1.75 * 2^15), less `margin`, clamped: Transformer Engine's scale fp8_max / amax / 2^margin
// rounded down to a power of two. amax_bits: |amax|'s bits, finite and nonzero.
fn fp8_scale_exponent(amax_bits: u32, fmt: u32, margin: i32) -> i32 {
  let p = select(8, 15, fmt == FORMAT_E5M2);
  let field = i32(amax_bits >> 23u);
  if (field == 0) { return FP8_E_MAX; }
  let over = select(0, 1, (amax_bits & 0x7fffffu) > 0x600000u);  // significand above 1.75
  return clamp(p - (field - 127) - over - margin, FP8_E_MIN, FP8_E_MAX);
}

// A tensor slot's format: slots come three a layer (input, weight: E4M3; output gradient: E5M2).
fn fp8_slot_format(slot: u32) -> u32 { return select(FORMAT_E4M3, FORMAT_E5M2, slot % 3u == 2u); }
