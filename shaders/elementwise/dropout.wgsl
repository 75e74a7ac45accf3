// Dropout on [rows, COLS] matrices in the activation format, forward (X, Y) and backward (dY, dX
// bound at X, Y: the same kernel, the same mask). No mask buffer: element e = row * COLS + col of
// a step is kept iff dropout_bits(e, key) >= THRESHOLD (= ceil(p * 2^32)), the key mixing SEED,
// STREAM (a layer's index) and the step's state.iteration, so the backward pass of the step
// recomputes the forward's mask and each step draws a new one; nothing is written from the host.
// With gradient accumulation, micro-batch k's elements are numbered from k * MICRO_ELEMS on: the
// step's micro-batches draw the masks one matrix of all their rows would.
// Kept values are multiplied by SCALE (1 / (1 - p) in f32) and stored once, an overflow flagged;
// dropped ones are 0, as is the padding half of each odd row. One thread per word, grid-stride.
// numpy twin of the mask: webmp.testing.reference.dropout_keep (u32 arithmetic only).
@group(0) @binding(0) var<storage, read> X: array<HW>;
@group(0) @binding(1) var<storage, read_write> Y: array<HW>;
@group(0) @binding(2) var<storage, read> state: State;
@group(0) @binding(3) var<storage, read_write> flags: array<atomic<u32>>;

override WORDS: u32;      // rows * ceil(COLS / 2)
override COLS: u32;
override THRESHOLD: u32;  // ceil(p * 2^32): 0 keeps everything
override SCALE: f32;      // 1 / (1 - p)
override SEED: u32;
override STREAM: u32;
override MICRO_ELEMS: u32 = 0u;  // gradient accumulation: micro-batch state.micro's first element

// Chris Wellons' "lowbias32" integer hash (hash-prospector): a bijection of u32 with low bias
// (every input bit flips each output bit with probability ~1/2).
fn lowbias32(v: u32) -> u32 {
  var x = v;
  x ^= x >> 16u;
  x *= 0x7feb352du;
  x ^= x >> 15u;
  x *= 0x846ca68bu;
  x ^= x >> 16u;
  return x;
}

const DROPOUT_SALT: u32 = 0x9e3779b9u;  // 2^32 / golden ratio: keeps lowbias32(0) = 0 out of the chain

// The step's key: chained hashes, so distinct streams (for one seed) or iterations give distinct keys.
fn dropout_key(iteration: u32) -> u32 {
  return lowbias32(lowbias32(lowbias32(SEED ^ DROPOUT_SALT) ^ STREAM) ^ iteration);
}

// Two rounds per element: with one, lowbias32(e ^ key) under two keys would be one sequence at
// permuted indices (e ^ k1 ^ k2), so blocks of elements would keep the same share in both steps.
fn dropout_bits(e: u32, key: u32) -> u32 { return lowbias32(lowbias32(e ^ key) + key + DROPOUT_SALT); }

fn kept(e: u32, key: u32) -> bool { return dropout_bits(e, key) >= THRESHOLD; }

@compute @workgroup_size(64)
fn dropout(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let key = dropout_key(state.iteration);
  let nw = (COLS + 1u) / 2u;
  var bad = false;
  for (var i = gid.x; i < WORDS; i += nwg.x * 64u) {
    let e = state.micro * MICRO_ELEMS + (i / nw) * COLS + 2u * (i % nw);
    let pad = 2u * (i % nw) + 1u >= COLS;
    let k = vec2<bool>(kept(e, key), !pad && kept(e + 1u, key));
    let v = select(vec2<f32>(0.0), h_unpack(X[i]) * SCALE, k);
    bad = bad || h_overflows(v.x) || h_overflows(v.y);
    Y[i] = h_pack(v);
  }
  if (bad) { atomicOr(&flags[0], FLAG_H_STORE); }
}
