// `--precision fp8`'s cast of an h matrix [rows, COLS] (a layer's input, with the activation fused
// before it applied first; or its output gradient) to its slot's format at the slot's current
// scale (fp8.wgsl): Y = quantised X, in the activation format. With RECORD (training) the largest
// |value| seen goes into amax[SLOT] (bits: for values >= 0 the order of u32s is that of f32s), for
// fp8_scales to fold into the slot's history after the step; an evaluation records nothing. One
// thread per word in a grid-stride loop; the padding half of each odd row stays 0.
@group(0) @binding(0) var<storage, read> X: array<HW>;
@group(0) @binding(1) var<storage, read_write> Y: array<HW>;
@group(0) @binding(2) var<storage, read> scale: array<u32>;   // [slots] exponents e (i32 bits)
@group(0) @binding(3) var<storage, read_write> amax: array<atomic<u32>>;  // [slots]

override WORDS: u32;  // rows * ceil(COLS / 2)
override COLS: u32;
override ACT: u32 = 0u;  // ACT_*: the activation fused before the layer
override SLOT: u32;
override RECORD: u32 = 1u;

@compute @workgroup_size(64)
fn fp8_cast(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let e = bitcast<i32>(scale[SLOT]);
  let fmt = fp8_slot_format(SLOT);
  let nw = (COLS + 1u) / 2u;
  var top = 0u;
  for (var i = gid.x; i < WORDS; i += nwg.x * 64u) {
    let u = h_unpack(X[i]);
    var v = vec2<f32>(act_fwd(u.x, ACT), act_fwd(u.y, ACT));
    if ((COLS & 1u) == 1u && i % nw == nw - 1u) { v.y = 0.0; }
    let b = vec2<u32>(bitcast<u32>(v.x), bitcast<u32>(v.y));
    top = max(top, max(b.x & 0x7fffffffu, b.y & 0x7fffffffu));
    Y[i] = h_pack(vec2<f32>(bitcast<f32>(fp8_quantise_bits(b.x, e, fmt)), bitcast<f32>(fp8_quantise_bits(b.y, e, fmt))));
  }
  if (RECORD == 1u && top != 0u) { atomicMax(&amax[SLOT], top); }
}
