// Contract (webmp/wgsl.py): second file of every kernel; no bindings; uses the prelude's names.
// Shared by every kernel: the training state word layout, overflow tests, activations and the
// seeded data order (its position, state.data_pos, lives here too).

// The whole training state lives on the GPU in this struct; the host reads it only for
// checkpoints. Field order is the word order the host sees (see webmp/plan.py STATE_FIELDS).
struct State {
  scale: f32,                // current loss scale (1.0 when loss scaling is off)
  growth_tracker: u32,       // consecutive clean steps since the last growth or overflow
  hysteresis_left: u32,      // overflows still tolerated before the scale backs off
  iteration: u32,            // steps attempted, skipped ones included (drives the lr schedule)
  opt_step: u32,             // optimizer steps applied (drives Adam's bias correction)
  data_pos: u32,             // samples consumed from the seeded data stream
  skipped_total: u32,
  min_scale_events: u32,     // overflows that happened with the scale already at min_scale
  first_min_scale_iter: u32, // 1 + iteration of the first such event, 0 if none
  apply: u32,                // this step's verdict for the optimizer: 1 = update, 0 = skip
  lr: f32,                   // this step's learning rate
  grad_mul: f32,             // this step's gradient multiplier: clip_coef / scale
  bc1: f32,                  // 1 - beta1^t
  bc2: f32,                  // 1 - beta2^t
  loss: f32,                 // this step's mean loss
  grad_norm: f32,            // this step's global gradient norm (unscaled)
  found_inf: u32,            // this step's overflow flags (bit 1: f16 store, 2: master grad, 4: loss)
  micro: u32,                // the micro-batch being computed (gradient accumulation), 0 between steps
  pad1: u32, pad2: u32,
}

const FLAG_H_STORE: u32 = 1u;
const FLAG_MASTER_GRAD: u32 = 2u;
const FLAG_LOSS: u32 = 4u;

const NO_LABEL: u32 = 0xffffffffu;  // the label of a padding row: no loss, no gradient, not counted

// Implementations may assume Inf/NaN never occur, so `x != x` or comparisons with infinity can
// be optimised away. Test the bits instead: an integer compare of |bits| is never folded.
fn f32_nonfinite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u; }
// True when x cannot be stored in this precision's activation format: |x| >= 65504 for f16
// (the f32->f16 conversion may saturate instead of giving Inf), Inf or NaN for f32.
fn h_overflows(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) >= H_OVERFLOW_BITS; }

// x rounded to the nearest f16 (ties to even), kept in f32, for values within f16 range. Integer
// arithmetic on the bits, because compilers may fold f32(f16(x)) and
// unpack2x16float(pack2x16float(x)) to x (Mesa's lavapipe does both), skipping the rounding.
// f16 subnormals (|x| < 2^-14) are the multiples of 2^-24. Both roundings are computed and one
// selected, without a branch: lavapipe runs both sides of a branch anyway, and a branch in a matmul
// K loop (this rounds every activation loaded with A_ACT) made the whole loop ~1.5x slower.
fn f16_round(x: f32) -> f32 {
  let b = bitcast<u32>(x);
  let normal = bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
  return select(normal, round(x * 16777216.0) * 5.9604644775390625e-08, abs(x) < 6.103515625e-05);
}

// The f32 bit pattern of the f16 value with bits h (low 16 bits), by integer arithmetic: exact for
// every f16, subnormals included (a float conversion may flush those), Inf and NaN kept.
fn f16_bits_to_f32(h: u32) -> u32 {
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0x1fu) { return sign | 0x7f800000u | (m << 13u); }
  if (e == 0u) {
    if (m == 0u) { return sign; }
    let p = firstLeadingBit(m);  // m * 2^-24 = 1.f * 2^(p - 24)
    return sign | ((p + 103u) << 23u) | ((m << (23u - p)) & 0x7fffffu);
  }
  return sign | ((e + 112u) << 23u) | (m << 13u);
}

