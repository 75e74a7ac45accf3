// The page: controls, adapter info, live charts, and the link between the GPU (runner.js, loops.js)
// and the server.
// Opening /?run=ID trains (or resumes) a created or disconnected run, follows a run another page
// is training, and shows any other; Start always trains a new run from the form, Resume continues
// the shown run with its own settings. The runs panel (runs.js) lists every run, the compare view
// (compare.js) overlays chosen runs. A finished GPT run then generates text on this GPU from the sampling plan the server builds of its
// final checkpoint (`webmp sample`'s), and the results panel offers to sample again.
import {openGPU, Runner, checkPlan} from './runner.js';
import {train, generate, decode} from './loops.js';
import {adapterSignature, tuneKernels} from './tune.js';
import {RunsPanel} from './runs.js';
import {CompareView} from './compare.js';
import {Lens} from './lens.js';

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
// What tests and scripts can read: the page's status, its run, the f16 path and any error.
const page = window.webmp = {status: 'idle', runId: null, f16Path: null, error: null, records: 0, runner: null,
                             phase: null, phases: [], timing: null, fieldErrors: {},  // a run's phases; the form's errors
                             sample: {status: 'idle'}, sampled: 0,  // sampled: samples ended (done or failed)
                             noWebGPU: false,  // true: no adapter here, the page cannot train
                             // the page's tuning pass: this adapter's key on the server, how many shape
                             // classes are tuned for it, the last pass's status and verdicts
                             tune: {key: null, tuned: 0, status: 'idle', verdicts: [], forms: [], error: null}};
// The form's fields, groups, defaults and presets (GET /api/form), their inputs and the model they
// show; `sample`: the text generation form's defaults (`webmp sample`'s) and limits.
const form = {ready: false, fields: [], groups: [], defaults: {}, presets: [], sample: null, inputs: {}, labels: {},
              model: null};

let stopRequested = false;
let uPlot = null;
try {
  uPlot = (await import('/vendor/uplot/uPlot.esm.js')).default;
} catch {
  $('chart-note').hidden = false;
  $('chart-note').textContent = 'The chart library is missing (run `npm ci --prefix web` on the server); training still works.';
}

function log(line) {
  $('log').textContent += `${new Date().toLocaleTimeString()} ${line}\n`;
}

function setStatus(status, text = status) {
  page.status = status;
  $('status').textContent = text;
  $('status-line').className = status;
  const busy = status === 'preparing' || status === 'running';
  $('start').disabled = busy || !form.ready || page.noWebGPU;
  $('stop').disabled = !busy;
  $('resume').disabled = busy || page.noWebGPU;
}

function fill(dl, entries) {
  dl.replaceChildren(...entries.flatMap(([k, v]) => {
    const dt = document.createElement('dt'), dd = document.createElement('dd');
    dt.textContent = k;
    dd.append(v);  // text or an element
    return [dt, dd];
  }));
}

function details(summary, text) {
  const d = document.createElement('details'), s = document.createElement('summary');
  s.textContent = summary;
  d.append(s, text);
  return d;
}

// --- talking to the server ---------------------------------------------------------------------

async function api(path, {method = 'GET', body, raw = false} = {}) {
  const headers = {};  // a server with a token set it as a cookie when this page was opened
  if (body !== undefined && !(body instanceof ArrayBuffer)) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {method, headers,
    body: body === undefined || body instanceof ArrayBuffer ? body : JSON.stringify(body)});
  if (!res.ok) {
    const detail = await res.json().then((j) => j.detail, () => res.statusText);
    const err = new Error(`${method} ${path.split('?')[0]}: ${res.status} ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`);
    Object.assign(err, {status: res.status, detail});
    throw err;
  }
  return raw ? res.arrayBuffer() : res.json();
}

// JSON has no NaN or Infinity: send them as strings, which the server's pydantic models accept.
const finite = (key, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v);

