// Bias gradient: db[c] = sum over rows of G[r, c], G in the activation format, summed in f32
// (after columns.wgsl).
@group(0) @binding(0) var<storage, read> G: array<HW>;          // [M, N]
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // [N]

fn column_terms(r: u32, c: u32) -> vec2<f32> { return vec2<f32>(h_element(G[h_index(r, c, N)], c), 0.0); }

@compute @workgroup_size(64)
fn colsum(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x < N) { out[gid.x] = column_sums(gid.x).x; }
}
