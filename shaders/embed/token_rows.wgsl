// First pass of the embedding backward: the rows of each token, in row order (a stable counting
// sort of idx, with no atomics and no race). One workgroup per token v; thread i owns the i-th
// contiguous chunk of rows. Each thread counts, in its chunk, the rows whose token is below v and
// those equal to v; v's rows start at the total count below v, plus the matches of the chunks
// before for this thread's part, and a second scan writes them there. So
// order[start .. start + count) lists v's rows ascending, and spans[v] = (start, count).
// Cost: every workgroup reads idx twice, V * 2R reads in all, 2R / 64 a thread (R = 8192: 256
// sequential reads a thread).
@group(0) @binding(0) var<storage, read> idx: array<u32>;            // [R]
@group(0) @binding(1) var<storage, read_write> spans: array<u32>;    // [V, 2]: start, count
@group(0) @binding(2) var<storage, read_write> order: array<u32>;    // [R]

override R: u32;  // rows
override V: u32;  // vocabulary size

const WG: u32 = 64u;
var<workgroup> below: array<u32, WG>;
var<workgroup> equal: array<u32, WG>;

@compute @workgroup_size(WG)
fn token_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let v = wg.x;
  let t = lid.x;
  let chunk = (R + WG - 1u) / WG;
  let lo = min(t * chunk, R);
  let hi = min(lo + chunk, R);
  var nb = 0u;
  var ne = 0u;
  for (var r = lo; r < hi; r++) {
    let k = idx[r];
    nb += select(0u, 1u, k < v);
    ne += select(0u, 1u, k == v);
  }
  below[t] = nb;
  equal[t] = ne;
  workgroupBarrier();
  var all_below = 0u;  // rows with a token below v
  var before = 0u;     // v's rows in the chunks before this one
  var count = 0u;      // v's rows
  for (var j = 0u; j < WG; j++) {
    all_below += below[j];
    before += select(0u, equal[j], j < t);
    count += equal[j];
  }
  var at = all_below + before;
  for (var r = lo; r < hi; r++) {
    if (idx[r] == v) { order[at] = r; at++; }
  }
  if (t == 0u) {
    spans[2u * v] = all_below;
    spans[2u * v + 1u] = count;
  }
}
