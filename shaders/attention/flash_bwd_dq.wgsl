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

// Quad c4 of row t of dO (zeros past the head).
fn do_quad(b: u32, t: u32, h: u32, c4: u32) -> vec4<f32> {
  let w = o_word(b, t, h, 4u * c4);
  var hi = vec2<f32>(0.0);
  if (has_hi(c4)) { hi = h_unpack(dO[w + 1u]); }
  return vec4<f32>(h_unpack(dO[w]), hi);
}

@compute @workgroup_size(WG)
fn flash_bwd_dq(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let z = wg.y;
  let b = z / H;
  let h = z % H;
  let q0 = wg.x * WG;
  let i = q0 + lid.x;
  let live = i < T;
  var q: array<vec4<f32>, DMAX4>;
  var g: array<vec4<f32>, DMAX4>;
  var dq: array<vec4<f32>, DMAX4>;
  var L = 0.0;
  var Di = 0.0;
  if (live) {
    L = lse[z * T + i];
    Di = Dsum[z * T + i];
  }
  for (var c4 = 0u; c4 < DH4; c4++) {
    q[c4] = vec4<f32>(0.0);
    g[c4] = vec4<f32>(0.0);
    if (live) {
      q[c4] = qkv_quad(b, i, 0u, h, c4);
      g[c4] = do_quad(b, i, h, c4);
    }
    dq[c4] = vec4<f32>(0.0);
  }
  let last = min(q0 + WG, T) - 1u;
  for (var j0 = 0u; j0 <= last; j0 += BC) {
    load_kv(b, h, j0, lid.x);
    workgroupBarrier();
    if (live && j0 <= i) {
      let n = min(BC, i + 1u - j0);
      for (var r = 0u; r < n; r++) {
        var s = 0.0;
        var dp = 0.0;
        for (var c4 = 0u; c4 < DH4; c4++) {
          s += dot(q[c4], tile_x[tile_at(r, c4)]);
          dp += dot(g[c4], tile_y[tile_at(r, c4)]);
        }
        let ds = exp((s - L) * SCALE) * (dp - Di) * SCALE;
        for (var c4 = 0u; c4 < DH4; c4++) { dq[c4] += ds * tile_x[tile_at(r, c4)]; }
      }
    }
    workgroupBarrier();
  }
  if (!live) { return; }
  var bad = false;
  for (var c4 = 0u; c4 < DH4; c4++) {
    let v = dq[c4];
    let w = qkv_word(b, i, 0u, h, 4u * c4);
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    dqkv[w] = h_pack(v.xy);
    if (has_hi(c4)) {
      bad = bad || h_overflows(v.z) || h_overflows(v.w);
      dqkv[w + 1u] = h_pack(v.zw);
    }
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