// The run's WebSocket: every message gets one reply (ack or error), in order.
class RunSocket {
  static open(runId) {
    const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/api/runs/${runId}/ws`;
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      ws.onmessage = (e) => {
        const m = JSON.parse(e.data);
        if (m.type === 'welcome') resolve(new RunSocket(ws));
        else reject(new Error(m.message || 'the server refused the connection'));
      };
      ws.onclose = (e) => reject(new Error(`the server closed the connection (${e.code})`));
    });
  }

  constructor(ws) {
    this.ws = ws;
    this.waiting = [];
    ws.onmessage = (e) => {
      const m = JSON.parse(e.data), w = this.waiting.shift();
      if (!w) return;
      if (m.type === 'error') w.reject(new Error(`server: ${m.message}`));
      else w.resolve(m);
    };
    ws.onclose = () => {
      for (const w of this.waiting.splice(0)) w.reject(new Error('the connection to the server closed'));
    };
  }

  request(msg) {
    if (this.ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error('the connection to the server closed'));
    return new Promise((resolve, reject) => {
      this.waiting.push({resolve, reject});
      this.ws.send(JSON.stringify(msg, finite));
    });
  }

  close() { this.ws.close(); }
}

async function openSocket(runId) {
  // A reloaded page can arrive before the server has seen the old page leave: retry briefly.
  for (let attempt = 1; ; attempt++) {
    try {
      return await RunSocket.open(runId);
    } catch (e) {
      if (attempt >= 5 || !/already has a page/.test(e.message)) throw e;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

// --- the form: made from GET /api/form ---------------------------------------------------------
// The server describes every TrainConfig field (kind, choices, help text, the models that read it,
// its group, whether it shows before "more settings", why a page cannot set it), each model's
// defaults and the presets; the page knows no field, default or preset of its own. A run's config
// holds the model and only the fields that differ from that model's defaults: the server fills in
// the rest (MODEL_DEFAULTS), as `webmp train` does for flags left out. The server validates (422: one
// "invalid FIELD: message" line per field, `webmp train`'s words), and each message is shown next to
// its field.

const sameValue = (a, b) => JSON.stringify(a) === JSON.stringify(b);

function fieldInput(f) {
  let el;
  if (f.kind === 'choice') {
    el = document.createElement('select');
    for (const c of f.choices) el.append(new Option(c, c));
  } else {
    el = document.createElement('input');
    if (f.kind === 'bool') {
      el.type = 'checkbox';
    } else if (f.kind === 'int' || f.kind === 'float') {
      el.type = 'number';  // ranges are the server's to check (its 422 names the field)
      el.step = f.kind === 'int' ? '1' : 'any';
    } else {  // int_list (comma-separated) or text
      el.size = 10;
    }
  }
  el.id = `cfg-${f.name}`;
  el.disabled = f.disabled !== null;
  return el;
}

// A number as typed, else the text itself: the server's message then says what is wrong with it.
const number = (text) => (text.trim() !== '' && Number.isFinite(Number(text)) ? Number(text) : text);

function getField(f) {
  const el = form.inputs[f.name];
  switch (f.kind) {
    case 'bool': return el.checked;
    case 'int': case 'float': return number(el.value);
    case 'int_list': return el.value.split(',').map(number);
    case 'text': return el.value === '' ? null : el.value;
    default: return el.value;
  }
}

function setField(f, value) {
  const el = form.inputs[f.name];
  if (f.kind === 'bool') el.checked = Boolean(value);
  else el.value = Array.isArray(value) ? value.join(',') : value === null ? '' : String(value);
}

const applies = (f, model) => f.models === null || f.models.includes(model);

// Shows the fields `model` reads; a field still at the previous model's default takes this one's.
function selectModel(model) {
  const before = form.model === null ? null : form.defaults[form.model];
  for (const f of form.fields) {
    if (f.name !== 'model' && (before === null || sameValue(getField(f), before[f.name]))) {
      setField(f, form.defaults[model][f.name]);
    }
    form.labels[f.name].hidden = !applies(f, model);
  }
  form.model = model;
}

// A run's config: every field as it was (a run opened from its URL).
function showConfig(cfg) {
  for (const f of form.fields) setField(f, cfg[f.name]);
  form.model = cfg.model;
  selectModel(cfg.model);  // the same model: only shows its fields
}

// A preset: its model's defaults with the preset's fields changed.
function applyPreset(name) {
  const preset = form.presets.find((p) => p.name === name);
  $('preset-note').textContent = preset ? preset.description : '';
  if (!preset) return;
  const cfg = {...form.defaults[preset.config.model || 'mlp'], ...preset.config};
  showConfig(cfg);
  showFieldErrors('');
}

function formConfig() {
  const model = form.inputs.model.value, cfg = {model};
  for (const f of form.fields) {
    if (f.name === 'model' || f.disabled !== null || !applies(f, model)) continue;
    const value = getField(f);
    if (!sameValue(value, form.defaults[model][f.name])) cfg[f.name] = value;
  }
  return cfg;
}

// The server's 422 lines ("invalid FIELD: message", `webmp train`'s) next to their fields; lines
// about the config as a whole (or a field the form does not show) go under the form.
function showFieldErrors(detail) {
  const general = [];
  page.fieldErrors = {};
  for (const el of document.querySelectorAll('#fields .field-error')) el.textContent = '';
  for (const line of detail.split('\n').filter(Boolean)) {
    const m = /^invalid ([A-Za-z_0-9]+)[^:]*: (.*)$/.exec(line);
    const label = m && form.labels[m[1]];
    if (label && !label.hidden) {
      label.querySelector('.field-error').textContent = m[2];
      page.fieldErrors[m[1]] = m[2];
      label.closest('details')?.setAttribute('open', '');
    } else {
      general.push(line);
    }
  }
  $('form-error').textContent = general.join('\n');
  $('form-error').hidden = general.length === 0;
}

function fieldLabel(f) {
  const label = document.createElement('label'), name = document.createElement('span');
  const error = document.createElement('span');
  label.title = f.help;
  label.className = `field ${f.kind}`;
  name.textContent = f.label;
  error.className = 'field-error';
  error.setAttribute('role', 'alert');
  const input = fieldInput(f);
  label.append(name, input, error);
  if (f.disabled !== null) {
    const why = document.createElement('small');
    why.className = 'why';
    why.textContent = `not in the browser: ${f.disabled}`;
    label.append(why);
  }
  form.inputs[f.name] = input;
  form.labels[f.name] = label;
  return label;
}

// Each group's common fields, then "more settings" holding the rest, by group again.
function buildForm() {
  const fieldset = (group, fields) => {
    const box = document.createElement('fieldset'), legend = document.createElement('legend');
    box.className = `group group-${group.name}`;
    legend.textContent = group.title;
    box.append(legend, ...fields.map(fieldLabel));
    return box;
  };
  const inGroup = (g, common) => form.fields.filter((f) => f.group === g.name && f.common === common);
  const more = document.createElement('details'), summary = document.createElement('summary');
  const groups = document.createElement('div');
  more.id = 'more-settings';
  summary.textContent = 'more settings';
  groups.id = 'more-groups';
  groups.append(...form.groups.map((g) => fieldset(g, inGroup(g, false))).filter((b) => b.children.length > 1));
  more.append(summary, groups);
  $('fields').replaceChildren(...form.groups.map((g) => fieldset(g, inGroup(g, true))), more);
  $('preset').append(...form.presets.map((p) => new Option(p.title, p.name)));
}

const formReady = api('/api/form').then(({fields, groups, defaults, presets, sample}) => {
  Object.assign(form, {fields, groups, defaults, presets, sample});
  buildForm();
  form.inputs.model.addEventListener('change', () => selectModel(form.inputs.model.value));
  $('preset').addEventListener('change', () => applyPreset($('preset').value));
  selectModel(form.inputs.model.value);
  form.ready = true;
  setStatus(page.status, $('status').textContent);
});
formReady.catch((e) => { page.error = e.message; setStatus('failed', `the form could not be loaded: ${e.message}`); });

// --- charts: loss (log10) and loss scale (log2) with skipped steps marked ------------------------

class Charts {
  constructor() {
    this.reset();
    // The charts take their section's width, also after the window is resized.
    new ResizeObserver(() => {
      for (const c of [this.lossChart, this.scaleChart]) c?.setSize({width: this.width(), height: 230});
    }).observe($('charts'));
  }

  width() { return Math.max(300, $('charts').clientWidth); }

  reset() {
    this.data = {step: [], loss: [], scale: [], skipped: []};
    for (const c of [this.lossChart, this.scaleChart]) c?.destroy();
    this.lossChart = this.scaleChart = null;
  }

  add(records) {
    for (const r of records) {
      const ok = (v) => (Number.isFinite(v) && v > 0 ? v : null);
      this.data.step.push(r.step);
      this.data.loss.push(ok(Math.max(r.loss, 1e-12)));
      this.data.scale.push(ok(r.scale));
      this.data.skipped.push(r.skipped ? ok(r.scale) : null);
    }
    this.draw();
  }

  draw() {
    if (!uPlot || this.data.step.length === 0) return;
    const d = this.data;
    if (!this.lossChart) {
      const width = this.width();
      const x = {time: false};
      this.lossChart = new uPlot({
        title: 'training loss', width, height: 230, scales: {x, y: {distr: 3}},
        series: [{label: 'step'}, {label: 'loss', stroke: '#1f77b4', width: 1.5}],
        axes: [{label: 'step'}, {label: 'loss (log scale)', size: 80}],
      }, [d.step, d.loss], $('loss-chart'));
      this.scaleChart = new uPlot({
        title: 'loss scale', width, height: 230, scales: {x, y: {distr: 3, log: 2}},
        series: [
          {label: 'step'},
          {label: 'loss scale', stroke: '#ff7f0e', width: 1.5},
          {label: 'skipped step', stroke: '#d62728', fill: '#d62728', paths: () => null,
           points: {show: true, size: 9, stroke: '#d62728', fill: '#d62728'}},
        ],
        axes: [{label: 'step'}, {label: 'loss scale (log2)', size: 80,  // unlabelled minor ticks come as null
                values: (u, vals) => vals.map((v) => (v > 0 ? `2^${Math.round(Math.log2(v))}` : ''))}],
      }, [d.step, d.scale, d.skipped], $('scale-chart'));
    } else {
      this.lossChart.setData([d.step, d.loss]);
      this.scaleChart.setData([d.step, d.scale, d.skipped]);
    }
  }
}

const charts = page.charts = new Charts();  // page.charts.data: the points drawn
const lens = new Lens($('lens'));

// --- the adapter -------------------------------------------------------------------------------

// The adapter, shown when the page opens (each run then opens its own device: a finished run
// destroys its device to free its memory).
const gpuReady = openGPU().then((gpu) => {
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
// the tiles tuned for this adapter, looked up before any run asks for its plan
const tilesReady = gpuReady.then(showTiles).catch((e) => log(`tuned tiles not looked up: ${e.message}`));
gpuReady.catch(noWebGPU);
const hasGPU = gpuReady.then(() => true, () => false);

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

// --- the page's tuning pass (web/tune.js): matmul tiles measured here, kept by the server ----------

async function showTiles() {
  const {adapter_key: key, tuned, forms} = await api('/api/adapters', {method: 'POST', body: page.signature});
  const n = Object.keys(tuned).length;
  Object.assign(page.tune, {key, tuned: n});
  const chosen = Object.entries(forms).map(([what, form]) => `; ${what}: ${form}`).join('');
  const what = n ? `tuned on this adapter (${n} shape classes${chosen})` : 'default (no tuning pass on this adapter yet)';
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

$('tune-form').addEventListener('submit', async (e) => {
  e.preventDefault();
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
    note(`tuned ${verdicts.length} shape classes` + forms.map((f) => `, ${f.what}: ${f.form}`).join('') +
         ` in ${((performance.now() - t0) / 1000).toFixed(1)} s` +
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
});

const PATHS = {native: 'native f16 (shader-f16)', emulated: 'emulated f16 (pack2x16float, f32 arithmetic)',
               fp32: 'fp32 (no f16)'};

// The adapter panel's 'f16 path' row (once the adapter is shown).
async function setPathRow(path) {
  await gpuReady.catch(() => {});
  for (const dt of $('gpu-info').querySelectorAll('dt')) {
    if (dt.textContent === 'f16 path') dt.nextElementSibling.textContent = PATHS[path];
  }
}

function showPath(path, plan) {
  const what = PATHS[path];
  setPathRow(path);
  const need = Object.entries(plan.required_limits).map(([k, v]) => `${k} ${v}`).join(', ');
  const params = plan.params.reduce((n, p) => n + p.shape.reduce((a, b) => a * b, 1), 0);
  log(`plan: ${plan.config.model} (${plan.layers.join('-')}, ${params.toLocaleString('en')} parameters), ` +
      `${plan.precision}, ${what}; needs ${need}`);
}

// --- a run -------------------------------------------------------------------------------------

const fetchShader = (name) => fetch(`/shaders/${name}`).then((r) => {
  if (!r.ok) throw new Error(`shader ${name}: ${r.status}`);
  return r.text();
});

async function uploadCheckpoint(runner, runId, offer, step) {
  const bytes = await runner.read(runner.plan.checkpoint_buffers);
  await api(`/api/runs/${runId}/checkpoint?f16=${offer}&step=${step}`, {method: 'PUT', body: bytes});
  log(`checkpoint at step ${step} uploaded`);
}

// A language model's summary has val_loss (nats per character); the MLPs' has only test accuracy.
function showSummary(s) {
  $('summary-panel').hidden = false;
  const accuracy = `${(100 * s.test_accuracy).toFixed(2)} % (${s.test_correct}/${s.test_count})`;
  const lm = s.val_loss !== null && s.val_loss !== undefined;
  $('headline').textContent = lm
    ? `validation loss ${Number(s.val_bits_per_char).toFixed(3)} bits/char`
    : `test accuracy ${accuracy}`;
  $('baseline').hidden = !lm;
  $('baseline').textContent = lm
    ? `${Number(s.val_loss).toFixed(4)} nats per character; unigram baseline ` +
      `${Number(s.unigram_bits_per_char).toFixed(3)} bits/char; next-character accuracy ${accuracy}`
    : '';
  // the last step's figures are summary.json's, which are its record's: the charts' last point
  fill($('summary'), [
    ['steps', s.steps], ['last train loss', s.last_loss], ['final loss scale', s.final_scale],
    ['mean loss, last steps', Number(s.final_train_loss).toPrecision(5)], ['skipped steps', s.skipped_steps],
    ['precision', s.precision], ['f16', s.f16_description],
    ['steps / s', s.steps_per_second === null ? '(under two steps)' : `${s.steps_per_second} (after the first step)`],
    ['timed', `${s.wall_seconds} s`], ['metric readbacks', s.readbacks], ['run directory', s.run_dir],
  ].map(([k, v]) => [k, String(v)]));
  page.result = Object.fromEntries([...$('summary').querySelectorAll('dt')].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]));
}

// A run's phases and their times (performance.now() ms), on window.webmp.timing for tests: compiling
// (compileStart .. compileEnd, `compiled` of `kernels` pipelines), the first step (trainStart ..
// firstStepDone, the driver's first-use compilation included), training (firstStepDone ..
// lastStepDone, `stepsDone` steps done by then; the progress line moved `stepUpdates` times). page.phases
// lists each phase as the page showed it.
function newTiming() {
  return {compileStart: performance.now(), compileEnd: null, kernels: null, compiled: 0, trainStart: null,
          firstStep: null, firstStepDone: null, lastStepDone: null, stepsDone: 0, stepUpdates: 0, trainEnd: null};
}

// The steps timed and their seconds: those after the first step of this page's run.
function trainingSteps(t) {
  if (t.firstStepDone === null || t.stepsDone <= t.firstStep) return {steps: 0, seconds: 0};
  return {steps: t.stepsDone - t.firstStep, seconds: (t.lastStepDone - t.firstStepDone) / 1000};
}

function stepsPerSecond(t) {
  const {steps, seconds} = trainingSteps(t);
  return seconds > 0 ? steps / seconds : null;
}

function setPhase(phase, text) {
  page.phase = phase;
  page.phases.push({phase, text});
  $('status').textContent = text;
}

async function trainRun(runId) {
  page.runId = runId;
  page.error = null;
  page.phases = [];
  stopRequested = false;
  setStatus('preparing', `run ${runId}: preparing`);
  $('summary-panel').hidden = true;
  hideSample();
  let sock = null, gpu = null, runner = null, model = null;
  try {
    sock = await openSocket(runId);  // first, so that any failure below reaches the server
    gpu = await openGPU();
    const offer = gpu.hasF16 ? 'native' : 'emulated';
    await tilesReady;
    page.planRequested = performance.now();  // webmp bench --cold-start: plan to first finished step
    const tiles = page.tune.tuned ? `&tiles=${page.tune.key}` : '';
    const {plan, start_step: startStep, f16_path: f16Path, matmul_tiles: matmulTiles} =
      await api(`/api/runs/${runId}/plan?f16=${offer}${tiles}`);
    log(`matmul tiles: ${matmulTiles}`);
    model = plan.config.model;
    page.f16Path = f16Path;
    showPath(f16Path, plan);
    checkPlan(plan, gpu);  // before downloading the blob
    const blob = await api(`/api/runs/${runId}/blob?f16=${offer}${tiles}`, {raw: true});
    const timing = page.timing = newTiming();
    runner = page.runner = await Runner.create(gpu, plan, blob, fetchShader, (k, n) => {
      timing.compiled = k;
      timing.kernels = n;
      const seconds = ((performance.now() - timing.compileStart) / 1000).toFixed(1);
      setPhase('compiling', `run ${runId}: compiling kernels ${k}/${n} (${seconds} s)`);
    });
    timing.compileEnd = performance.now();
    log(`compiled ${timing.kernels} kernels in ${((timing.compileEnd - timing.compileStart) / 1000).toFixed(2)} s`);
    charts.reset();
    lens.reset(plan.histograms);
    if (startStep > 0) {
      const {records} = await api(`/api/runs/${runId}/metrics`);
      charts.add(records.filter((r) => r.step < startStep));
      log(`resuming from the checkpoint at step ${startStep}`);
    }
    await sock.request({type: 'hello', run_id: runId, f16_path: f16Path, start_step: startStep,
                        adapter: gpu.adapter, features: gpu.features, limits: gpu.limits});
    const steps = plan.schedule.steps;
    let last = null;  // the last record read
    const showProgress = () => {
      const rate = stepsPerSecond(timing);
      $('progress').textContent = [`step ${timing.stepsDone}/${steps}`, rate !== null ? `${rate.toFixed(1)} steps/s` : '',
        last ? `loss ${last.loss.toPrecision(4)} and scale ${last.scale} at step ${last.step + 1}` : ''].filter(Boolean).join(', ');
    };
    timing.stepsDone = startStep;
    setStatus('running', `run ${runId}: training (first step: the GPU driver may still compile kernels)`);
    setPhase('first-step', $('status').textContent);
    timing.trainStart = performance.now();
    const done = await train(runner, {
      startStep,
      shouldStop: () => stopRequested,
      onCheckpoint: (s) => uploadCheckpoint(runner, runId, offer, s),
      onStepDone: (s, t) => {
        timing.stepsDone = s;
        timing.stepUpdates++;
        timing.lastStepDone = t;
        if (timing.firstStepDone === null) {
          timing.firstStepDone = t;
          timing.firstStep = s;
          const seconds = ((t - timing.trainStart) / 1000).toFixed(2);
          log(`first step done in ${seconds} s`);
          setPhase('training', `run ${runId}: training (first step ${seconds} s)`);
        }
        showProgress();
      },
      onRecords: async (records, histograms) => {
        charts.add(records);
        for (let i = 0; i < records.length; i += 500) {
          const final = i + 500 >= records.length;  // the read's lens counts go with its last records
          const ack = await sock.request({type: 'records', run_id: runId, records: records.slice(i, i + 500),
                                          ...(final && histograms ? {histograms} : {})});
          if (final && histograms) lens.show(histograms, ack.histograms);
          if (ack.stop && !stopRequested) {  // a Stop pressed in a page following this run
            stopRequested = true;
            log('another page asked this run to stop: stopping at the next metrics read');
          }
        }
        page.records += records.length;
        last = records.at(-1) || last;
        showProgress();
      },
    });
    await runner.device.queue.onSubmittedWorkDone();  // every step's onStepDone has run
    timing.trainEnd = performance.now();
    if (done > startStep) await uploadCheckpoint(runner, runId, offer, done);
    if (done < steps) {
      await sock.request({type: 'stopped', run_id: runId, step: done});
      setStatus('stopped', `run ${runId}: stopped after ${done} steps (press Resume to continue)`);
      return;
    }
    setStatus('running', `run ${runId}: evaluating on the held-out split`);
    setPhase('evaluating', $('status').textContent);
    const {correct, counted, lossSum} = await runner.evaluate();
    const state = await runner.readState();
    // steps/s of training only: from the end of the first step (which holds the driver's
    // first-use compilation) to the end of the last, as the progress line showed it
    const timed = trainingSteps(timing);
    await sock.request({type: 'summary', run_id: runId, state, test_correct: correct, test_count: counted,
                        val_loss_sum: lossSum, wall_seconds: timed.seconds, steps_run: timed.steps,
                        readbacks: runner.readbacks});
    showSummary(await api(`/api/runs/${runId}/summary`));
    const secs = (a, b) => `${((b - a) / 1000).toFixed(1)} s`;
    setStatus('finished', `run ${runId}: finished (kernels compiled in ${secs(timing.compileStart, timing.compileEnd)}, ` +
              `first step ${secs(timing.trainStart, timing.firstStepDone)})`);
  } catch (failure) {
    const e = runner ? await runner.cause(failure) : failure;
    page.error = e.message;
    setStatus('failed', `run ${runId} failed: ${e.message}`);
    log(`error: ${e.message}`);
    await sock?.request({type: 'failed', run_id: runId, message: e.message.slice(0, 2000)}).catch(() => {});
  } finally {
    sock?.close();
    if (runner) runner.destroy();
    else gpu?.device.destroy();
  }
  if (page.status === 'finished' && model === 'gpt') await sampleText(runId);  // its device is freed
}

// --- text generation: a finished GPT run's sampling plan, replayed on this page's GPU -----------------
// The server builds the plan from the run's final checkpoint with `webmp sample`'s code and checks the
// settings (422 with one line); the page replays it (loops.js generate) and decodes the tokens with
// the plan's vocabulary. The form starts at `webmp sample`'s defaults, served in GET /api/form.

let sampleGeneration = 0;  // a newer run or sample makes an older sample's result stale

function hideSample() {
  sampleGeneration++;
  $('sample-box').hidden = true;
  $('sample').replaceChildren();
  $('sample-note').textContent = '';
  page.sample = {status: 'idle'};
}

// Shows the sample form for run `runId`, filled with the served defaults the first time.
function showSampleForm(runId) {
  const box = $('sample-box');
  if (box.dataset.run !== runId) {
    box.dataset.run = runId;
    for (const k of ['prompt', 'tokens', 'temperature', 'seed']) $(`sample-${k}`).value = String(form.sample[k]);
    $('sample-tokens').max = String(form.sample.max_tokens);
    $('sample-prompt').maxLength = form.sample.max_prompt;
  }
  box.hidden = false;
}

// The form's settings as typed (the server parses and checks them).
const sampleSettings = () => Object.fromEntries(['prompt', 'tokens', 'temperature', 'seed'].map((k) => [k, $(`sample-${k}`).value]));

function showSampleText(prompt, generated) {
  const mark = document.createElement('mark');
  mark.textContent = prompt;
  $('sample').replaceChildren(...(prompt ? [mark] : []), document.createTextNode(generated));
}

async function sampleText(runId, settings = null) {
  await formReady;
  showSampleForm(runId);
  settings = settings || sampleSettings();
  const mine = ++sampleGeneration;
  const current = () => mine === sampleGeneration;
  page.sample = {status: 'running', runId, ...settings};
  $('sample-go').disabled = true;
  $('sample-note').className = '';
  $('sample-note').textContent = 'generating on this GPU…';
  let gpu = null, runner = null;
  try {
    gpu = await openGPU();
    const offer = gpu.hasF16 ? 'native' : 'emulated';
    const query = new URLSearchParams({f16: offer, ...settings});
    const got = await api(`/api/runs/${runId}/sample?${query}`);
    checkPlan(got.plan, gpu);
    const blob = await api(`/api/runs/${runId}/sample/blob?${query}`, {raw: true});
    const t0 = performance.now();
    runner = await Runner.create(gpu, got.plan, blob, fetchShader);
    const t1 = performance.now();
    const {ids, overflow} = await generate(runner);
    const seconds = (performance.now() - t1) / 1000;
    const text = got.prompt + decode(ids, got.plan.sample.vocab);
    if (!current()) return;
    showSampleText(got.prompt, text.slice(got.prompt.length));
    const what = `${got.tokens} characters at temperature ${got.temperature}, seed ${got.seed}, ${got.f16_path} ` +
                 `f16 path: generated in ${seconds.toFixed(2)} s, after ${((t1 - t0) / 1000).toFixed(1)} s creating the pipelines`;
    $('sample-note').textContent = what + (overflow ? '; an activation overflowed the f16 range, the text may be garbage' : '');
    log(`sample: ${what}`);
    page.sample = {status: 'done', runId, text, prompt: got.prompt, tokens: got.tokens, temperature: got.temperature,
                   seed: got.seed, f16Path: got.f16_path, overflow, seconds};
    page.sampled++;
  } catch (failure) {
    const e = runner ? await runner.cause(failure) : failure;
    if (!current()) return;
    $('sample-note').className = 'error';
    $('sample-note').textContent = e.message;
    log(`sample: ${e.message}`);
    page.sample = {status: 'failed', runId, ...settings, error: e.message};
    page.sampled++;
  } finally {
    if (runner) runner.destroy();
    else gpu?.device.destroy();
    if (current()) $('sample-go').disabled = false;
  }
}

$('sample-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const runId = $('sample-box').dataset.run;
  if (runId) sampleText(runId);
});

// --- controls ----------------------------------------------------------------------------------

let current = null;  // the run this page shows: a RunInfo (GET /api/runs/{id}) with its status now
let following = null;  // {id, ws}: this page watches a run another page trains (WS /api/runs/{id}/follow)

// The form's fields that differ from a run's settings (labels), to say what Resume leaves out.
function formChanges(cfg) {
  return form.fields.filter((f) => applies(f, form.inputs.model.value) && !sameValue(getField(f), cfg[f.name]))
    .map((f) => f.label);
}

const describe = (cfg) => `${cfg.model}, ${cfg.precision}, ${cfg.steps} steps`;

// Start always trains a new run from the form. Resume is offered for the browser run this page
// shows when it stopped, failed or lost its page, and says that it continues that run with the
// run's own settings (the form showed them when the run was opened; changes made since go to Start).
function showRun(run) {
  current = run;
  updateResume();
  runsPanel.refresh();
}

function updateResume() {
  const run = current, note = $('resume-note');
  const offer = run !== null && run.resumable;  // the server's word (RunInfo.resumable)
  $('resume').hidden = !offer;
  note.hidden = run === null || (!offer && run.kind !== 'native');
  if (run === null) return;
  if (run.kind === 'native') {
    note.textContent = `run ${run.id} was trained natively (webmp train): it is shown read-only here; ` +
      'continue it with `webmp train --resume` on its machine, or use its settings with Start for a new run.';
    return;
  }
  if (!offer) return;
  $('resume').textContent = `Resume ${run.id}`;
  const changed = form.ready ? formChanges(run.config) : [];
  note.textContent = `Resume continues run ${run.id} with its own settings (${describe(run.config)})` +
    (run.checkpoint_step ? ` from its checkpoint at step ${run.checkpoint_step}` : ' from step 0') + '. ' +
    (changed.length ? `The form's changes (${changed.join(', ')}) are not applied: Start trains a new run with them.`
                    : 'Start trains a new run with the form\'s settings.');
}

