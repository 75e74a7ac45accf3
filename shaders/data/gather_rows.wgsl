// One dataset row into a batch row, converted to the activation format (f16 in mixed precision):
// shared by gather.wgsl (training batches) and gather_eval.wgsl (evaluation chunks). No bindings;
// expects xs, ys, X and y from the file with the entry point.
override N_ROWS: u32;
override F: u32;
override B: u32;

fn copy_row(dst_row: u32, src_row: u32, wc: u32, valid: bool) {
  let fw = (F + 1u) / 2u;
  let c = 2u * wc;
  var v = vec2<f32>(0.0);
  if (valid) {
    v.x = xs[src_row * F + c];
    if (c + 1u < F) { v.y = xs[src_row * F + c + 1u]; }
  }
  X[dst_row * fw + wc] = h_pack(v);
  if (wc == 0u) { y[dst_row] = select(NO_LABEL, ys[src_row], valid); }
}
