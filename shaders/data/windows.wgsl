// Context windows of a token stream (character-level language models), gathered on the GPU.
// Row r = b * T + t of a batch is position t of window b: idx[r] is the input token, targets[r]
// the next one. Training windows start at positions of the seeded per-epoch order over the
// N_TOKENS - T start positions that have a target for every row (common.wgsl's seeded_permute,
// the order gather_train uses for dataset rows; numpy twin: webmp.data.window_starts).
// Evaluation windows: windows_eval.wgsl.
@group(0) @binding(0) var<storage, read> tokens: array<u32>;        // [N_TOKENS]
@group(0) @binding(1) var<storage, read> state: State;
@group(0) @binding(2) var<storage, read_write> idx: array<u32>;     // [B * T]
@group(0) @binding(3) var<storage, read_write> targets: array<u32>; // [B * T]

override N_TOKENS: u32;
override T: u32;                   // context length
override B: u32;                   // windows per batch
override SEED: u32 = 0u;
override PERM_BITS: u32 = 1u;      // smallest b >= 1 with 2^b >= N_TOKENS - T
// state.data_pos units per window. The scaler advances data_pos by its B, the number of loss
// rows, which is B * T here: then POS_PER_WINDOW = T and a step takes the next B windows.
override POS_PER_WINDOW: u32 = 1u;
override SHARD: u32 = 0u;          // gather_windows: this rank's first window of the global batch
override MICRO: u32 = 0u;          // windows of one micro-batch over all ranks (gradient accumulation)

@compute @workgroup_size(64)
fn gather_windows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let starts = N_TOKENS - T;
  for (var r = gid.x; r < B * T; r += nwg.x * 64u) {
    let pos = state.data_pos / POS_PER_WINDOW + state.micro * MICRO + SHARD + r / T;  // its place in the stream
    let p = seeded_permute(pos % starts, pos / starts, starts, PERM_BITS, SEED) + r % T;
    idx[r] = tokens[p];
    targets[r] = tokens[p + 1u];
  }
}
