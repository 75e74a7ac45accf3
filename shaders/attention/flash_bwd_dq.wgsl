// Fused causal attention backward, dQ (flash.wgsl): grid [ceil(T / WG), B * H], thread t of
// workgroup (x, z) owns query i = x * WG + t; per tile of BC keys (k to tile_x, v to tile_y), for
// each visible key j <= i, P recomputed from the forward's lse and the rest in f32:
//   P_ij = exp((s_ij - lse_i) * SCALE),  dS_ij = P_ij (dO_i . v_j - Dsum_i) SCALE,  dQ_i += dS_ij k_j,
// stored h once into dqkv's q third (neither P nor dS is ever rounded to h).
@group(0) @binding(0) var<storage, read> qkv: array<HW>;        // [B*T, 3D]
@group(0) @binding(1) var<storage, read> dO: array<HW>;         // [B*T, D]
@group(0) @binding(2) var<storage, read> lse: array<f32>;       // [B*H*T]
@group(0) @binding(3) var<storage, read> Dsum: array<f32>;      // [B*H*T]
@group(0) @binding(4) var<storage, read_write> dqkv: array<HW>;  // [B*T, 3D]: this kernel, the q third
@group(0) @binding(5) var<storage, read_write> flags: array<atomic<u32>>;

// Keys j0 .. j0 + BC - 1 of head h (zeros past T): k to tile_x, v to tile_y.
fn load_kv(b: u32, h: u32, j0: u32, t: u32) {
  let half = DH / 2u;
  for (var w = t; w < BC * half; w += WG) {
    let r = w / half;
    let c = 2u * (w % half);
    var k = vec2<f32>(0.0);
    var v = vec2<f32>(0.0);
    if (j0 + r < T) {
      k = h_unpack(qkv[qkv_word(b, j0 + r, 1u, h, c)]);
      v = h_unpack(qkv[qkv_word(b, j0 + r, 2u, h, c)]);
    }
    tile_x[tile_at(r, c)] = k.x;
    tile_x[tile_at(r, c + 1u)] = k.y;
    tile_y[tile_at(r, c)] = v.x;
    tile_y[tile_at(r, c + 1u)] = v.y;
  }
}

@compute @workgroup_size(WG)
fn flash_bwd_dq(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let z = wg.y;
  let b = z / H;
  let h = z % H;
  let q0 = wg.x * WG;
  let i = q0 + lid.x;
  let live = i < T;
  var q: array<f32, DMAX>;
  var g: array<f32, DMAX>;
  var dq: array<f32, DMAX>;
  var L = 0.0;
  var Di = 0.0;
  if (live) {
    L = lse[z * T + i];
    Di = Dsum[z * T + i];
  }
  for (var c = 0u; c < DH; c += 2u) {
    var qv = vec2<f32>(0.0);
    var gv = vec2<f32>(0.0);
    if (live) {
      qv = h_unpack(qkv[qkv_word(b, i, 0u, h, c)]);
      gv = h_unpack(dO[o_word(b, i, h, c)]);
    }
    q[c] = qv.x;
    q[c + 1u] = qv.y;
    g[c] = gv.x;
    g[c + 1u] = gv.y;
    dq[c] = 0.0;
    dq[c + 1u] = 0.0;
  }
  let last = min(q0 + WG, T) - 1u;
  for (var j0 = 0u; j0 <= last; j0 += BC) {
    load_kv(b, h, j0, lid.x);
    workgroupBarrier();
    if (live && j0 <= i) {
      let n = min(BC, i + 1u - j0);
      for (var r = 0u; r < n; r++) {
        var s = 0.0;
        for (var c = 0u; c < DH; c++) { s += q[c] * tile_x[tile_at(r, c)]; }
        var dp = 0.0;
        for (var c = 0u; c < DH; c++) { dp += g[c] * tile_y[tile_at(r, c)]; }
        let ds = exp((s - L) * SCALE) * (dp - Di) * SCALE;
        for (var c = 0u; c < DH; c++) { dq[c] += ds * tile_x[tile_at(r, c)]; }
      }
    }
    workgroupBarrier();
  }
  if (!live) { return; }
  var bad = false;
  for (var c = 0u; c < DH; c += 2u) {
    let v = vec2<f32>(dq[c], dq[c + 1u]);
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    dqkv[qkv_word(b, i, 0u, h, c)] = h_pack(v);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
