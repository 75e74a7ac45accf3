// Residual connections: Y += A on two [M, N] matrices in the activation format, added in f32 and
// stored once; a value that does not fit raises the overflow flag. One thread per word (the zero
// padding of odd rows stays zero). In place, because both uses are accumulations:
//   forward:  the branch's output buffer receives the stream (out += x) and becomes the next
//             stream, leaving x intact for the branch's backward (e.g. its LayerNorm's input);
//   backward: the branch's input gradient receives the stream's gradient (dx_branch += dx).
@group(0) @binding(0) var<storage, read> A: array<HW>;
@group(0) @binding(1) var<storage, read_write> Y: array<HW>;
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>>;

override WORDS: u32;  // M * ceil(N / 2)

@compute @workgroup_size(64)
fn add_h(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  var bad = false;
  for (var i = gid.x; i < WORDS; i += nwg.x * 64u) {
    let v = h_unpack(Y[i]) + h_unpack(A[i]);
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    Y[i] = h_pack(v);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
