// Evaluation chunks of the test split, in order (after gather_rows.wgsl): chunk c = chunk[0]
// (eval.wgsl's counter: eval_reset zeroes it, eval_next_chunk advances it) takes rows
// c * B .. c * B + B - 1; rows past the end get the label NO_LABEL. The chunk is read on the GPU,
// not set as a constant, so every chunk of an evaluation runs the same pipeline.
@group(0) @binding(0) var<storage, read> xs: array<f32>;      // [N_ROWS, F]
@group(0) @binding(1) var<storage, read> ys: array<u32>;      // [N_ROWS]
@group(0) @binding(2) var<storage, read> chunk: array<u32>;   // [1]
@group(0) @binding(3) var<storage, read_write> X: array<HW>;  // [B, F]
@group(0) @binding(4) var<storage, read_write> y: array<u32>; // [B]

@compute @workgroup_size(64)
fn gather_eval(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let fw = (F + 1u) / 2u;
  let first = chunk[0] * B;
  for (var i = gid.x; i < B * fw; i += nwg.x * 64u) {
    let src = first + i / fw;
    copy_row(i / fw, min(src, N_ROWS - 1u), i % fw, src < N_ROWS);
  }
}
