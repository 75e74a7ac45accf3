// The page's tuning pass (webmp/page_tune.py): the server builds a tuning plan of a config's matmuls
// for this adapter; the page runs each case's check program once and reads its output, times its
// time program, and posts each shape class's results. The server judges the outputs against
// float64 and stores the fastest correct tile choice under this adapter's key, where the page's
// later plan requests (?tiles=KEY) find it. Nothing is decided here.
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

// Tunes the matmuls of `config` on `gpu` (a fresh openGPU(): its device is destroyed at the end). api(path, {method, body}) talks to the server,
// fetchShader(name) returns a shader file's text, onProgress({done, total, cls, verdict}) follows the
// pass. Returns {adapterKey, verdicts}: the server's verdict per class.
export async function tuneKernels(gpu, {config, offer, maxCandidates, api, fetchShader, onProgress = () => {}}) {
  const request = {adapter: adapterSignature(gpu), limits: gpu.limits, config, f16: offer,
                   max_candidates: maxCandidates};
  const tuning = await api('/api/tune', {method: 'POST', body: request});
  const total = tuning.classes.reduce((n, c) => n + c.cases.length, 0);
  onProgress({done: 0, total, phase: 'compiling'});
  const runner = await Runner.create(gpu, tuning.plan, unbase64(tuning.blob), fetchShader);
  const verdicts = [];
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
  } finally {
    runner.destroy();
  }
  return {adapterKey: tuning.adapter_key, verdicts};
}
