// Fused softmax cross-entropy, forward and backward, in f32. One thread per row.
//   loss_r = logsumexp(l_r) - l_r[y_r] = log(sum_c exp(l_c - max)) - (l_r[y_r] - max)
//   dlogits = (softmax(l_r) - onehot(y_r)) * scale / COUNTED   (the mean over the counted rows,
//   times the loss scale)
// dlogits is stored in the activation format; a value that does not fit raises the overflow flag.
// A padding row (label NO_LABEL) gets loss 0 and a zero gradient and raises no flag; it is not
// one of the COUNTED rows.
override COUNTED: u32 = 0u;  // the rows the mean is over (B minus the padding rows); 0: all B

@group(0) @binding(0) var<storage, read> logits: array<f32>;     // [B, C]
@group(0) @binding(1) var<storage, read> labels: array<u32>;     // [B]
@group(0) @binding(2) var<storage, read> state: State;
@group(0) @binding(3) var<storage, read_write> loss_rows: array<f32>;  // [B]
@group(0) @binding(4) var<storage, read_write> dlogits: array<HW>;     // [B, C]
@group(0) @binding(5) var<storage, read_write> flags: array<atomic<u32>>;

override B: u32;

@compute @workgroup_size(64)
fn softmax_xent(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r = gid.x;
  if (r >= B) { return; }
  // The class count, from the size of logits ([B, C] exactly: webmp.ops checks). Not an override:
  // a constant count lets the compiler write the class loops out, which on lavapipe made this
  // kernel compile 2.6x slower at C = 10 (cold start, docs/benchmarks.md) for no faster step.
  let C = arrayLength(&logits) / B;
  let row = r * C;
  let cw = (C + 1u) / 2u;
  let label = labels[r];
  if (label == NO_LABEL) {
    loss_rows[r] = 0.0;
    for (var w = 0u; w < cw; w++) { dlogits[r * cw + w] = h_pack(vec2<f32>(0.0)); }
    return;
  }
  var mx = logits[row];
  for (var c = 1u; c < C; c++) { mx = max(mx, logits[row + c]); }
  var sum = 0.0;
  for (var c = 0u; c < C; c++) { sum += exp(logits[row + c] - mx); }
  // not (mx + log(sum)) - l_y: that rounds the loss to the ulp of the logits ([3e38, 3e38, -3e38]
  // with label 0 gave 0, not ln 2); l_y - mx is exact whenever the two are within a factor 2
  let loss = log(sum) - (logits[row + label] - mx);
  loss_rows[r] = loss;
  var bad = f32_nonfinite(loss);
  if (bad) { atomicOr(&flags[0], FLAG_LOSS); }
  let k = state.scale / f32(select(COUNTED, B, COUNTED == 0u));
  var hbad = false;
  for (var w = 0u; w < cw; w++) {
    var v = vec2<f32>(0.0);
    for (var h = 0u; h < 2u; h++) {
      let c = 2u * w + h;
      if (c < C) {
        let p = exp(logits[row + c] - mx) / sum;
        v[h] = (p - select(0.0, 1.0, c == label)) * k;
      }
    }
    hbad = hbad || h_overflows(v.x) || h_overflows(v.y);
    dlogits[r * cw + w] = h_pack(v);
  }
  if (hbad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
