// repack_h: the elements of the h matrix X [ROWS_IN, COLS_IN] in row-major order re-laid as the h
// matrix Y [ROWS_OUT, COLS_OUT] (the same count), bits unchanged: Flatten of an odd-C image batch
// [B*H*W, C] -> [B, H*W*C] and back for its gradient (for even widths both are the same bytes). One
// thread per word of Y (grid-stride); an odd COLS_OUT leaves Y's padding halves zero.
@group(0) @binding(0) var<storage, read> X: array<HWLoad>;
@group(0) @binding(1) var<storage, read_write> Y: array<HWLoad>;

override ROWS_IN: u32;
override COLS_IN: u32;
override ROWS_OUT: u32;
override COLS_OUT: u32;

// Element e of X in row-major order, as the low half of a word.
fn element(e: u32) -> HWLoad {
  let c = e % COLS_IN;
  return h_half(X[(e / COLS_IN) * ((COLS_IN + 1u) / 2u) + c / 2u], (c & 1u) == 1u);
}

@compute @workgroup_size(64)
fn repack_h(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let yw = (COLS_OUT + 1u) / 2u;
  for (var t = gid.x; t < ROWS_OUT * yw; t += nwg.x * 64u) {
    let c = 2u * (t % yw);
    let e = (t / yw) * COLS_OUT + c;
    var second = HWLoad();
    if (c + 1u < COLS_OUT) { second = element(e + 1u); }
    Y[t] = h_low_halves(element(e), second);
  }
}