// Index of the word holding element (r, c), and c's pair partner, of a row-major [rows, n] matrix
// in the activation format (two columns a word, rows padded to whole words).
fn h_index(r: u32, c: u32, n: u32) -> u32 { return r * ((n + 1u) / 2u) + c / 2u; }

const ACT_NONE: u32 = 0u;
const ACT_RELU: u32 = 1u;
const ACT_GELU: u32 = 2u;   // tanh approximation (PyTorch's GELU(approximate="tanh"))
const ACT_SILU: u32 = 3u;   // x * sigmoid(x)
const ACT_TANH: u32 = 4u;
const GELU_K: f32 = 0.7978845608028654;  // sqrt(2/pi)
const GELU_C: f32 = 0.044715;

fn gelu_tanh_arg(x: f32) -> f32 {
  // tanh saturates long before |u| = 10; the clamp keeps exp-based tanh implementations finite
  return clamp(GELU_K * (x + GELU_C * x * x * x), -10.0, 10.0);
}

// (sigmoid(x), sigmoid(-x)) from e = exp(-|x|) in (0, 1]: no overflow for any x, and 1 - sigmoid(x)
// is not formed by a cancelling subtraction (silu's derivative needs it for large x).
fn sigmoid_pair(x: f32) -> vec2<f32> {
  let e = exp(-abs(x));
  let big = 1.0 / (1.0 + e);
  let small = e / (1.0 + e);
  return select(vec2<f32>(small, big), vec2<f32>(big, small), x >= 0.0);
}
// tanh(10) is 1 in f32; the clamp keeps exp-based tanh implementations finite (as gelu_tanh_arg)
fn tanh_clamped(x: f32) -> f32 { return tanh(clamp(x, -10.0, 10.0)); }

fn act_fwd(x: f32, kind: u32) -> f32 {
  if (kind == ACT_RELU) { return max(x, 0.0); }
  if (kind == ACT_GELU) { return 0.5 * x * (1.0 + tanh(gelu_tanh_arg(x))); }
  if (kind == ACT_SILU) { return x * sigmoid_pair(x).x; }
  if (kind == ACT_TANH) { return tanh_clamped(x); }
  return x;
}

// d act(x) / dx, evaluated at the pre-activation x
fn act_grad(x: f32, kind: u32) -> f32 {
  if (kind == ACT_RELU) { return select(0.0, 1.0, x > 0.0); }
  if (kind == ACT_GELU) {
    let t = tanh(gelu_tanh_arg(x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * x * x);
  }
  if (kind == ACT_SILU) {
    let s = sigmoid_pair(x);  // d/dx x s(x) = s(x) (1 + x s(-x))
    return s.x * (1.0 + x * s.y);
  }
  if (kind == ACT_TANH) { let t = tanh_clamped(x); return 1.0 - t * t; }
  return 1.0;
}

fn pcg_hash(x: u32) -> u32 {
  let s = x * 747796405u + 2891336453u;
  let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
  return (w >> 22u) ^ w;
}

// The seeded data order (numpy twin: webmp.data.permute): a bijection of [0, n) for one epoch,
// rounds of (odd multiply, xorshift, add) on `bits` bits (the smallest b >= 1 with 2^b >= n),
// cycle-walking until the value falls inside the range. Integer arithmetic only, so every
// adapter computes the same order.
fn seeded_permute(j: u32, epoch: u32, n: u32, bits: u32, seed: u32) -> u32 {
  let mask = (1u << bits) - 1u;
  let shift = (bits + 1u) / 2u;
  var x = j;
  loop {
    for (var r = 0u; r < 4u; r++) {
      let k = pcg_hash(seed ^ pcg_hash(epoch * 4u + r));
      x = (x * (k | 1u)) & mask;
      x = x ^ (x >> shift);
      x = (x + (k >> 7u)) & mask;
    }
    if (x < n) { break; }
  }
  return x;
}
