// Contract (webmp/wgsl.py): owns bindings 3 (C), 4 (flags); goes after matmul.wgsl, before the variant.
// The f16 (h) output of matmul_fwd and matmul_dgrad: stores and the overflow flag.
@group(0) @binding(3) var<storage, read_write> C: array<HW>;
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>>;

fn h_overflows4(v: vec4<f32>) -> bool {
  return h_overflows(v.x) || h_overflows(v.y) || h_overflows(v.z) || h_overflows(v.w);
}

// Stores the 4-column group v (zero beyond N) of row r from column c; true when a value does not
// fit the storage format.
fn store_h4(r: u32, c: u32, v: vec4<f32>) -> bool {
  let w = h_index(r, c, N);
  C[w] = h_pack(v.xy);
  if (c + 2u < N) { C[w + 1u] = h_pack(v.zw); }
  return h_overflows4(v);
}

// mm_run, raising the overflow flag when a stored value did not fit.
fn mm_run_h(wg: vec3<u32>, lid: vec3<u32>) {
  if (mm_run(wg, lid)) { atomicOr(&flags[0], FLAG_H_STORE); }
}
