// Contract (webmp/wgsl.py): after matmul_operands.wgsl, before the core; defines act2, act4. No
// bindings. For products whose A is an activation's input (A_ACT != 0): the activation is
// applied to A's values as they are loaded. The other products take matmul_a_raw.wgsl, which
// defines the same names with no activation code: a register core inlines the loader once per row
// of its block (16 times), and the dead activation code was most of what Chromium's shader
// compiler spent on a matmul pipeline (docs/benchmarks.md "Cold start").

// A_ACT applied to values of A as they are loaded, rounded to f16 as a stored activation is.
fn act2(v: vec2<f32>) -> vec2<f32> {
  if (A_ACT == ACT_NONE) { return v; }
  return vec2<f32>(h_round(act_fwd(v.x, A_ACT)), h_round(act_fwd(v.y, A_ACT)));
}
fn act4(v: vec4<f32>) -> vec4<f32> { return vec4<f32>(act2(v.xy), act2(v.zw)); }
