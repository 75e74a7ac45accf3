// One row of a window's h matrix [T, COLS] (the activation format: WORDS = ceil(COLS / 2) words a
// row, an odd row ending in its pad half) moved to or from a one-row matrix [1, COLS], at the row
// of the newest token: r = min(n, T) - 1, n = seq_len[0] (n >= 1: the prompt is never empty). The
// sampling plan's one-position program (webmp/models/net_sample.py) takes the newest token's
// embedding out of the window's, and puts its q, k, v row into each attention layer's cache (the
// window's qkv buffer). Words are copied as stored: bit for bit on every path. numpy twins:
// webmp.testing.reference.sample_row_take, sample_row_put.
@group(0) @binding(0) var<storage, read> seq_len: array<u32>;  // [1]
@group(0) @binding(1) var<storage, read> X: array<HW>;          // take: [T, COLS]; put: [1, COLS]
@group(0) @binding(2) var<storage, read_write> Y: array<HW>;    // take: [1, COLS]; put: [T, COLS]

override T: u32;      // rows of the window matrix
override WORDS: u32;  // words a row

fn newest_row() -> u32 { return clamp(seq_len[0], 1u, T) - 1u; }

// Y [1, COLS] = row r of X [T, COLS]
@compute @workgroup_size(64)
fn sample_row_take(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let base = newest_row() * WORDS;
  for (var w = gid.x; w < WORDS; w += nwg.x * 64u) { Y[w] = X[base + w]; }
}

// row r of Y [T, COLS] = X [1, COLS]; the other rows keep what they hold
@compute @workgroup_size(64)
fn sample_row_put(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let base = newest_row() * WORDS;
  for (var w = gid.x; w < WORDS; w += nwg.x * 64u) { Y[base + w] = X[w]; }
}
