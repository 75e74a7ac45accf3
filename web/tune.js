// The page's tuning pass (webmp/tune/page.py): the server builds a tuning plan of a config's matmuls
// for this adapter; the page runs each case's check program once and reads its output, times its
// time program, and posts each shape class's results. The server judges the outputs against
// float64 and stores the fastest correct tile choice under this adapter's key, where the page's
// later plan requests (?tiles=KEY) find it. Then the forms the config's plan uses (the row kernels',
// the GPT's weights'): each form's program run once and its outputs digested, then timed; the server
// keeps the faster form where the digests agree. Nothing is decided here.
import {Runner} from './runner.js';

// What the browser reports about its adapter: the key of its tuned tiles on the server.
export function adapterSignature(gpu) {
  const [min, max] = gpu.subgroupSizes;
  return {...gpu.adapter, subgroup_min_size: min, subgroup_max_size: max, features: gpu.features};
}

const TARGET_S = 0.05;  // each time program runs about this long (after a one-dispatch estimate)

function base64(buffer) {
  const bytes = new Uint8Array(buffer);
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

const unbase64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0)).buffer;

// 64 bits (16 hex digits) of a buffer's words, two 32-bit multiplicative hashes: enough for the server
// to tell whether the forms computed the same bytes, which are megabytes (POST bodies: 1 MiB at most).
export function digest(buffer) {
  const words = new Uint32Array(buffer, 0, buffer.byteLength >>> 2);
  let a = 0x811c9dc5, b = words.length ^ 0x9e3779b9;
  for (let i = 0; i < words.length; i++) {
    a = Math.imul(a ^ words[i], 0x01000193);
    b = Math.imul(b ^ words[i] ^ i, 0x5bd1e995);
    b ^= b >>> 15;
  }
  const hex = (x) => (x >>> 0).toString(16).padStart(8, '0');
  return hex(a) + hex(b);
}

// The form choices after the classes (POST /api/tune/forms): returns the server's verdict per choice.
async function tuneForms(gpu, request, api, fetchShader, onProgress) {
  const tuning = await api('/api/tune/forms', {method: 'POST', body: request});
  if (!tuning.forms.length) return [];
  onProgress({phase: 'forms'});
  const runner = await Runner.create(gpu, tuning.plan, unbase64(tuning.blob), fetchShader);
  const verdicts = [];
  try {
    for (const choice of tuning.forms) {
      const results = [];
      for (const f of choice.forms) {
        await runner.run(f.program);
        const digestOf = digest(await runner.read(f.outputs));
        const reps = Math.min(50, Math.max(2, Math.ceil(TARGET_S / Math.max(await runner.time(f.program, 1), 1e-4))));
        results.push({form: f.form, digest: digestOf, reps, seconds: Infinity});
      }
      for (let r = 0; r < 2; r++) {  // the forms in turn: a slow moment of the host does not decide
        for (const [i, f] of choice.forms.entries()) {
          results[i].seconds = Math.min(results[i].seconds, await runner.time(f.program, results[i].reps));
        }
      }
      const verdict = await api('/api/tune/forms/results', {method: 'POST', body: {request, what: choice.what, results}});
      verdicts.push(verdict);
      onProgress({phase: 'form', verdict});
    }
  } finally {
    runner.destroy();
  }
  return verdicts;
}

// Tunes the matmuls of `config` on `gpu` (a fresh openGPU(): its device is destroyed at the end). api(path, {method, body}) talks to the server,
// fetchShader(name) returns a shader file's text, onProgress({done, total, cls, verdict}) follows the
// pass. Returns {adapterKey, verdicts, forms}: the server's verdict per class and per form choice.
export async function tuneKernels(gpu, {config, offer, maxCandidates, api, fetchShader, onProgress = () => {}}) {
  const request = {adapter: adapterSignature(gpu), limits: gpu.limits, config, f16: offer,
                   max_candidates: maxCandidates};
  const tuning = await api('/api/tune', {method: 'POST', body: request});
  const total = tuning.classes.reduce((n, c) => n + c.cases.length, 0);
  onProgress({done: 0, total, phase: 'compiling'});
  const runner = await Runner.create(gpu, tuning.plan, unbase64(tuning.blob), fetchShader);
  const verdicts = [];
  let forms = [];
  let done = 0;
  try {
    for (const cls of tuning.classes) {
      const results = [];
      for (const c of cls.cases) {
        await runner.run(c.check);
        const output = await runner.read([c.output]);
        const once = Math.max(await runner.time(c.time, 1), 1e-4);
        const reps = Math.min(200, Math.max(2, Math.ceil(TARGET_S / once)));
        results.push({case: c.case, seconds: await runner.time(c.time, reps), reps, output: base64(output)});
        onProgress({done: ++done, total, phase: 'timing', cls: cls.class});
      }
      const verdict = await api('/api/tune/results', {method: 'POST',
                                                      body: {request, shape_class: cls.class, results}});
      verdicts.push(verdict);
      onProgress({done, total, phase: 'judged', cls: cls.class, verdict});
    }
    // on the same device (a runner destroys its device), after the classes: the weights' products
    // run on the tiles just chosen
    forms = await tuneForms(gpu, request, api, fetchShader, onProgress);
  } finally {
    runner.destroy();
  }
  return {adapterKey: tuning.adapter_key, verdicts, forms};
}
