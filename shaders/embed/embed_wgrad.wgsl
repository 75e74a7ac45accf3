// Second pass of the embedding backward (after token_rows): the gradients of both tables from dX,
// the gradient of the embedding output (activation format, times the loss scale), summed in f32
// in row order, so the result is deterministic: no atomics, no racy scatter.
//   dwte[v, c] = sum of dX[r, c] over the rows r of token v (order[start .. start + count))
//   dwpe[t, c] = sum of dX[b * T + t, c] over b = 0 .. R / T - 1
// One thread per (table row, pair of columns): items 0 .. V * dw - 1 are wte's, then T * dw for
// wpe. Each table reads dX once in all (R * dw words); a token thread sums as many rows as its
// token has, so the most frequent token sets the time (a space in text: ~15% of the rows).
// ACCUMULATE = 1 adds the sum to dwte instead of writing it (a tied output head's wgrad was
// written there first); dwpe is always written.
@group(0) @binding(0) var<storage, read> spans: array<u32>;         // [V, 2]: start, count
@group(0) @binding(1) var<storage, read> order: array<u32>;         // [R]
@group(0) @binding(2) var<storage, read> dX: array<HW>;             // [R, D]
@group(0) @binding(3) var<storage, read_write> dwte: array<f32>;    // [V, D]
@group(0) @binding(4) var<storage, read_write> dwpe: array<f32>;    // [T, D]

override R: u32;
override T: u32;
override V: u32;
override D: u32;
override ACCUMULATE: u32 = 0u;

@compute @workgroup_size(64)
fn embed_wgrad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let dw = (D + 1u) / 2u;
  for (var i = gid.x; i < (V + T) * dw; i += nwg.x * 64u) {
    let w = i % dw;
    var s = vec2<f32>(0.0);
    if (i < V * dw) {
      let v = i / dw;
      let start = spans[2u * v];
      for (var j = start; j < start + spans[2u * v + 1u]; j++) { s += h_unpack(dX[order[j] * dw + w]); }
      let o = v * D + 2u * w;
      let pair = 2u * w + 1u < D;
      if (ACCUMULATE == 1u) {
        s.x += dwte[o];
        if (pair) { s.y += dwte[o + 1u]; }
      }
      dwte[o] = s.x;
      if (pair) { dwte[o + 1u] = s.y; }
    } else {
      let t = i / dw - V;
      for (var r = t; r < R; r += T) { s += h_unpack(dX[r * dw + w]); }
      let o = t * D + 2u * w;
      dwpe[o] = s.x;
      if (2u * w + 1u < D) { dwpe[o + 1u] = s.y; }
    }
  }
}
