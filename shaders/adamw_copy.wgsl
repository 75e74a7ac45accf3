// AdamW for a weight matrix [ROWS, COLS] that also has a working copy in the activation format
// (f16 in mixed precision): one thread per stored word updates both of its columns and writes
// the rounded copy the next forward pass reads.
@group(0) @binding(5) var<storage, read_write> Wh: array<HW>;    // [ROWS, COLS]

override ROWS: u32;
override COLS: u32;

@compute @workgroup_size(64)
fn adamw_copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  if (state.apply == 0u) { return; }
  let cw = (COLS + 1u) / 2u;
  for (var w = gid.x; w < ROWS * cw; w += nwg.x * 64u) {
    let r = w / cw;
    let c = 2u * (w % cw);
    var v = vec2<f32>(adamw_update(r * COLS + c), 0.0);
    if (c + 1u < COLS) { v.y = adamw_update(r * COLS + c + 1u); }
    Wh[w] = h_pack(v);
  }
}
