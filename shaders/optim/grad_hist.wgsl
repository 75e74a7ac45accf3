// The gradient-range lens (webmp.ops.grad_hist): counts the values of one [rows, cols] matrix in
// the activation format by floor(log2 |x|) into counts[base .. base + NB), u32 counters (exact).
// Buckets (webmp.plan.HistogramSpec): 0 zero; 1 below 2^E_MIN; 2 + e - E_MIN for e in
// E_MIN..E_MAX; NB - 2 finite at or above 2^(E_MAX + 1); NB - 1 what the training's overflow test
// flags (h_overflows: |x| >= 65504, Inf or NaN on the f16 paths; Inf or NaN in fp32). The exponent
// comes from the value's f32 bits (the prelude's h_load_bits: integer decoding, subnormals kept),
// never from float compares, which may assume Inf and NaN never occur.
// grad_hist_clear.wgsl zeroes the counters first.
// The matrix's sizes and place come from `dims` (not overrides), so that one pipeline counts every
// layer: a model's lens would otherwise compile one kernel per layer shape.
@group(0) @binding(0) var<storage, read> X: array<HWLoad>;
@group(0) @binding(1) var<storage, read_write> counts: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> dims: vec4<u32>;  // rows, cols, base, workgroups in this dispatch

override E_MIN: i32 = -48;
override E_MAX: i32 = 20;

const WG: u32 = 256u;
const MAX_BUCKETS: u32 = 128u;  // E_MAX - E_MIN + 5 <= this (webmp.ops.grad_hist checks)

var<workgroup> local_counts: array<atomic<u32>, MAX_BUCKETS>;

fn bucket_count() -> u32 { return u32(E_MAX - E_MIN) + 5u; }

fn bucket(bits: u32) -> u32 {
  let a = bits & 0x7fffffffu;
  if (a >= H_OVERFLOW_BITS) { return bucket_count() - 1u; }
  if (a == 0u) { return 0u; }
  let field = a >> 23u;
  // an f32 subnormal (fp32 path) is m * 2^-149
  let e = select(i32(field) - 127, i32(firstLeadingBit(a)) - 149, field == 0u);
  if (e < E_MIN) { return 1u; }
  if (e > E_MAX) { return bucket_count() - 2u; }
  return u32(e - E_MIN) + 2u;
}

@compute @workgroup_size(WG)
fn grad_hist(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let t = lid.x;
  let nb = bucket_count();
  for (var b = t; b < nb; b += WG) { atomicStore(&local_counts[b], 0u); }
  workgroupBarrier();
  let cols = dims.y;
  let words_per_row = (cols + 1u) / 2u;
  let words = dims.x * words_per_row;
  for (var i = wg.x * WG + t; i < words; i += dims.w * WG) {
    let bits = h_load_bits(X[i]);
    atomicAdd(&local_counts[bucket(bits.x)], 1u);
    if (2u * (i % words_per_row) + 1u < cols) {  // an odd row's last word holds one value and a pad
      atomicAdd(&local_counts[bucket(bits.y)], 1u);
    }
  }
  workgroupBarrier();
  for (var b = t; b < nb; b += WG) {
    let c = atomicLoad(&local_counts[b]);
    if (c != 0u) { atomicAdd(&counts[dims.z + b], c); }
  }
}
