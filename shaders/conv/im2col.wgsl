// im2col: the patch matrix P [B*OH*OW, KH*KW*C] of an image batch X [B*H*W, C] (conv.wgsl's layout),
// P[(b*OH + oh)*OW + ow, (kh*KW + kw)*C + c] = X[(b*H + ih)*W + iw, c], zero outside the image, so a
// convolution is the matmul P W with W [KH*KW*C, OC]. The bits move, never converted. One thread
// per word of P (grid-stride); an odd KH*KW*C leaves each row's padding half zero.
@group(0) @binding(0) var<storage, read> X: array<HWLoad>;
@group(0) @binding(1) var<storage, read_write> P: array<HWLoad>;

// Column e of the patch row of output pixel o, as the low half of a word (zero: padding).
fn patch_value(o: vec3<u32>, e: u32) -> HWLoad {
  let t = e / C;  // the tap kh*KW + kw
  let c = e % C;
  let ih = window_coord(o.y, t / KW, SH, PH, H);
  let iw = window_coord(o.z, t % KW, SW, PW, W);
  if (ih < 0 || iw < 0) { return HWLoad(); }
  let w = X[((o.x * H + u32(ih)) * W + u32(iw)) * c_words() + c / 2u];
  return h_half(w, (c & 1u) == 1u);
}

@compute @workgroup_size(64)
fn im2col(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = KH * KW * C;
  let pw = (n + 1u) / 2u;  // words a row of P
  for (var t = gid.x; t < B * OH * OW * pw; t += nwg.x * 64u) {
    let o = out_pixel(t / pw);
    let e = 2u * (t % pw);
    var second = HWLoad();
    if (e + 1u < n) { second = patch_value(o, e + 1u); }
    P[t] = h_low_halves(patch_value(o, e), second);
  }
}
