// Contract (webmp/wgsl.py): no bindings; the variant declares C (array<F32Out>); after the core.
// store_f32x4 of matmul_f32_out.wgsl in one store, only where N and C's offsets and row stride are
// multiples of 4 (webmp.ops.c_quads): lavapipe compiles each store lane by lane, so one store where
// there were four (a 1024 x 384 x 2 product's fixed cost 0.90 -> 0.72 ms; docs/benchmarks.md
// "fourth pass").

alias F32Out = vec4<f32>;

fn store_f32x4(r: u32, c: u32, v: vec4<f32>) {
  C[out_index(r, c, N) / 4u] = v;
}
