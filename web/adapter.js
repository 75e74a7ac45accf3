// The adapter panel: the WebGPU adapter, shown when the page opens, or why this page cannot train
// without one; the matmul tiles the server keeps tuned for it and the page's tuning pass that
// measures them (tune.js); the f16 path a run takes on it.
import {openGPU} from './runner.js';
import {adapterSignature, tuneKernels} from './tune.js';
import {$, page, log, fill} from './page.js';
import {api, fetchShader} from './server.js';
import {formReady, formConfig} from './form.js';
import {setStatus} from './status.js';

function details(summary, text) {
  const d = document.createElement('details'), s = document.createElement('summary');
  s.textContent = summary;
  d.append(s, text);
  return d;
}

// The adapter, shown when the page opens (showAdapter; each run then opens its own device: a
// finished run destroys its device to free its memory). gpuReady: the adapter (it rejects without
// WebGPU); tilesReady: the tiles tuned for it, looked up before any run asks for its plan; hasGPU:
// whether there is one.
export let gpuReady = null, tilesReady = null, hasGPU = null;

export function showAdapter() {
  gpuReady = openGPU().then((gpu) => {
    gpu.device.destroy();
    const a = gpu.adapter;
    fill($('gpu-info'), [
      ['adapter', [a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(' / ') || '(not reported)'],
      ['shader-f16', gpu.hasF16 ? 'yes: f16 runs natively' : 'no: f16 is emulated (stored as f16, computed in f32)'],
      ['f16 path', '(chosen when a run starts)'],
      ['limits', details(`${Object.keys(gpu.limits).length} limits`,
                         Object.entries(gpu.limits).map(([k, v]) => `${k} ${v}`).join(', '))],
      ['features', details(`${gpu.features.length} features`, gpu.features.join(', '))],
    ]);
    page.adapter = a;
    page.hasF16 = gpu.hasF16;
    page.signature = adapterSignature(gpu);
    return gpu;
  });
  tilesReady = gpuReady.then(showTiles).catch((e) => log(`tuned tiles not looked up: ${e.message}`));
  gpuReady.catch(noWebGPU);
  hasGPU = gpuReady.then(() => true, () => false);
}

// No adapter: no run can train here, so the page says what would make it work and offers no Start.
function noWebGPU(e) {
  page.noWebGPU = true;
  page.error = e.message;
  $('no-webgpu').hidden = false;
  $('no-webgpu-why').textContent = e.message;
  $('no-webgpu-insecure').hidden = window.isSecureContext;
  $('gpu-panel').hidden = true;
  setStatus('failed', 'WebGPU unavailable: this browser cannot train (see below)');
}

// The matmul tiles tuned for this adapter, as the server has them.
async function showTiles() {
  const {adapter_key: key, tuned, forms, shipped, compile_helpers: helpers, compile_helpers_why: why} =
    await api('/api/adapters', {method: 'POST', body: page.signature});
  const n = Object.keys(tuned).length;
  // a run's first kernels compiled on this many more devices at once (Runner.precompile), and why
  const compileHelpers = Math.min(helpers, Math.max((navigator.hardwareConcurrency || 1) - 1, 0));
  Object.assign(page.tune, {key, tuned: n, compileHelpers, compileWhy: why});
  const chosen = Object.entries(forms).map(([what, form]) => `; ${what}: ${form}`).join('');
  const rest = shipped ? `the ${shipped}` : 'default';
  const what = n ? `tuned on this adapter (${n} shape classes${chosen}), else ${rest}`
    : `${rest} (no tuning pass on this adapter yet)`;
  const dl = $('gpu-info');
  let dd = [...dl.querySelectorAll('dt')].find((dt) => dt.textContent === 'matmul tiles')?.nextElementSibling;
  if (!dd) {
    const dt = document.createElement('dt');
    dt.textContent = 'matmul tiles';
    dd = document.createElement('dd');
    dl.append(dt, dd);
  }
  dd.textContent = what;
  $('tune').disabled = false;
}

// The page's tuning pass (tune.js) for the form's model: matmul tiles measured here, kept by the
// server.
export async function tunePass() {
  if (page.status === 'preparing' || page.status === 'running' || page.tune.status === 'running') return;
  $('tune').disabled = true;
  $('start').disabled = true;
  Object.assign(page.tune, {status: 'running', verdicts: [], forms: [], error: null});
  const t0 = performance.now();
  const note = (text) => { $('tune-status').textContent = text; };
  let gpu = null, status = 'failed', error = null;
  try {
    await formReady;
    gpu = await openGPU();
    const progress = (p) => ({
      compiling: `tuning: compiling ${p.total} tile choices…`,
      forms: 'tuning: timing the row kernels\' and the weights\' forms…',
      form: `tuning: ${p.verdict?.what} form ${p.verdict?.form}`,
    })[p.phase] ?? `tuning: ${p.done}/${p.total} tile choices timed`;
    const {verdicts, forms} = await tuneKernels(gpu, {
      config: formConfig(), offer: gpu.hasF16 ? 'native' : 'emulated',
      maxCandidates: Number($('tune-candidates').value), api, fetchShader,
      onProgress: (p) => note(progress(p)),
    });
    Object.assign(page.tune, {verdicts, forms});
    const wrong = verdicts.reduce((n, v) => n + v.wrong.length, 0);
    const lines = verdicts.map((v) => `${v.shape_class}: ${v.tiles ? `${v.tiles.core || 'tiled'} ` +
      `${JSON.stringify(v.tiles)} ${v.gflops.toFixed(2)} GFLOP/s (default ${v.default_gflops?.toFixed(2) ?? '-'})`
      : 'no correct choice'}`);
    // what the pass found: the classes it chose tiles for and how much faster they are than the
    // defaults (measured here), the classes where no choice was correct (they keep the defaults)
    const chosen = verdicts.filter((v) => v.tiles), none = verdicts.length - chosen.length;
    const speedups = chosen.filter((v) => v.gflops > 0 && v.default_gflops > 0).map((v) => v.gflops / v.default_gflops)
      .sort((a, b) => a - b);
    page.tune.speedups = speedups;
    const speed = speedups.length ? ` (median ${speedups[speedups.length >> 1].toFixed(2)}× the default tiles' ` +
      `speed, best ${speedups.at(-1).toFixed(2)}×)` : '';
    note(`tuned ${chosen.length} of ${verdicts.length} shape classes${speed}` +
         forms.map((f) => `, ${f.what}: ${f.form}`).join('') + ` in ${((performance.now() - t0) / 1000).toFixed(1)} s` +
         (none ? `; ${none} kept the defaults (no correct choice)` : '') +
         (wrong ? `; ${wrong} tile choices gave wrong results and were refused` : '') +
         '; later runs use these tiles');
    for (const f of forms) {
      lines.push(`${f.what}: ${f.form}` + (f.seconds ? ` (${Object.entries(f.seconds).map(([k, v]) =>
        `${k} ${(1000 * v).toFixed(2)} ms`).join(', ')})` : ' (the forms\' results differ here: the default)'));
    }
    log(`tuning pass:\n  ${lines.join('\n  ')}`);
    status = 'done';
  } catch (err) {
    error = err.message;
    note(`tuning failed: ${err.message}`);
  } finally {
    gpu?.device.destroy();
    await showTiles().catch(() => {});  // the tuned classes as the server now has them
    Object.assign(page.tune, {status, error});  // last: a pass is over once the panel shows its result
    setStatus(page.status, $('status').textContent);
  }
}

const PATHS = {native: 'native f16 (shader-f16)', emulated: 'emulated f16 (pack2x16float, f32 arithmetic)',
               fp32: 'fp32 (no f16)'};

// The adapter panel's 'f16 path' row (once the adapter is shown).
export async function setPathRow(path) {
  await gpuReady.catch(() => {});
  for (const dt of $('gpu-info').querySelectorAll('dt')) {
    if (dt.textContent === 'f16 path') dt.nextElementSibling.textContent = PATHS[path];
  }
}

// The f16 path a run's plan takes, in the panel and in the log with what the plan needs.
export function showPath(path, plan) {
  const what = PATHS[path];
  setPathRow(path);
  const need = Object.entries(plan.required_limits).map(([k, v]) => `${k} ${v}`).join(', ');
  const params = plan.params.reduce((n, p) => n + p.shape.reduce((a, b) => a * b, 1), 0);
  log(`plan: ${plan.config.model} (${plan.layers.join('-')}, ${params.toLocaleString('en')} parameters), ` +
      `${plan.precision}, ${what}; needs ${need}`);
}
