// Fused causal attention forward (flash.wgsl): grid [ceil(T / WG), B * H]; thread t of workgroup
// (x, z) owns query i = x * WG + t of batch-head z. Per tile of BC keys (k to tile_x, v to tile_y)
// an online softmax: the tile's scores s_j (j <= i), the running max m over all scores so far, the
// running sum l and the unnormalised output o rescaled by alpha = exp((m_old - m) * SCALE) when m
// grows:
//   l = alpha l + sum_j exp((s_j - m) * SCALE),   o = alpha o + sum_j exp((s_j - m) * SCALE) v_j,
// and at the end O_i = o / l (stored h once: neither the weights nor P are ever rounded to h) and
// lse_i = m + log(l) / SCALE, the row's log-sum-exp in units of raw scores, so that the backward
// pass recomputes P_ij = exp((s_ij - lse_i) * SCALE).
@group(0) @binding(0) var<storage, read> qkv: array<HW>;       // [B*T, 3D]
@group(0) @binding(1) var<storage, read_write> O: array<HW>;   // [B*T, D]
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;  // [B*H*T]: row z * T + i
@group(0) @binding(3) var<storage, read_write> flags: array<atomic<u32>>;

@compute @workgroup_size(WG)
fn flash_fwd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let z = wg.y;
  let b = z / H;
  let h = z % H;
  let q0 = wg.x * WG;
  let i = q0 + lid.x;
  let live = i < T;
  var q: array<vec4<f32>, DMAX4>;
  var o: array<vec4<f32>, DMAX4>;
  for (var c4 = 0u; c4 < DH4; c4++) {
    q[c4] = vec4<f32>(0.0);
    if (live) { q[c4] = qkv_quad(b, i, 0u, h, c4); }
    o[c4] = vec4<f32>(0.0);
  }
  var m = 0.0;
  var l = 0.0;
  var first = true;
  let last = min(q0 + WG, T) - 1u;  // the workgroup's last query: later tiles are wholly masked
  for (var j0 = 0u; j0 <= last; j0 += BC) {
    load_kv(b, h, j0, lid.x);
    workgroupBarrier();
    if (live && j0 <= i) {
      let n = min(BC, i + 1u - j0);  // the tile's keys visible from query i
      var s: array<f32, BCMAX>;
      var mt = m;
      for (var r = 0u; r < n; r++) {
        var acc = 0.0;
        for (var c4 = 0u; c4 < DH4; c4++) { acc += dot(q[c4], tile_x[tile_at(r, c4)]); }
        s[r] = acc;
        if (first && r == 0u) { mt = acc; }
        mt = max(mt, acc);
      }
      var alpha = 0.0;  // the first tile: l and o are 0
      if (!first) { alpha = exp((m - mt) * SCALE); }
      l *= alpha;
      for (var c4 = 0u; c4 < DH4; c4++) { o[c4] *= alpha; }
      for (var r = 0u; r < n; r++) {
        let p = exp((s[r] - mt) * SCALE);
        l += p;
        for (var c4 = 0u; c4 < DH4; c4++) { o[c4] += p * tile_y[tile_at(r, c4)]; }
      }
      m = mt;
      first = false;
    }
    workgroupBarrier();
  }
  if (!live) { return; }
  var bad = false;
  for (var c4 = 0u; c4 < DH4; c4++) {
    let v = o[c4] / l;
    let w = o_word(b, i, h, 4u * c4);
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    O[w] = h_pack(v.xy);
    if (has_hi(c4)) {
      bad = bad || h_overflows(v.z) || h_overflows(v.w);
      O[w + 1u] = h_pack(v.zw);
    }
  }
  lse[z * T + i] = m + log(l) / SCALE;
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
