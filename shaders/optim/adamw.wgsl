// Contract (webmp/wgsl.py): owns bindings 0-4 and its overrides; adamw_copy.wgsl adds binding 5.
// AdamW on fp32 master parameters, fp32 moments; skipped entirely when the scaler found an
// overflow this step (weights, moments and the bias-correction count stay untouched).
// Gradients arrive scaled by the loss scale; state.grad_mul unscales (and clips) them.
// The tensor's length is P's (its buffer holds exactly the tensor): the only overrides are the
// hyperparameters, so every tensor with the same ones shares one pipeline.
@group(0) @binding(0) var<storage, read> state: State;
@group(0) @binding(1) var<storage, read_write> P: array<f32>;     // master parameters
@group(0) @binding(2) var<storage, read> G: array<f32>;          // master gradients (scaled)
@group(0) @binding(3) var<storage, read_write> Mo: array<f32>;    // first moment
@group(0) @binding(4) var<storage, read_write> V: array<f32>;     // second moment

override WD: f32 = 0.0;
override BETA1: f32 = 0.9;
override BETA2: f32 = 0.999;
override EPS: f32 = 1e-8;

fn adamw_update(i: u32) -> f32 {
  let g = G[i] * state.grad_mul;
  let m = BETA1 * Mo[i] + (1.0 - BETA1) * g;
  let v = BETA2 * V[i] + (1.0 - BETA2) * g * g;
  Mo[i] = m;
  V[i] = v;
  var p = P[i] * (1.0 - state.lr * WD);
  p -= state.lr * (m / state.bc1) / (sqrt(v / state.bc2) + EPS);
  P[i] = p;
  return p;
}

// Grid-stride loops keep the dispatch under the 65535-workgroup limit for large tensors.
@compute @workgroup_size(64)
fn adamw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  if (state.apply == 0u) { return; }
  let n = arrayLength(&P);
  for (var i = gid.x; i < n; i += nwg.x * 64u) { adamw_update(i); }
}
