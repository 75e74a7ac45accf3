// End of the backward pass, one workgroup: reduces the step's loss and gradient norm, decides
// whether the optimizer applies this step, updates the dynamic loss scale with GradScaler
// semantics (plus DeepSpeed-style hysteresis and a floor), writes the metrics record and
// advances the step counters. Runs before the optimizer kernels, which read its verdict.
@group(0) @binding(0) var<storage, read_write> state: State;
@group(0) @binding(1) var<storage, read_write> flags: array<atomic<u32>>;
@group(0) @binding(2) var<storage, read> partials: array<f32>;
@group(0) @binding(3) var<storage, read> loss_rows: array<f32>;
@group(0) @binding(4) var<storage, read_write> metrics: array<u32>;  // ring of RING records

override NUM_PARTIALS: u32;
override B: u32;
override SCALING: u32 = 1u;        // 0: loss scaling off (fp32, fp16-noscale): never skip
override SKIP_OVERFLOW: u32 = 0u;  // 1 (bf16): no loss scale, but a step with an overflow is skipped
override GROWTH: f32 = 2.0;
override BACKOFF: f32 = 0.5;
override INTERVAL: u32 = 2000u;
override HYSTERESIS: u32 = 1u;
override MIN_SCALE: f32 = 1.0;
override CLIP: f32 = 0.0;          // max global norm; 0 = no clipping
override LR: f32;
override LR_MIN: f32 = 0.0;
override WARMUP: u32 = 0u;
override TOTAL: u32;
override SCHEDULE: u32 = 1u;       // 0: constant after warmup, 1: cosine decay to LR_MIN
override LOG_BETA1: f32;           // ln(BETA1) of adamw.wgsl, from the host (webmp.ops.adam_log_beta)
override LOG_BETA2: f32;
override RING: u32;

const RECORD_WORDS: u32 = 8u;      // step, loss, scale, skipped, lr, grad_norm, found_inf, min_scale_event
const PI: f32 = 3.14159265358979;
const WG: u32 = 256u;
alias RedT = vec2<f32>;  // what workgroup_sum (reduce.wgsl) adds

// Adam's bias correction 1 - beta^t (t >= 1) for the f32 beta the moment updates use, from
// log_beta = ln(beta) rounded to f32 on the host (< 0; -128 stands for beta = 0). `1 - pow(beta, t)`
// in f32 cancels: pow's few-ulp error on 0.999 is 1.2e-4 of 1 - 0.999. Here, with x = t ln(beta)
// (f32(t) exact below 2^24) split as x = n ln2 + r, |r| <= ln2 / 2:
//   1 - beta^t = (1 - 2^n) - 2^n expm1(r),   expm1(r) = r p(r),  p(r) = sum_{k<8} r^k / (k+1)!
// 1 - 2^n (n in -26 .. 0) and the scalings by 2^n are exact, p is Horner in +, * only (no builtin
// exp or log, whose error WGSL leaves at a few ulps), and the final subtraction never cancels
// (1 - 2^n >= 2 |2^n expm1(r)| for n < 0; n = 0 gives -expm1(x)).
// Error in U = 2^-24 relative to 1 - beta^t (an f32 operation errs by < 2 U: WGSL may round to
// either neighbour), worst at n = -1 with x near -ln2 / 2:
//   x: ln(beta) rounded on the host (1 U), the product (2 U); the condition of 1 - e^x in x,
//      |x| e^x / (1 - e^x), is <= 1: <= 3 U;
//   r: n C1 is exact, the two subtractions err by < 1.4 U absolute, times e^x / (1 - e^x) <= 2.41:
//      < 3.4 U;
//   expm1(r) = r p(r): truncation < 0.01 U, Horner < 3 U, the product 2 U, times
//      2^n |expm1(r)| / (1 - beta^t) <= 0.71: < 3.6 U;
//   the final subtraction: 2 U.
// In all < 12 U = 7.2e-7 (webmp.reference.BIAS_CORRECTION_ERROR; 2.4 U measured on lavapipe).
// x < -18 (beta^t < 1.6e-8 < U) returns 1.
const LN2_C1: f32 = 0.693359375;        // ln 2 = C1 + C2, C1 with 9 significant bits: n C1 is exact
const LN2_C2: f32 = -2.12194440e-4;
const INV_LN2: f32 = 1.4426950408889634;

