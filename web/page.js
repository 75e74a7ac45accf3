// The page's state and its small helpers: window.webmp, what tests and scripts read (the page's
// status, its run, the f16 path, any error, its run's phases and timing, the sample, the tuning
// pass), the log at the bottom, and the definition lists of the adapter and result panels.

export const $ = (id) => document.getElementById(id);
// What tests and scripts can read: the page's status, its run, the f16 path and any error.
export const page = window.webmp = {
  status: 'idle', runId: null, f16Path: null, error: null, records: 0, runner: null,
  training: null,  // the run this tab trains (from preparing to its end): leaving the page ends it
  followResumes: 0,  // resumes of the run this tab follows that it followed on through
  phase: null, phases: [], timing: null, fieldErrors: {},  // a run's phases; the form's errors
  precompile: null,  // what Runner.precompile did for the last run, where it ran
  layerTable: null, upload: null,  // the network's last layer table; the last data upload's answer
  sample: {status: 'idle'}, sampled: 0,  // sampled: samples ended (done or failed)
  noWebGPU: false,  // true: no adapter here, the page cannot train
  // the page's tuning pass: this adapter's key on the server, how many shape
  // classes are tuned for it, the last pass's status and verdicts
  tune: {key: null, tuned: 0, compileHelpers: 0, compileWhy: '', status: 'idle', verdicts: [], forms: [], error: null}
};

export function log(line) {
  $('log').textContent += `${new Date().toLocaleTimeString()} ${line}\n`;
}

// What the terms the panels show mean (their tooltips).
export const TERMS = {
  'final loss scale': 'the dynamic loss scale at the end: the loss is multiplied by it before the backward pass so ' +
    'that small f16 gradients do not flush to zero; halved on an overflow, doubled after growth_interval clean steps',
  'skipped steps': 'steps whose gradients overflowed f16 (Inf/NaN or ±65504): the optimizer step is skipped and ' +
    'the loss scale halved, as PyTorch\'s GradScaler does',
  'f16': 'how f16 runs here: native (the adapter\'s shader-f16), emulated (stored as f16, computed in f32), or ' +
    'not at all (fp32; bf16, stored two to a word and computed in f32)',
  'f16 path': 'native: the adapter\'s shader-f16; emulated: values stored as f16 and computed in f32 (the same bits)',
  'shader-f16': 'the WebGPU feature for f16 arithmetic in shaders',
  'precision': 'mixed: f16 matmuls and activations, f32 master weights, reductions and optimizer, dynamic loss ' +
    'scaling; fp32: f32 throughout; fp16-noscale: mixed without the loss scale (gradients may flush to zero); ' +
    'bf16: bf16 matmul operands and activations (f32\'s range, 8 bits of precision), no loss scale, any adapter',
  'mean loss, last steps': 'the training loss averaged over the last steps (one step\'s loss is noisy)',
  'metric readbacks': 'times the page read the GPU\'s metrics ring (every log_every steps)',
  'matmul tiles': 'the tile shapes of the matrix-multiply kernels: the defaults, or those a tuning pass chose here',
};

export function fill(dl, entries) {
  dl.replaceChildren(...entries.flatMap(([k, v]) => {
    const dt = document.createElement('dt'), dd = document.createElement('dd');
    dt.textContent = k;
    if (TERMS[k]) dt.title = TERMS[k];
    dd.append(v);  // text or an element
    return [dt, dd];
  }));
}
