// Standalone activations on [rows, COLS] matrices in the activation format (a layer's GELU, ReLU,
// SiLU, Tanh between other kernels): common.wgsl's act_fwd / act_grad in f32, one store, a value
// that does not fit raises the overflow flag. One thread per word in a grid-stride loop; the
// padding half of each odd row is stored as zero.
//   act_fwd_h:  Y = act(X)
//   act_bwd_h:  dX = dY * act'(X), X the activation's input (dX bound at Y)
// act_fwd_h reads no dY: its launcher binds X there too (one layout for both entry points).
@group(0) @binding(0) var<storage, read> X: array<HW>;
@group(0) @binding(1) var<storage, read> dY: array<HW>;
@group(0) @binding(2) var<storage, read_write> Y: array<HW>;
@group(0) @binding(3) var<storage, read_write> flags: array<atomic<u32>>;

override WORDS: u32;  // rows * ceil(COLS / 2)
override COLS: u32;
override ACT: u32;    // ACT_*

// v with the padding half zeroed when word i is the last of an odd row
fn mask_padding(i: u32, v: vec2<f32>) -> vec2<f32> {
  let nw = (COLS + 1u) / 2u;
  return select(v, vec2<f32>(v.x, 0.0), (COLS & 1u) == 1u && i % nw == nw - 1u);
}

fn act_vec(v: vec2<f32>) -> vec2<f32> { return vec2<f32>(act_fwd(v.x, ACT), act_fwd(v.y, ACT)); }
fn grad_vec(v: vec2<f32>) -> vec2<f32> { return vec2<f32>(act_grad(v.x, ACT), act_grad(v.y, ACT)); }

@compute @workgroup_size(64)
fn act_fwd_h(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  var bad = false;
  for (var i = gid.x; i < WORDS; i += nwg.x * 64u) {
    let v = mask_padding(i, act_vec(h_unpack(X[i])));
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    Y[i] = h_pack(v);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}

@compute @workgroup_size(64)
fn act_bwd_h(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  var bad = false;
  for (var i = gid.x; i < WORDS; i += nwg.x * 64u) {
    let v = mask_padding(i, h_unpack(dY[i]) * grad_vec(h_unpack(X[i])));
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    Y[i] = h_pack(v);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
