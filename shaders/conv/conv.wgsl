// Shared by the image kernels (im2col, col2im, maxpool_*, avgpool_*; before the entry file): the
// geometry and the index arithmetic of the pixel-row layout. No bindings.
// An image batch [B, C, H, W] is the h matrix [B*H*W, C] of its pixels, row (b*H + h)*W + w; a
// window (kernel KH x KW, strides SH, SW, zero or -inf padding PH, PW) gives output pixel
// (b, oh, ow) of [B*OH*OW, ...] from input rows ih = oh*SH - PH + kh, iw = ow*SW - PW + kw.
// The pools set KH = KW = K, SH = SW = S, PH = PW = P.
override B: u32;
override C: u32;
override H: u32;
override W: u32;
override KH: u32;
override KW: u32;
override SH: u32;
override SW: u32;
override PH: u32;
override PW: u32;
override OH: u32;  // (H + 2 PH - KH) / SH + 1
override OW: u32;

fn c_words() -> u32 { return (C + 1u) / 2u; }  // words of a pixel row

// Input coordinate o*s - p + k of window position o and tap k, or -1 outside [0, n).
fn window_coord(o: u32, k: u32, s: u32, p: u32, n: u32) -> i32 {
  let i = i32(o * s + k) - i32(p);
  return select(-1, i, i >= 0 && i < i32(n));
}

// The window positions o in [lo, hi) whose taps (o*s - p .. o*s - p + k - 1) cover input
// coordinate i: at most ceil(k / s) of them.
fn covering(i: u32, k: u32, s: u32, p: u32, n_out: u32) -> vec2<u32> {
  let first = i32(i + p) - i32(k) + 1;  // the smallest o*s
  let lo = select(0u, (u32(first) + s - 1u) / s, first > 0);
  return vec2<u32>(lo, min(n_out, (i + p) / s + 1u));
}

// (b, oh, ow) of output pixel row r, and (b, ih, iw) of input pixel row r.
fn out_pixel(r: u32) -> vec3<u32> { return vec3<u32>(r / (OH * OW), (r / OW) % OH, r % OW); }
fn in_pixel(r: u32) -> vec3<u32> { return vec3<u32>(r / (H * W), (r / W) % H, r % W); }
