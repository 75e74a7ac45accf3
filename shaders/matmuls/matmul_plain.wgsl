// Plain product: C = op(A) op(B), accumulated in f32 and stored as f16 (h) once, no epilogue.
// With the batch constants of matmul.wgsl it computes the attention products with an h output
// (O = P V, dV = P^T dO, dQ = dS K, dK = dS^T Q: see webmp/ops/attention.py). Values that do not fit the
// storage format raise the overflow flag.
@group(0) @binding(4) var<storage, read_write> C: array<HWOut>;
@group(0) @binding(5) var<storage, read_write> flags: array<atomic<u32>>;

fn col4(c: u32) -> vec4<f32> { return vec4<f32>(0.0); }  // no per-column values

fn store4(r: u32, c: u32, acc4: vec4<f32>, _col: vec4<f32>) -> bool {
  return store_h4(r, c, mask_cols(acc4, c));
}

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_plain(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  mm_run_h(wg, lid);
}
