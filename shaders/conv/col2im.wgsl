// col2im: im2col's adjoint, dX [B*H*W, C] from dP [B*OH*OW, KH*KW*C]: each input element gets the
// f32 sum of the dP entries im2col copied it to, gathered (a thread per word of dX, grid-stride;
// taps in the order kh, kw: no atomics, the same bits every run), stored once in the activation
// format; a value that does not fit raises the overflow flag.
@group(0) @binding(0) var<storage, read> dP: array<HW>;
@group(0) @binding(1) var<storage, read_write> dX: array<HW>;
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>>;

// dP's column e of patch row r (rows of KH*KW*C values: an odd C splits pairs across words).
fn dp_at(r: u32, e: u32) -> f32 {
  let v = h_unpack(dP[r * ((KH * KW * C + 1u) / 2u) + e / 2u]);
  return select(v.x, v.y, (e & 1u) == 1u);
}

@compute @workgroup_size(64)
fn col2im(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let cw = c_words();
  var bad = false;
  for (var t = gid.x; t < B * H * W * cw; t += nwg.x * 64u) {
    let p = in_pixel(t / cw);
    let c = 2u * (t % cw);
    var s = vec2<f32>();
    for (var kh = 0u; kh < KH; kh++) {
      let y = i32(p.y + PH) - i32(kh);  // oh * SH
      if (y < 0 || u32(y) % SH != 0u || u32(y) / SH >= OH) { continue; }
      for (var kw = 0u; kw < KW; kw++) {
        let x = i32(p.z + PW) - i32(kw);  // ow * SW
        if (x < 0 || u32(x) % SW != 0u || u32(x) / SW >= OW) { continue; }
        let r = (p.x * OH + u32(y) / SH) * OW + u32(x) / SW;
        let e = (kh * KW + kw) * C + c;
        s.x += dp_at(r, e);
        if (c + 1u < C) { s.y += dp_at(r, e + 1u); }
      }
    }
    bad = bad || h_overflows(s.x) || h_overflows(s.y);
    dX[t] = h_pack(s);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
