// Bias gradient: db[c] = sum over rows of G[r, c], G in the activation format, summed in f32.
@group(0) @binding(0) var<storage, read> G: array<HW>;          // [M, N]
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // [N]

override M: u32;
override N: u32;

@compute @workgroup_size(64)
fn colsum(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= N) { return; }
  let nw = (N + 1u) / 2u;
  var s = 0.0;
  for (var r = 0u; r < M; r++) {
    let w = h_unpack(G[r * nw + c / 2u]);
    s += select(w.x, w.y, (c & 1u) == 1u);
  }
  out[c] = s;
}