$('controls').addEventListener('input', updateResume);
$('controls').addEventListener('change', updateResume);

$('controls').addEventListener('submit', async (e) => {
  e.preventDefault();
  if (!(await hasGPU)) return;  // no run without WebGPU (the button is disabled; Enter in a field submits)
  try {
    await formReady;
    showFieldErrors('');
    const run = await api('/api/runs', {method: 'POST', body: formConfig()});
    history.replaceState(null, '', `?${new URLSearchParams({run: run.id})}`);
    stopFollowing();
    showRun(run);
    await trainRun(run.id);
    showRun(await api(`/api/runs/${run.id}`));  // its status, checkpoint and resumability as stored
  } catch (err) {
    page.error = err.message;
    if (err.status === 422 && typeof err.detail === 'string') {  // the config: no run was created
      showFieldErrors(err.detail);
      setStatus('failed', 'the server refused the settings: see the messages next to the fields');
    } else {
      setStatus('failed', err.message);
    }
  }
});

async function resume(run) {
  if (!(await hasGPU)) return;
  showConfig(run.config);  // what trains is the run's own settings
  await trainRun(run.id);
  showRun(await api(`/api/runs/${run.id}`));
}

$('resume').addEventListener('click', () => {
  if (current) resume(current).catch((e) => { page.error = e.message; setStatus('failed', e.message); });
});

