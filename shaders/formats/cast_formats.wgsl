// Inspection kernels (webmp.ops.cast_formats, decode_formats; no model uses them), so tests can
// check both casts of formats.wgsl bit for bit against ml_dtypes on each path. cast_formats: for N
// f32 bit patterns x, their codes in FORMAT packed as the formats are stored, 32 / width codes a
// word, the first in the low bits (bf16: two a word, E4M3/E5M2: four), and the f32 bit patterns
// those codes stand for (back). decode_formats: back from N packed codes alone (x unread).
@group(0) @binding(0) var<storage, read> x: array<u32>;            // [N] f32 bit patterns
@group(0) @binding(1) var<storage, read_write> codes: array<u32>;  // [ceil(N / per_word)]
@group(0) @binding(2) var<storage, read_write> back: array<u32>;   // [N] f32 bit patterns

override N: u32;
override FORMAT: u32;
override SATURATE: u32 = 0u;

@compute @workgroup_size(64)
fn cast_formats(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let fmt = narrow_format(FORMAT);
  let width = fmt.exp_bits + fmt.man_bits + 1u;
  let per_word = 32u / width;
  let words = (N + per_word - 1u) / per_word;
  for (var w = gid.x; w < words; w += nwg.x * 64u) {
    var word = 0u;
    for (var j = 0u; j < per_word; j++) {
      let i = w * per_word + j;
      if (i >= N) { break; }
      let c = f32_bits_to_narrow(x[i], FORMAT, SATURATE == 1u);
      word |= c << (j * width);
      back[i] = narrow_to_f32_bits(c, FORMAT);
    }
    codes[w] = word;
  }
}

@compute @workgroup_size(64)
fn decode_formats(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let fmt = narrow_format(FORMAT);
  let width = fmt.exp_bits + fmt.man_bits + 1u;
  let per_word = 32u / width;
  for (var i = gid.x; i < N; i += nwg.x * 64u) {
    let c = (codes[i / per_word] >> ((i % per_word) * width)) & ((1u << width) - 1u);
    back[i] = narrow_to_f32_bits(c, FORMAT);
  }
}
