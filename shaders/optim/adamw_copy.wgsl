// AdamW for a weight matrix [rows, COLS] that also has a working copy in the activation format
// (f16 in mixed precision): one thread per stored word updates both of its columns and writes
// the rounded copy the next forward pass reads.
// With an even column count (COLS unset, 0) the words hold the flat tensor's elements in pairs,
// word w elements 2w and 2w + 1, so Wh's length is all the loop needs and every such matrix
// shares one pipeline. An odd COLS leaves each row's last word a padding half, written 0.
@group(0) @binding(5) var<storage, read_write> Wh: array<HW>;    // [rows, COLS]

override COLS: u32 = 0u;  // set (webmp.ops.adamw_copy) only when odd

@compute @workgroup_size(64)
fn adamw_copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  if (state.apply == 0u) { return; }
  let words = arrayLength(&Wh);
  if (COLS % 2u == 0u) {
    for (var w = gid.x; w < words; w += nwg.x * 64u) {
      Wh[w] = h_pack(vec2<f32>(adamw_update(2u * w), adamw_update(2u * w + 1u)));
    }
    return;
  }
  let cw = COLS / 2u + 1u;  // words a row: (COLS + 1) / 2 for an odd COLS, never 0
  for (var w = gid.x; w < words; w += nwg.x * 64u) {
    let r = w / cw;
    let c = 2u * (w % cw);
    var v = vec2<f32>(adamw_update(r * COLS + c), 0.0);
    if (c + 1u < COLS) { v.y = adamw_update(r * COLS + c + 1u); }
    Wh[w] = h_pack(v);
  }
}