$('stop').addEventListener('click', async () => {
  if (following) {  // the page training the run stops at its next metrics read (the server asks it)
    const id = following.id;
    try {
      await api(`/api/runs/${id}/stop`, {method: 'POST', body: {}});
      log(`asked the page training run ${id} to stop`);
    } catch (e) {
      log(`stop: ${e.message}`);
    }
    return;
  }
  stopRequested = true;
  log('stopping at the next metrics read');
});

// --- following a run another page trains: its records as they come (WS /api/runs/{id}/follow) ------

function stopFollowing() {
  if (following) following.ws.close();
  following = null;
  page.mode = 'training';
}

function follow(run) {
  stopFollowing();
  lens.reset(null);  // a follower gets records, not the trainer's lens counts
  page.mode = 'following';
  page.records = 0;
  charts.reset();
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/api/runs/${run.id}/follow`;
  const ws = new WebSocket(url), mine = {id: run.id, ws};
  following = mine;
  const where = run.kind === 'native' ? 'natively (webmp train)' : 'in another page';
  const live = (status, asked) => {
    setStatus('running', `run ${run.id}: ${status === 'created' ? 'being prepared' : 'training'} ${where}; following it live` +
      (asked ? ' (stop asked: it stops at its next metrics read)' : ''));
    $('stop').disabled = run.kind === 'native';  // a native run is stopped where it runs (Ctrl-C)
  };
  live(run.status, run.stop_requested);
  ws.onmessage = async (e) => {
    if (following !== mine) return;
    const m = JSON.parse(e.data);
    if (m.type === 'records') {
      charts.add(m.records);
      page.records += m.records.length;
      const last = m.records.at(-1);
      if (last) $('progress').textContent = `step ${last.step + 1}/${run.steps}, loss ${Number(last.loss).toPrecision(4)}, scale ${last.scale}`;
    } else if (m.type === 'status' && m.status === 'created' && !m.connected) {
      stopFollowing();  // the page that was preparing it left before it started
      setStatus('idle', `run ${run.id}: the page preparing it left before it started; reload this page to train it here`);
    } else if (m.type === 'status' && (m.status === 'running' || m.status === 'created')) {
      live(m.status, m.stop_requested);
    } else if (m.type === 'status') {
      following = null;
      if (m.status === 'finished') showSummary(await api(`/api/runs/${run.id}/summary`));
      setStatus(m.status, `run ${run.id}: ${m.status}${m.message ? ` — ${m.message}` : ''}`);
      showRun(await api(`/api/runs/${run.id}`));
    } else if (m.type === 'error') {
      following = null;
      page.error = m.message;
      setStatus('failed', m.message);
    }
  };
  ws.onclose = () => {
    if (following !== mine) return;
    following = null;
    page.error = 'the connection to the server closed';
    setStatus('failed', `run ${run.id}: the connection to the server closed while following it; reload to follow again`);
  };
}

// --- the runs panel and the compare view -----------------------------------------------------------

const compareView = new CompareView({api, uPlot});
const runsPanel = new RunsPanel({
  api,
  onCompare: (runs) => compareView.show(runs).catch((e) => log(`compare: ${e.message}`)),
  onNewFrom: async (run) => {  // its settings in the form; Start then trains a new run
    await formReady;
    showConfig(run.config);
    if (page.status === 'preparing' || page.status === 'running') {
      log(`the form holds run ${run.id}'s settings: Start trains a new run with them once this one ends`);
      return;
    }
    stopFollowing();
    history.replaceState(null, '', location.pathname);
    charts.reset();
    lens.reset(null);
    $('summary-panel').hidden = true;
    hideSample();
    showRun(null);
    setStatus('idle', `the form holds run ${run.id}'s settings: press Start to train a new run with them`);
  },
});
runsPanel.refresh();

