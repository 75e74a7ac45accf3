// Batch gather from the dataset already on the GPU. The training order is a seeded permutation of
// the rows per epoch, computed here from the state's data position, so no host write is needed
// per step (after gather_rows.wgsl, which converts the features to the activation format).
@group(0) @binding(0) var<storage, read> xs: array<f32>;      // [N_ROWS, F]
@group(0) @binding(1) var<storage, read> ys: array<u32>;      // [N_ROWS]
@group(0) @binding(2) var<storage, read> state: State;
@group(0) @binding(3) var<storage, read_write> X: array<HW>;  // [B, F]
@group(0) @binding(4) var<storage, read_write> y: array<u32>; // [B]

override SEED: u32 = 0u;
override PERM_BITS: u32 = 1u;  // smallest b >= 1 with 2^b >= N_ROWS
override SHARD: u32 = 0u;      // this rank's first row of the global batch (data-parallel)
override MICRO: u32 = 0u;      // rows of one micro-batch over all ranks (gradient accumulation)

// Row of stream position j (< N_ROWS) in the given epoch (common.wgsl's seeded order).
fn permute(j: u32, epoch: u32) -> u32 { return seeded_permute(j, epoch, N_ROWS, PERM_BITS, SEED); }

@compute @workgroup_size(64)
fn gather_train(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let fw = (F + 1u) / 2u;
  for (var i = gid.x; i < B * fw; i += nwg.x * 64u) {
    let pos = state.data_pos + state.micro * MICRO + SHARD + i / fw;
    copy_row(i / fw, permute(pos % N_ROWS, pos / N_ROWS), i % fw, true);
  }
}
