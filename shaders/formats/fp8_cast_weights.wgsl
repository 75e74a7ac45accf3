// `--precision fp8`'s cast of a weight's f32 master [rows, COLS] to E4M3 at its slot's current scale
// (fp8.wgsl), into its working copy Wh (the activation format) where the forward pass is about to
// read it, recording the largest |value| with RECORD (as fp8_cast.wgsl). One thread per word of Wh.
@group(0) @binding(0) var<storage, read> P: array<f32>;       // [rows * COLS]
@group(0) @binding(1) var<storage, read_write> Wh: array<HW>;  // [rows, COLS]
@group(0) @binding(2) var<storage, read> scale: array<u32>;
@group(0) @binding(3) var<storage, read_write> amax: array<atomic<u32>>;

override WORDS: u32;
override COLS: u32;
override SLOT: u32;
override RECORD: u32 = 1u;

@compute @workgroup_size(64)
fn fp8_cast_weights(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = bitcast<i32>(scale[SLOT]);
  let fmt = fp8_slot_format(SLOT);
  let nw = (COLS + 1u) / 2u;
  var top = 0u;
  for (var i = gid.x; i < WORDS; i += nwg.x * 64u) {
    let r = i / nw;
    let c = 2u * (i % nw);
    let bx = bitcast<u32>(P[r * COLS + c]);
    var by = 0u;
    if (c + 1u < COLS) { by = bitcast<u32>(P[r * COLS + c + 1u]); }
    top = max(top, max(bx & 0x7fffffffu, by & 0x7fffffffu));
    Wh[i] = h_pack(vec2<f32>(bitcast<f32>(fp8_quantise_bits(bx, e, fmt)), bitcast<f32>(fp8_quantise_bits(by, e, fmt))));
  }
  if (RECORD == 1u && top != 0u) { atomicMax(&amax[SLOT], top); }
}
