// Contract (webmp/wgsl.py): after matmul_operands.wgsl, before the core; defines A_CONV (1),
// ConvTap, conv_coord, conv_tap, conv_load and conv_word. No bindings.
// A convolution's products read A as its implicit patches; every other product takes
// matmul_a_dense.wgsl, which defines A_CONV 0 and a conv_word that is never called (the
// patch addressing, inlined once per row of a register block, was code that Chromium's shader
// compiler worked through in every matmul pipeline).
//
// Implicit im2col (a convolution as a matmul: webmp.ops.conv.implicit_patches). A is bound to an
// image batch X [B*CONV_H*CONV_W, CONV_C] (pixel rows, channels-last: shaders/conv/conv.wgsl's
// layout) and read as its patch matrix P [B*CONV_OH*CONV_OW, CONV_KH*CONV_KW*CONV_C], the one
// im2col.wgsl stores: P[r, (kh*KW + kw)*C + c] = X[(b*H + ih)*W + iw, c] for output pixel
// r = (b*OH + oh)*OW + ow, ih = oh*SH - PH + kh, iw = ow*SW - PW + kw, zero outside the image and
// in the padding half of an odd row. The values are those the matmul reads from P, in the same
// places, so the products are the same bits; P is never stored. P is A [M, K] (a convolution's
// forward) or, with TRANS_A, [K, M] (its weight gradient P^T dY). No batches (the batch constants
// keep their defaults). The geometry is matmul_operands.wgsl's CONV_* overrides.
const A_CONV: u32 = 1u;

// The word of X holding channel c of the input pixel that tap t (kh*KW + kw) of output pixel r
// reads, and whether that pixel lies inside the image (else the tap reads the zero padding).
struct ConvTap { word: u32, inside: bool }
fn conv_coord(o: u32, k: u32, s: u32, p: u32) -> i32 { return i32(o * s + k) - i32(p); }
fn conv_tap(r: u32, t: u32, c: u32) -> ConvTap {
  let q = r / CONV_OW;
  let ih = conv_coord(q % CONV_OH, t / CONV_KW, CONV_SH, CONV_PH);
  let iw = conv_coord(r % CONV_OW, t % CONV_KW, CONV_SW, CONV_PW);
  let inside = ih >= 0 && ih < i32(CONV_H) && iw >= 0 && iw < i32(CONV_W);
  let pixel = ((q / CONV_OH) * CONV_H + u32(ih)) * CONV_W + u32(iw);
  return ConvTap(pixel * ((CONV_C + 1u) / 2u) + c / 2u, inside);
}

// The word a tap reads as two f32 values, zero in the padding. A load at a clamped index and a
// select rather than a branch: lanes whose taps differ take no separate paths.
fn conv_load(tap: ConvTap) -> vec2<f32> {
  let w = h_load(A[select(0u, tap.word, tap.inside)]);
  return select(vec2<f32>(0.0), w, tap.inside);
}

// Word j of row r of the implicit patch matrix (columns 2j and 2j + 1) as two f32 values. With an
// even C both lie in one word of one pixel of X: a single load; with an odd C each value is the
// half of its own pixel's word that holds its channel, and the padding half of an odd row is zero.
fn conv_word(r: u32, j: u32) -> vec2<f32> {
  let e = 2u * j;
  if (CONV_C % 2u == 0u) { return conv_load(conv_tap(r, e / CONV_C, e % CONV_C)); }
  let c0 = e % CONV_C;
  let c1 = (e + 1u) % CONV_C;
  let v0 = conv_load(conv_tap(r, e / CONV_C, c0));
  let v1 = conv_load(conv_tap(r, (e + 1u) / CONV_C, c1));
  let second = select(v1.x, v1.y, (c1 & 1u) == 1u);
  return vec2<f32>(select(v0.x, v0.y, (c0 & 1u) == 1u), select(0.0, second, e + 1u < CONV_KH * CONV_KW * CONV_C));
}
