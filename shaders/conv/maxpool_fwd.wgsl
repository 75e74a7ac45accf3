// Max pooling (conv.wgsl's geometry with KH = KW = K, SH = SW = S, PH = PW = P): Y [B*OH*OW, C] the
// maximum of each window, padding -inf (a padded position never wins); argmax [B*OH*OW*C] the input
// pixel row (b*H + ih)*W + iw of the winner, the first in row-major window order on ties
// (PyTorch's rule). Values compared exactly (h_load_bits) and copied as bits. A thread per word of Y.
@group(0) @binding(0) var<storage, read> X: array<HWLoad>;
@group(0) @binding(1) var<storage, read_write> Y: array<HWLoad>;
@group(0) @binding(2) var<storage, read_write> argmax: array<u32>;

@compute @workgroup_size(64)
fn maxpool_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let cw = c_words();
  for (var t = gid.x; t < B * OH * OW * cw; t += nwg.x * 64u) {
    let r = t / cw;
    let j = t % cw;
    let o = out_pixel(r);
    var best = vec2<f32>();
    var at = vec2<u32>();  // the winners' pixel rows
    var wa = HWLoad();  // the words holding them
    var wb = HWLoad();
    var found = false;
    for (var kh = 0u; kh < KH; kh++) {
      let ih = window_coord(o.y, kh, SH, PH, H);
      if (ih < 0) { continue; }
      for (var kw = 0u; kw < KW; kw++) {
        let iw = window_coord(o.z, kw, SW, PW, W);
        if (iw < 0) { continue; }
        let p = (o.x * H + u32(ih)) * W + u32(iw);
        let w = X[p * cw + j];
        let v = bitcast<vec2<f32>>(h_load_bits(w));
        if (!found || v.x > best.x) { best.x = v.x; at.x = p; wa = w; }
        if (!found || v.y > best.y) { best.y = v.y; at.y = p; wb = w; }
        found = true;
      }
    }
    var second = HWLoad();  // the padding half of an odd C stays zero
    if (2u * j + 1u < C) {
      second = h_half(wb, true);
      argmax[r * C + 2u * j + 1u] = at.y;
    }
    Y[t] = h_low_halves(wa, second);
    argmax[r * C + 2u * j] = at.x;
  }
}
