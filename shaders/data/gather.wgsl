// Batch gather from the dataset already on the GPU. The training order is a seeded permutation of
// the rows per epoch, computed here from the state's data position, so no host write is needed
// per step. Features are converted to the activation format (f16 in mixed precision).
@group(0) @binding(0) var<storage, read> xs: array<f32>;      // [N_ROWS, F]
@group(0) @binding(1) var<storage, read> ys: array<u32>;      // [N_ROWS]
@group(0) @binding(2) var<storage, read> state: State;
@group(0) @binding(3) var<storage, read_write> X: array<HW>;  // [B, F]
@group(0) @binding(4) var<storage, read_write> y: array<u32>; // [B]

override N_ROWS: u32;
override F: u32;
override B: u32;
override SEED: u32 = 0u;
override PERM_BITS: u32 = 1u;  // smallest b >= 1 with 2^b >= N_ROWS
override OFFSET: u32 = 0u;     // gather_eval: first dataset row of this chunk
override SHARD: u32 = 0u;      // gather_train: this rank's first row of the global batch (data-parallel)

// Row of stream position j (< N_ROWS) in the given epoch (common.wgsl's seeded order).
fn permute(j: u32, epoch: u32) -> u32 { return seeded_permute(j, epoch, N_ROWS, PERM_BITS, SEED); }

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

@compute @workgroup_size(64)
fn gather_train(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let fw = (F + 1u) / 2u;
  for (var i = gid.x; i < B * fw; i += nwg.x * 64u) {
    let pos = state.data_pos + SHARD + i / fw;
    copy_row(i / fw, permute(pos % N_ROWS, pos / N_ROWS), i % fw, true);
  }
}

@compute @workgroup_size(64)
fn gather_eval(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let fw = (F + 1u) / 2u;
  for (var i = gid.x; i < B * fw; i += nwg.x * 64u) {
    let src = OFFSET + i / fw;
    copy_row(i / fw, min(src, N_ROWS - 1u), i % fw, src < N_ROWS);
  }
}
