// Gradient accumulation: the end of a micro-batch. state.micro counts 0 .. MICRO_BATCHES - 1 and
// is 0 again after the step's last micro-batch, so checkpoints (between steps) always hold 0.
// A dispatch of its own: the kernels of the micro-batch read the counter, and only a later
// dispatch may change it.
@group(0) @binding(0) var<storage, read_write> state: State;

override MICRO_BATCHES: u32;

@compute @workgroup_size(1)
fn micro_next() { state.micro = (state.micro + 1u) % MICRO_BATCHES; }
