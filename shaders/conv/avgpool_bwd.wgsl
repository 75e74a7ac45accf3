// Average pooling's backward: dX [B*H*W, C] = the f32 sum of dY over the windows covering the pixel
// (in the order oh, ow) / (K*K), stored once in the activation format, overflow flagged. A thread
// per word of dX.
@group(0) @binding(0) var<storage, read> dY: array<HW>;
@group(0) @binding(1) var<storage, read_write> dX: array<HW>;
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>>;

@compute @workgroup_size(64)
fn avgpool_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let cw = c_words();
  var bad = false;
  for (var t = gid.x; t < B * H * W * cw; t += nwg.x * 64u) {
    let j = t % cw;
    let p = in_pixel(t / cw);
    let rh = covering(p.y, KH, SH, PH, OH);
    let rw = covering(p.z, KW, SW, PW, OW);
    var s = vec2<f32>();
    for (var oh = rh.x; oh < rh.y; oh++) {
      for (var ow = rw.x; ow < rw.y; ow++) { s += h_unpack(dY[((p.x * OH + oh) * OW + ow) * cw + j]); }
    }
    s = s / f32(KH * KW);
    if (2u * j + 1u >= C) { s.y = 0.0; }
    bad = bad || h_overflows(s.x) || h_overflows(s.y);
    dX[t] = h_pack(s);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