async function openRun(id) {
  const run = await api(`/api/runs/${id}`);
  await formReady;
  showConfig(run.config);  // the form shows the run's settings
  showRun(run);
  if (run.status === 'running' || run.connected) {  // another page (or `webmp train`) trains it: only one does
    follow(run);
    return;
  }
  const resumeAsked = params.get('resume') === '1' && run.resumable;
  if (resumeAsked) history.replaceState(null, '', `?${new URLSearchParams({run: id})}`);
  if (run.kind === 'browser' && (run.status === 'created' || run.status === 'disconnected' || resumeAsked)) {
    if (await hasGPU) await resume(run);  // else it stays as it is (noWebGPU says why)
    return;
  }
  charts.add((await api(`/api/runs/${id}/metrics`)).records);
  await api(`/api/runs/${id}/histograms`).then((view) => lens.showStored(view), (e) => {
    if (e.status !== 404) log(`gradient histograms: ${e.message}`);  // 404: the run has none yet
  });
  if (run.f16_path) {  // the path the run trained on (its page said so in its hello)
    page.f16Path = run.f16_path;
    setPathRow(run.f16_path);
  }
  if (run.status === 'finished') showSummary(await api(`/api/runs/${id}/summary`));
  setStatus(run.status, `run ${id}: ${run.status}${run.message ? ` — ${run.message}` : ''}`);
  if (run.status === 'finished' && run.config.model === 'gpt' && run.kind === 'browser') await sampleText(id);
}

if (params.get('run')) {
  openRun(params.get('run')).catch((e) => { page.error = e.message; setStatus('failed', e.message); });
} else {
  gpuReady.then(() => setStatus('idle', 'ready: choose a model and press Start'), () => {});
}
