// Average pooling (PyTorch's AvgPool2d defaults: count_include_pad, so the divisor is always K*K and
// padding counts as zeros): Y [B*OH*OW, C] = the f32 sum over the window in row-major order / (K*K),
// stored once in the activation format, overflow flagged. A thread per word of Y.
@group(0) @binding(0) var<storage, read> X: array<HW>;
@group(0) @binding(1) var<storage, read_write> Y: array<HW>;
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>>;

@compute @workgroup_size(64)
fn avgpool_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let cw = c_words();
  var bad = false;
  for (var t = gid.x; t < B * OH * OW * cw; t += nwg.x * 64u) {
    let j = t % cw;
    let o = out_pixel(t / cw);
    var s = vec2<f32>();
    for (var kh = 0u; kh < KH; kh++) {
      let ih = window_coord(o.y, kh, SH, PH, H);
      if (ih < 0) { continue; }
      for (var kw = 0u; kw < KW; kw++) {
        let iw = window_coord(o.z, kw, SW, PW, W);
        if (iw < 0) { continue; }
        s += h_unpack(X[((o.x * H + u32(ih)) * W + u32(iw)) * cw + j]);
      }
    }
    s = s / f32(KH * KW);
    if (2u * j + 1u >= C) { s.y = 0.0; }
    bad = bad || h_overflows(s.x) || h_overflows(s.y);
    Y[t] = h_pack(s);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