fn one_minus_pow(log_beta: f32, t: u32) -> f32 {
  let x = f32(t) * log_beta;
  if (x < -18.0) { return 1.0; }
  let n = floor(x * INV_LN2 + 0.5);
  let r = (x - n * LN2_C1) - n * LN2_C2;
  var p = 1.0 / 40320.0;
  p = 1.0 / 5040.0 + r * p;
  p = 1.0 / 720.0 + r * p;
  p = 1.0 / 120.0 + r * p;
  p = 1.0 / 24.0 + r * p;
  p = 1.0 / 6.0 + r * p;
  p = 0.5 + r * p;
  p = 1.0 + r * p;
  let ni = i32(n);
  return (1.0 - ldexp(1.0, ni)) - ldexp(r * p, ni);
}

fn lr_at(it: u32) -> f32 {
  if (it < WARMUP) { return LR * f32(it + 1u) / f32(WARMUP); }
  if (SCHEDULE == 0u) { return LR; }
  let p = min(f32(it - WARMUP) / f32(max(TOTAL, WARMUP + 1u) - WARMUP), 1.0);
  return LR_MIN + 0.5 * (LR - LR_MIN) * (1.0 + cos(PI * p));
}

@compute @workgroup_size(WG)
fn scaler_step(@builtin(local_invocation_id) lid: vec3<u32>) {
  let t = lid.x;
  var s = vec2<f32>(0.0);
  for (var i = t; i < NUM_PARTIALS; i += WG) { s.x += partials[i]; }
  for (var i = t; i < B; i += WG) { s.y += loss_rows[i]; }
  let total = workgroup_sum(s, t);  // (sum of squares, sum of losses)
  if (t != 0u) { return; }

  let found = atomicLoad(&flags[0]);
  atomicStore(&flags[0], 0u);
  let it = state.iteration;
  let scale = state.scale;
  let norm = sqrt(total.x);
  let loss = total.y / f32(B);
  let overflow = found != 0u;
  let skip = (SCALING == 1u || SKIP_OVERFLOW == 1u) && overflow;
  let lr = lr_at(it);

  var clip = 1.0;
  if (CLIP > 0.0) { clip = min(1.0, CLIP / (norm + 1e-6)); }
  state.apply = select(1u, 0u, skip);
  state.lr = lr;
  state.grad_mul = clip / scale;
  state.loss = loss;
  state.grad_norm = norm;
  state.found_inf = found;
  if (!skip) {
    state.opt_step += 1u;
    state.bc1 = one_minus_pow(LOG_BETA1, state.opt_step);
    state.bc2 = one_minus_pow(LOG_BETA2, state.opt_step);
  }

  var min_event = 0u;
  if (SCALING == 0u && skip) { state.skipped_total += 1u; }
  if (SCALING == 1u) {
    if (overflow) {
      state.skipped_total += 1u;
      state.growth_tracker = 0u;
      if (state.hysteresis_left > 1u) {
        state.hysteresis_left -= 1u;
      } else if (scale <= MIN_SCALE) {
        min_event = 1u;
        state.min_scale_events += 1u;
        if (state.first_min_scale_iter == 0u) { state.first_min_scale_iter = it + 1u; }
      } else {
        state.scale = max(scale * BACKOFF, MIN_SCALE);
      }
    } else {
      state.growth_tracker += 1u;
      if (state.growth_tracker >= INTERVAL) {
        let grown = scale * GROWTH;
        if (!f32_nonfinite(grown)) { state.scale = grown; }
        state.growth_tracker = 0u;
        state.hysteresis_left = HYSTERESIS;
      }
    }
  }

  let o = (it % RING) * RECORD_WORDS;
  metrics[o] = it;
  metrics[o + 1u] = bitcast<u32>(loss);
  metrics[o + 2u] = bitcast<u32>(scale);
  metrics[o + 3u] = select(0u, 1u, skip);
  metrics[o + 4u] = bitcast<u32>(lr);
  metrics[o + 5u] = bitcast<u32>(norm);
  metrics[o + 6u] = found;
  metrics[o + 7u] = min_event;
  state.iteration = it + 1u;
  state.data_pos += B;
}
