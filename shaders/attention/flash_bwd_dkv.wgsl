// Fused causal attention backward, dK and dV (flash.wgsl): grid [ceil(T / WG), B * H], thread t of
// workgroup (x, z) owns key j = x * WG + t; per tile of BC queries (q to tile_x, dO to tile_y, their
// lse and Dsum to tile_l, tile_d), starting at the tile that holds the workgroup's first key (the
// earlier ones see none of its keys), for each query i >= j of the tile:
//   P_ij = exp((s_ij - lse_i) * SCALE),  dV_j += P_ij dO_i,
//   dS_ij = P_ij (dO_i . v_j - Dsum_i) SCALE,  dK_j += dS_ij q_i,
// in f32 (P and dS never rounded to h), stored h once into dqkv's k and v thirds.
@group(0) @binding(0) var<storage, read> qkv: array<HW>;        // [B*T, 3D]
@group(0) @binding(1) var<storage, read> dO: array<HW>;         // [B*T, D]
@group(0) @binding(2) var<storage, read> lse: array<f32>;       // [B*H*T]
@group(0) @binding(3) var<storage, read> Dsum: array<f32>;      // [B*H*T]
@group(0) @binding(4) var<storage, read_write> dqkv: array<HW>;  // [B*T, 3D]: this kernel, the k and v thirds
@group(0) @binding(5) var<storage, read_write> flags: array<atomic<u32>>;

// Queries i0 .. i0 + BC - 1 of batch-head z (zeros past T): q to tile_x, dO to tile_y, lse and Dsum.
fn load_q(b: u32, h: u32, z: u32, i0: u32, t: u32) {
  let half = DH / 2u;
  for (var w = t; w < BC * half; w += WG) {
    let r = w / half;
    let c = 2u * (w % half);
    var q = vec2<f32>(0.0);
    var g = vec2<f32>(0.0);
    if (i0 + r < T) {
      q = h_unpack(qkv[qkv_word(b, i0 + r, 0u, h, c)]);
      g = h_unpack(dO[o_word(b, i0 + r, h, c)]);
    }
    tile_x[tile_at(r, c)] = q.x;
    tile_x[tile_at(r, c + 1u)] = q.y;
    tile_y[tile_at(r, c)] = g.x;
    tile_y[tile_at(r, c + 1u)] = g.y;
  }
  for (var r = t; r < BC; r += WG) {
    var L = 0.0;
    var Di = 0.0;
    if (i0 + r < T) {
      L = lse[z * T + i0 + r];
      Di = Dsum[z * T + i0 + r];
    }
    tile_l[r] = L;
    tile_d[r] = Di;
  }
}

@compute @workgroup_size(WG)
fn flash_bwd_dkv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let z = wg.y;
  let b = z / H;
  let h = z % H;
  let k0 = wg.x * WG;
  let j = k0 + lid.x;
  let live = j < T;
  var k: array<f32, DMAX>;
  var v: array<f32, DMAX>;
  var dk: array<f32, DMAX>;
  var dv: array<f32, DMAX>;
  for (var c = 0u; c < DH; c += 2u) {
    var kv = vec2<f32>(0.0);
    var vv = vec2<f32>(0.0);
    if (live) {
      kv = h_unpack(qkv[qkv_word(b, j, 1u, h, c)]);
      vv = h_unpack(qkv[qkv_word(b, j, 2u, h, c)]);
    }
    k[c] = kv.x;
    k[c + 1u] = kv.y;
    v[c] = vv.x;
    v[c + 1u] = vv.y;
    dk[c] = 0.0;
    dk[c + 1u] = 0.0;
    dv[c] = 0.0;
    dv[c + 1u] = 0.0;
  }
  for (var i0 = k0 - k0 % BC; i0 < T; i0 += BC) {
    load_q(b, h, z, i0, lid.x);
    workgroupBarrier();
    if (live) {
      let n = min(BC, T - i0);
      for (var r = select(0u, j - i0, j > i0); r < n; r++) {  // queries i = i0 + r >= j
        var s = 0.0;
        for (var c = 0u; c < DH; c++) { s += tile_x[tile_at(r, c)] * k[c]; }
        let p = exp((s - tile_l[r]) * SCALE);
        var dp = 0.0;
        for (var c = 0u; c < DH; c++) { dp += tile_y[tile_at(r, c)] * v[c]; }
        let ds = p * (dp - tile_d[r]) * SCALE;
        for (var c = 0u; c < DH; c++) {
          dv[c] += p * tile_y[tile_at(r, c)];
          dk[c] += ds * tile_x[tile_at(r, c)];
        }
      }
    }
    workgroupBarrier();
  }
  if (!live) { return; }
  var bad = false;
  for (var c = 0u; c < DH; c += 2u) {
    let kw = vec2<f32>(dk[c], dk[c + 1u]);
    let vw = vec2<f32>(dv[c], dv[c + 1u]);
    bad = bad || h_overflows(kw.x) || h_overflows(kw.y) || h_overflows(vw.x) || h_overflows(vw.y);
    dqkv[qkv_word(b, j, 1u, h, c)] = h_pack(kw);
    dqkv[qkv_word(b, j, 2u, h, c)] = h_pack(vw);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
