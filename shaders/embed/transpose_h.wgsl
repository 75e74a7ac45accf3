// Y = X^T for an h matrix X [ROWS, COLS] (Y [COLS, ROWS], both in the h layout): the GPT's working
// copies of the weights that its backward pass reads transposed, laid out so that those products
// read them as a plain A·B (on lavapipe A·Bᵀ reads one word per column a K step, A·B a quad for
// eight columns: docs/benchmarks.md "fifth pass"). The bits are moved, never converted, so Y holds
// exactly X's values (f16 subnormals included) and the products give the same bits either way.
// One thread per 2 x 2 block: X's words (2i, j) and (2i + 1, j) become Y's words (2j, i) and
// (2j + 1, i). An odd ROWS pads each of Y's rows with a zero half, as the layout requires; an odd
// COLS leaves X's padding half out.
@group(0) @binding(0) var<storage, read> X: array<HWLoad>;
@group(0) @binding(1) var<storage, read_write> Y: array<HWLoad>;

override ROWS: u32;
override COLS: u32;

@compute @workgroup_size(64)
fn transpose_h(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let xw = (COLS + 1u) / 2u;  // words a row of X
  let yw = (ROWS + 1u) / 2u;  // words a row of Y
  for (var t = gid.x; t < xw * yw; t += nwg.x * 64u) {
    let i = t / xw;  // Y's word column: X's rows 2i, 2i + 1
    let j = t % xw;  // X's word column: Y's rows 2j, 2j + 1
    let a = X[2u * i * xw + j];
    var b = HWLoad();  // zero: the padding half of Y's row when ROWS is odd
    if (2u * i + 1u < ROWS) { b = X[(2u * i + 1u) * xw + j]; }
    Y[2u * j * yw + i] = h_low_halves(a, b);
    if (2u * j + 1u < COLS) { Y[(2u * j + 1u) * yw + i] = h_high_halves(a, b); }
  }
}
