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
override BETA1: f32 = 0.9;
override BETA2: f32 = 0.999;
override RING: u32;

const RECORD_WORDS: u32 = 8u;      // step, loss, scale, skipped, lr, grad_norm, found_inf, min_scale_event
const PI: f32 = 3.14159265358979;
const WG: u32 = 256u;
alias RedT = vec2<f32>;  // what workgroup_sum (reduce.wgsl) adds

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
  let skip = SCALING == 1u && overflow;
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
    state.bc1 = 1.0 - pow(BETA1, f32(state.opt_step));
    state.bc2 = 1.0 - pow(BETA2, f32(state.opt_step));
  }

  var min_event = 0u;
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
