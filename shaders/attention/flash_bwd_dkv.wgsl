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

// Quad c4 of row t of dO (zeros past the head).
fn do_quad(b: u32, t: u32, h: u32, c4: u32) -> vec4<f32> {
  let w = o_word(b, t, h, 4u * c4);
  var hi = vec2<f32>(0.0);
  if (has_hi(c4)) { hi = h_unpack(dO[w + 1u]); }
  return vec4<f32>(h_unpack(dO[w]), hi);
}

// Queries i0 .. i0 + BC - 1 of batch-head z (zeros past T): q to tile_x, dO to tile_y, lse and Dsum.
fn load_q(b: u32, h: u32, z: u32, i0: u32, t: u32) {
  for (var w = t; w < BC * DH4; w += WG) {
    let r = w / DH4;
    let c4 = w % DH4;
    var q = vec4<f32>(0.0);
    var g = vec4<f32>(0.0);
    if (i0 + r < T) {
      q = qkv_quad(b, i0 + r, 0u, h, c4);
      g = do_quad(b, i0 + r, h, c4);
    }
    tile_x[w] = q;
    tile_y[w] = g;
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
  var k: array<vec4<f32>, DMAX4>;
  var v: array<vec4<f32>, DMAX4>;
  var dk: array<vec4<f32>, DMAX4>;
  var dv: array<vec4<f32>, DMAX4>;
  for (var c4 = 0u; c4 < DH4; c4++) {
    k[c4] = vec4<f32>(0.0);
    v[c4] = vec4<f32>(0.0);
    if (live) {
      k[c4] = qkv_quad(b, j, 1u, h, c4);
      v[c4] = qkv_quad(b, j, 2u, h, c4);
    }
    dk[c4] = vec4<f32>(0.0);
    dv[c4] = vec4<f32>(0.0);
  }
  for (var i0 = k0 - k0 % BC; i0 < T; i0 += BC) {
    load_q(b, h, z, i0, lid.x);
    workgroupBarrier();
    if (live) {
      let n = min(BC, T - i0);
      for (var r = select(0u, j - i0, j > i0); r < n; r++) {  // queries i = i0 + r >= j
        var s = 0.0;
        var dp = 0.0;
        for (var c4 = 0u; c4 < DH4; c4++) {
          s += dot(tile_x[tile_at(r, c4)], k[c4]);
          dp += dot(tile_y[tile_at(r, c4)], v[c4]);
        }
        let p = exp((s - tile_l[r]) * SCALE);
        let ds = p * (dp - tile_d[r]) * SCALE;
        for (var c4 = 0u; c4 < DH4; c4++) {
          dv[c4] += p * tile_y[tile_at(r, c4)];
          dk[c4] += ds * tile_x[tile_at(r, c4)];
        }
      }
    }
    workgroupBarrier();
  }
  if (!live) { return; }
  var bad = false;
  for (var c4 = 0u; c4 < DH4; c4++) {
    let kw = dk[c4];
    let vw = dv[c4];
    let wk = qkv_word(b, j, 1u, h, 4u * c4);
    let wv = qkv_word(b, j, 2u, h, 4u * c4);
    bad = bad || h_overflows(kw.x) || h_overflows(kw.y) || h_overflows(vw.x) || h_overflows(vw.y);
    dqkv[wk] = h_pack(kw.xy);
    dqkv[wv] = h_pack(vw.xy);
    if (has_hi(c4)) {
      bad = bad || h_overflows(kw.z) || h_overflows(kw.w) || h_overflows(vw.z) || h_overflows(vw.w);
      dqkv[wk + 1u] = h_pack(kw.zw);
      dqkv[wv + 1u] = h_pack(vw.zw);
    }
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
