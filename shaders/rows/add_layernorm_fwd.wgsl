// After layernorm_fwd.wgsl: a residual add and the LayerNorm of its result in one dispatch (the
// sampler's row program, where each is one row and a dispatch costs more than its work): Z += A
// (add.wgsl's add_h: added in f32, stored once in the activation format), then LayerNorm on the
// stored Z, in either of layernorm_fwd.wgsl's forms: add_layernorm_fwd (a workgroup a row) and
// add_layernorm_fwd_thread (a thread a row). The bits of add_h then that form's kernel; a value of
// either that does not fit raises the overflow flag.
@group(0) @binding(6) var<storage, read> A: array<HW>;  // [M, N]

// Words w0, w0 + step, ... of row r: Z += A; whether a sum did not fit.
fn add_row(r: u32, w0: u32, step: u32) -> bool {
  let nw = (N + 1u) / 2u;
  var bad = false;
  for (var w = w0; w < nw; w += step) {
    let i = r * nw + w;
    let v = h_unpack(Z[i]) + h_unpack(A[i]);
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    Z[i] = h_pack(v);
  }
  return bad;
}

@compute @workgroup_size(WG)
fn add_layernorm_fwd(
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
) {
  let r = grid_row(wg, nwg);
  if (r >= M) { return; }  // uniform: a whole workgroup returns
  let added_bad = add_row(r, lid.x, WG);
  storageBarrier();  // every lane reads words other lanes added
  let ln_bad = layernorm_row_workgroup(r, lid.x);
  if (added_bad || ln_bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}

@compute @workgroup_size(WG)
fn add_layernorm_fwd_thread(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r = gid.x;
  var added_bad = false;
  if (r < M) { added_bad = add_row(r, 0u, 1u); }
  // The LayerNorm reads the sums from storage, as layernorm_fwd_thread does: without the barrier a
  // compiler may hand the stored values on in registers, and its arithmetic on them can differ.
  storageBarrier();
  if (r >= M) { return; }
  let ln_bad = layernorm_row_serial(r);
  if (added_bad || ln_bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
