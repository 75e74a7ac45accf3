// Contract (webmp/wgsl.py): after matmul_operands.wgsl, before the core; defines act2 and act4 as
// matmul_a_act.wgsl does, for products that apply no activation to A (A_ACT 0). No bindings.

fn act2(v: vec2<f32>) -> vec2<f32> { return v; }
fn act4(v: vec4<f32>) -> vec4<f32> { return v; }
