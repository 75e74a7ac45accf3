// Evaluation windows of a token stream: consecutive and not overlapping. Window w covers tokens
// w * T .. w * T + T - 1, so every token after the first is a target exactly once over the
// cdiv(N_TOKENS - 1, T) windows; rows past the last target (the end of the last window, whole
// windows past it) get token 0 and the label NO_LABEL. Chunk c = chunk[0] (eval.wgsl's counter:
// eval_reset zeroes it, eval_next_chunk advances it) takes windows c * B .. c * B + B - 1, read on
// the GPU so that every chunk of an evaluation runs the same pipeline.
@group(0) @binding(0) var<storage, read> tokens: array<u32>;        // [N_TOKENS]
@group(0) @binding(1) var<storage, read> chunk: array<u32>;         // [1]
@group(0) @binding(2) var<storage, read_write> idx: array<u32>;     // [B * T]
@group(0) @binding(3) var<storage, read_write> targets: array<u32>; // [B * T]

override N_TOKENS: u32;
override T: u32;                   // context length
override B: u32;                   // windows per chunk

@compute @workgroup_size(64)
fn gather_windows_eval(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let first = chunk[0] * B;
  for (var r = gid.x; r < B * T; r += nwg.x * 64u) {
    let p = (first + r / T) * T + r % T;
    let valid = p + 1u < N_TOKENS;
    idx[r] = select(0u, tokens[min(p, N_TOKENS - 1u)], valid);
    targets[r] = select(NO_LABEL, tokens[min(p + 1u, N_TOKENS - 1u)], valid);
  }
}
