// `--precision fp8`'s delayed scaling, after a step's update (one workgroup): each slot's amax of
// this step (0 if none was recorded; a non-finite one is recorded as 0, so that one overflow does
// not freeze the scale for a whole history) goes into its history row at the cursor, amax is reset,
// and the slot's next scale exponent comes from the history's max (ALGO 0, Transformer Engine's
// amax_compute_algo "max") or this step's amax (ALGO 1, "most_recent"): fp8.wgsl's
// fp8_scale_exponent; an amax of 0 keeps the previous scale. The cursor then advances mod LEN.
@group(0) @binding(0) var<storage, read_write> amax: array<atomic<u32>>;  // [SLOTS]
@group(0) @binding(1) var<storage, read_write> history: array<u32>;       // [SLOTS, LEN] amax bits
@group(0) @binding(2) var<storage, read_write> scale: array<u32>;         // [SLOTS] exponents (i32)
@group(0) @binding(3) var<storage, read_write> cursor: array<u32>;        // [1]

override SLOTS: u32;
override LEN: u32;
override ALGO: u32 = 0u;
override MARGIN: i32 = 0;

@compute @workgroup_size(64)
fn fp8_scales(@builtin(local_invocation_id) lid: vec3<u32>) {
  let at = cursor[0];
  for (var s = lid.x; s < SLOTS; s += 64u) {
    var a = atomicExchange(&amax[s], 0u);
    if (a >= 0x7f800000u) { a = 0u; }
    history[s * LEN + at] = a;
    var m = a;
    if (ALGO == 0u) {
      for (var j = 0u; j < LEN; j++) { m = max(m, history[s * LEN + j]); }
    }
    if (m != 0u) { scale[s] = bitcast<u32>(fp8_scale_exponent(m, fp8_slot_format(s), MARGIN)); }
  }
  storageBarrier();
  workgroupBarrier();
  if (lid.x == 0u) { cursor[0] = (at + 1u) % LEN; }
}
