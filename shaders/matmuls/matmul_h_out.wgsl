// Contract (webmp/wgsl.py): no bindings; after the core, before a store file (matmul_h_store.wgsl
// or matmul_h_store4.wgsl, which defines HWOut and store_h4); the variant declares C
// (array<HWOut>) and flags.
// The f16 (h) output of matmul_fwd, matmul_dgrad and matmul_plain: the overflow test and flag.
// The variant owns the bindings C and flags: array<atomic<u32>> because their numbers differ (5 and
// 6 after fwd's bias or dgrad's Zprev, 4 and 5 in matmul_plain).

fn h_overflows4(v: vec4<f32>) -> bool {
  return h_overflows(v.x) || h_overflows(v.y) || h_overflows(v.z) || h_overflows(v.w);
}

// mm_run, raising the overflow flag when a stored value did not fit.
fn mm_run_h(wg: vec3<u32>, lid: vec3<u32>) {
  if (mm_run(wg, lid)) { atomicOr(&flags[0], FLAG_H_STORE); }
}
