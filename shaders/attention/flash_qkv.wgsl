// Contract (webmp/wgsl.py): no bindings; after flash.wgsl; expects the kernel file to bind `qkv`
// (flash_fwd, flash_bwd_dkv, flash_bwd_dq). A row's quads of qkv, and the key/value tiles.
// Quad c4 of head h's third `part` (0 q, 1 k, 2 v) of row t of qkv (zeros past the head).
fn qkv_quad(b: u32, t: u32, part: u32, h: u32, c4: u32) -> vec4<f32> {
  let w = qkv_word(b, t, part, h, 4u * c4);
  var hi = vec2<f32>(0.0);
  if (has_hi(c4)) { hi = h_unpack(qkv[w + 1u]); }
  return vec4<f32>(h_unpack(qkv[w]), hi);
}

// Keys j0 .. j0 + BC - 1 of head h (zeros past T): k to tile_x, v to tile_y.
fn load_kv(b: u32, h: u32, j0: u32, t: u32) {
  for (var w = t; w < BC * DH4; w += WG) {
    let r = w / DH4;
    let c4 = w % DH4;
    var k = vec4<f32>(0.0);
    var v = vec4<f32>(0.0);
    if (j0 + r < T) {
      k = qkv_quad(b, j0 + r, 1u, h, c4);
      v = qkv_quad(b, j0 + r, 2u, h, c4);
    }
    tile_x[w] = k;
    tile_y[w] = v;
  }
}
