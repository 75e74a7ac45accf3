// Contract (webmp/wgsl.py): after matmul_reg.wgsl; defines k_loops and a_words. No bindings. Needs
// the `subgroups` feature (a browser's WGSL also needs `enable subgroups;`: see wgsl.SOURCE_FEATURES).
// The threads of a subgroup that share their rows of C (those along x, when the subgroup is
// WG_X consecutive invocations and at least min(TM, 8) wide) load the TM words of op(A) a step
// needs once between them, each its share (one word, two with TM 16), and hand them out with
// subgroupBroadcast: TM loads a thread become one or two. Elsewhere (another subgroup size or
// layout) the compact K loop loads each thread's own words (k_loop_compact): the same values.

var<private> sg_lane: u32;

// 1: the plan knows this device's subgroups hold WG_X-aligned runs of consecutive invocations, at
// least min(TM, 8) wide (lavapipe's: its SIMD width; webmp.engine.subgroups, which the runtime
// checks with a probe before making any pipeline that takes it), so only k_loop is compiled: the
// verdict below always holds, and the fallback loop would double the kernel's compile time.
override SG_LAYOUT: u32 = 0u;

// The verdict is the same for a whole subgroup and for every step, so it picks one of two K loops
// once, rather than a branch in every step. lavapipe runs the arithmetic under an `if` on every
// lane whatever the lane's mask (only loads and stores are masked), but leaves a loop whose mask
// is empty at once: in the loop the per-thread loads' work (an activation per value with A_ACT)
// is not done at all (GELU on load: 23.7 -> 37.2 GFLOP/s at 1024 x 128 x 512, docs/benchmarks.md).
// The other loop, for subgroups laid out otherwise, is the compact one: it costs little to
// compile, and the tuner, which times each choice, does not pick this core where it runs.
fn k_loops(row0: u32, col0: u32) {
  sg_lane = subgroupExclusiveAdd(1u);  // the lane index, without entry-point builtins
  if (SG_LAYOUT == 1u) {
    k_loop(row0, col0);
    return;
  }
  let lanes = subgroupAdd(1u);  // every invocation is active here
  if (subgroupAll(lanes >= min(TM, 8u) && row0 == subgroupBroadcastFirst(row0))) {
    k_loop(row0, col0);
  } else {
    k_loop_compact(row0, col0);
  }
}

// Called only from the K loop under k_loops' verdict, which is the same in every lane of a subgroup
// (subgroupAll), so the broadcasts run with the whole subgroup. WGSL's uniformity analysis cannot
// see that: Tint refuses the module unless it starts with `diagnostic(off, subgroup_uniformity);`,
// which web/runner.js puts there with `enable subgroups;` (naga does not check, and prints an
// error for the rule's name).
fn a_words(row0: u32, k: u32) -> array<vec2<f32>, TM_MAX> {
  var w: array<vec2<f32>, TM_MAX>;
  let mine = a_word(row0, k, sg_lane % min(TM, 8u));
  // subgroupBroadcast takes a constant lane
  w[0] = subgroupBroadcast(mine, 0u);
  w[1] = subgroupBroadcast(mine, 1u);
  w[2] = subgroupBroadcast(mine, 2u);
  w[3] = subgroupBroadcast(mine, 3u);
  if (TM > 4u) {
    w[4] = subgroupBroadcast(mine, 4u);
    w[5] = subgroupBroadcast(mine, 5u);
    w[6] = subgroupBroadcast(mine, 6u);
    w[7] = subgroupBroadcast(mine, 7u);
  }
  if (TM > 8u) {  // words 8 .. 15
    let mine2 = a_word(row0, k, 8u + sg_lane % 8u);
    w[8] = subgroupBroadcast(mine2, 0u);
    w[9] = subgroupBroadcast(mine2, 1u);
    w[10] = subgroupBroadcast(mine2, 2u);
    w[11] = subgroupBroadcast(mine2, 3u);
    w[12] = subgroupBroadcast(mine2, 4u);
    w[13] = subgroupBroadcast(mine2, 5u);
    w[14] = subgroupBroadcast(mine2, 6u);
    w[15] = subgroupBroadcast(mine2, 7u);
  }
  return w;
}
