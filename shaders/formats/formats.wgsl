// Number formats narrower than f16 (no bindings): f32 -> bf16, E4M3 (float8_e4m3fn) and E5M2
// (float8_e5m2) codes and back, all in integer arithmetic on the f32 bit pattern, so that NaN and
// infinity (which WGSL lets a compiler assume away for f32 values) survive, and subnormals are
// neither flushed nor produced by f32 arithmetic. The casts are ml_dtypes' bit for bit:
// round to nearest, ties to even; NaN -> the format's NaN with the sign kept (payload dropped);
// beyond the largest finite value -> with `saturate` that value (infinities too), else the format's
// infinity (bf16, E5M2) or NaN (E4M3, which has no infinity). -0 stays -0.

struct NarrowFormat {
  exp_bits: u32,
  man_bits: u32,
  bias: u32,
  max_finite: u32,  // the largest finite code (sign clear)
  overflow: u32,    // the code past max_finite: infinity, or NaN where the format has none
  nan: u32,         // the NaN the casts return (sign clear)
}

const FORMAT_BF16: u32 = 0u;
const FORMAT_E4M3: u32 = 1u;
const FORMAT_E5M2: u32 = 2u;

fn narrow_format(f: u32) -> NarrowFormat {
  if (f == FORMAT_E4M3) { return NarrowFormat(4u, 3u, 7u, 0x7eu, 0x7fu, 0x7fu); }
  if (f == FORMAT_E5M2) { return NarrowFormat(5u, 2u, 15u, 0x7bu, 0x7cu, 0x7eu); }
  return NarrowFormat(8u, 7u, 127u, 0x7f7fu, 0x7f80u, 0x7fc0u);
}

// The code of the f32 with bit pattern `bits` in format `f` (its sign at bit exp_bits + man_bits).
fn f32_bits_to_narrow(bits: u32, f: u32, saturate: bool) -> u32 {
  let fmt = narrow_format(f);
  let sign = (bits >> 31u) << (fmt.exp_bits + fmt.man_bits);
  let e = (bits >> 23u) & 0xffu;
  let m = bits & 0x7fffffu;
  if (e == 0xffu) {
    if (m != 0u) { return sign | fmt.nan; }
    return sign | select(fmt.overflow, fmt.max_finite, saturate);
  }
  // significand with its implicit bit (none for f32 subnormals, whose exponent is that of e = 1)
  let sig = select(m | 0x800000u, m, e == 0u);
  // the target exponent field; below 1 the value is subnormal there: shift further, field 0
  let te = i32(max(e, 1u)) - 127 + i32(fmt.bias);
  let shift = min(u32(i32(23u - fmt.man_bits) + max(1 - te, 0)), 31u);
  // (field - 1) << man_bits + sig >> shift: the implicit bit, shifted, adds the 1 back
  var code = (u32(max(te, 1) - 1) << fmt.man_bits) + (sig >> shift);
  let lost = sig & ((1u << shift) - 1u);
  let half = 1u << (shift - 1u);
  if (lost > half || (lost == half && (code & 1u) == 1u)) { code += 1u; }
  if (code > fmt.max_finite) { code = select(fmt.overflow, fmt.max_finite, saturate); }
  return sign | code;
}

// The f32 bit pattern of the code `c` of format `f` (exact: every such value is an f32).
fn narrow_to_f32_bits(c: u32, f: u32) -> u32 {
  let fmt = narrow_format(f);
  let width = fmt.exp_bits + fmt.man_bits;
  let sign = ((c >> width) & 1u) << 31u;
  let mag = c & ((1u << width) - 1u);
  if (f == FORMAT_BF16) { return (c & 0xffffu) << 16u; }
  if (mag == fmt.nan || (f == FORMAT_E5M2 && mag > fmt.overflow)) { return sign | 0x7fc00000u; }
  if (f == FORMAT_E5M2 && mag == fmt.overflow) { return sign | 0x7f800000u; }
  let e = mag >> fmt.man_bits;
  var m = mag & ((1u << fmt.man_bits) - 1u);
  if (e == 0u) {
    if (m == 0u) { return sign; }
    // subnormal: normalise (m < 2^man_bits, so at most man_bits shifts)
    var ex = 1 - i32(fmt.bias);
    while ((m & (1u << fmt.man_bits)) == 0u) { m <<= 1u; ex -= 1; }
    m &= (1u << fmt.man_bits) - 1u;
    return sign | (u32(ex + 127) << 23u) | (m << (23u - fmt.man_bits));
  }
  return sign | (u32(i32(e) - i32(fmt.bias) + 127) << 23u) | (m << (23u - fmt.man_bits));
}
