// The page: controls, adapter info, live charts, and the link between runner.js and the server.
// Opening /?run=ID trains (or resumes) that run; the Start button creates a new run first. A
// finished GPT run then generates text on this GPU from the sampling plan the server builds of its
// final checkpoint (`webmp sample`'s), and the results panel offers to sample again.
import {openGPU, Runner, checkPlan, train, generate, decode} from './runner.js';
import {Lens} from './lens.js';

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
// What tests and scripts can read: the page's status, its run, the f16 path and any error.
const page = window.webmp = {status: 'idle', runId: null, f16Path: null, error: null, records: 0, runner: null,
                             sample: {status: 'idle'}, sampled: 0,  // sampled: samples ended (done or failed)
                             noWebGPU: false};  // true: no adapter here, the page cannot train
// The form's fields (GET /api/form), their inputs and the model they show; `sample`: the text
// generation form's defaults (`webmp sample`'s) and limits.
const form = {ready: false, fields: [], defaults: {}, sample: null, inputs: {}, labels: {}, model: null};

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
    throw new Error(`${method} ${path.split('?')[0]}: ${res.status} ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`);
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
// The server describes the TrainConfig fields the form offers (kind, choices, help text, the models
// that read them) and each model's defaults; the page knows no field or default of its own. A run's
// config holds the model and only the fields that differ from that model's defaults: the server
// fills in the rest (MODEL_DEFAULTS), as `webmp train` does for flags left out.

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
    } else {  // int_list: comma-separated
      el.pattern = String.raw`\s*\d+(\s*,\s*\d+)*\s*`;
      el.size = 10;
    }
  }
  el.id = `cfg-${f.name}`;
  return el;
}

function getField(f) {
  const el = form.inputs[f.name];
  switch (f.kind) {
    case 'bool': return el.checked;
    case 'int': return parseInt(el.value, 10);
    case 'float': return parseFloat(el.value);
    case 'int_list': return el.value.split(',').map((x) => parseInt(x, 10));
    default: return el.value;
  }
}

function setField(f, value) {
  const el = form.inputs[f.name];
  if (f.kind === 'bool') el.checked = Boolean(value);
  else el.value = Array.isArray(value) ? value.join(',') : String(value);
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

function formConfig() {
  const model = form.inputs.model.value, cfg = {model};
  for (const f of form.fields) {
    if (f.name === 'model' || !applies(f, model)) continue;
    const value = getField(f);
    if (!sameValue(value, form.defaults[model][f.name])) cfg[f.name] = value;
  }
  return cfg;
}

const formReady = api('/api/form').then(({fields, defaults, sample}) => {
  Object.assign(form, {fields, defaults, sample});
  $('fields').replaceChildren(...fields.map((f) => {
    const label = document.createElement('label'), input = fieldInput(f);
    label.title = f.help;
    label.className = f.kind;
    label.append(f.label, input);
    form.inputs[f.name] = input;
    form.labels[f.name] = label;
    return label;
  }));
  form.inputs.model.addEventListener('change', () => selectModel(form.inputs.model.value));
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

const charts = new Charts();
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
    ...Object.entries(gpu.limits).map(([k, v]) => [k, String(v)]),
    ['features', details(`${gpu.features.length} features`, gpu.features.join(', '))],
  ]);
  page.adapter = a;
  page.hasF16 = gpu.hasF16;
  return gpu;
});
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

function showPath(path, plan) {
  const what = {native: 'native f16 (shader-f16)', emulated: 'emulated f16 (pack2x16float, f32 arithmetic)',
                fp32: 'fp32 (no f16)'}[path];
  const dl = $('gpu-info');
  for (const dt of dl.querySelectorAll('dt')) {
    if (dt.textContent === 'f16 path') dt.nextElementSibling.textContent = what;
  }
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
  fill($('summary'), [
    ['final train loss', Number(s.final_train_loss).toPrecision(5)], ['steps', s.steps], ['skipped steps', s.skipped_steps],
    ['final loss scale', s.final_scale], ['precision', s.precision], ['f16', s.f16_description],
    ['steps / s', s.steps_per_second], ['wall time', `${s.wall_seconds} s`], ['metric readbacks', s.readbacks],
    ['run directory', s.run_dir],
  ].map(([k, v]) => [k, String(v)]));
}

async function trainRun(runId) {
  page.runId = runId;
  page.error = null;
  stopRequested = false;
  setStatus('preparing', `run ${runId}: preparing`);
  $('summary-panel').hidden = true;
  hideSample();
  let sock = null, gpu = null, runner = null, model = null;
  try {
    sock = await openSocket(runId);  // first, so that any failure below reaches the server
    gpu = await openGPU();
    const offer = gpu.hasF16 ? 'native' : 'emulated';
    const {plan, start_step: startStep, f16_path: f16Path} = await api(`/api/runs/${runId}/plan?f16=${offer}`);
    model = plan.config.model;
    page.f16Path = f16Path;
    showPath(f16Path, plan);
    checkPlan(plan, gpu);  // before downloading the blob
    const blob = await api(`/api/runs/${runId}/blob?f16=${offer}`, {raw: true});
    runner = page.runner = await Runner.create(gpu, plan, blob, fetchShader);
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
    setStatus('running', `run ${runId}: training`);
    const t0 = performance.now();
    const done = await train(runner, {
      startStep,
      shouldStop: () => stopRequested,
      onCheckpoint: (s) => uploadCheckpoint(runner, runId, offer, s),
      onRecords: async (records, histograms) => {
        charts.add(records);
        for (let i = 0; i < records.length; i += 500) {
          const last = i + 500 >= records.length;  // the read's lens counts go with its last records
          const ack = await sock.request({type: 'records', run_id: runId, records: records.slice(i, i + 500),
                                          ...(last && histograms ? {histograms} : {})});
          if (last && histograms) lens.show(histograms, ack.histograms);
        }
        page.records += records.length;
        const last = records.at(-1);
        if (last) $('progress').textContent = `step ${last.step + 1}/${steps}, loss ${last.loss.toPrecision(4)}, scale ${last.scale}`;
      },
    });
    const wall = (performance.now() - t0) / 1000;
    if (done > startStep) await uploadCheckpoint(runner, runId, offer, done);
    if (done < steps) {
      await sock.request({type: 'stopped', run_id: runId, step: done});
      setStatus('stopped', `run ${runId}: stopped after ${done} steps (press Resume to continue)`);
      return;
    }
    setStatus('running', `run ${runId}: evaluating on the held-out split`);
    const {correct, counted, lossSum} = await runner.evaluate();
    const state = await runner.readState();
    await sock.request({type: 'summary', run_id: runId, state, test_correct: correct, test_count: counted,
                        val_loss_sum: lossSum, wall_seconds: wall, steps_run: done - startStep,
                        readbacks: runner.readbacks});
    showSummary(await api(`/api/runs/${runId}/summary`));
    setStatus('finished', `run ${runId}: finished`);
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
// settings (422 with one line); the page replays it (runner.js generate) and decodes the tokens with
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

let current = null;  // the run this page shows: {id, status}
const RESUMABLE = ['created', 'disconnected', 'stopped', 'failed'];

// Start trains a new run; on a stopped or failed run it is Resume (from the last checkpoint).
function showRun(id, status) {
  current = {id, status};
  $('start').textContent = RESUMABLE.includes(status) && status !== 'created' ? 'Resume' : 'Start';
}

$('controls').addEventListener('submit', async (e) => {
  e.preventDefault();
  if (!(await hasGPU)) return;  // no run without WebGPU (the button is disabled; Enter in a field submits)
  try {
    let id = current && RESUMABLE.includes(current.status) ? current.id : null;
    if (!id) {
      await formReady;
      id = (await api('/api/runs', {method: 'POST', body: formConfig()})).id;
      history.replaceState(null, '', `?${new URLSearchParams({run: id})}`);
    }
    await trainRun(id);
    showRun(id, page.status);
  } catch (err) {
    page.error = err.message;
    setStatus('failed', err.message);
  }
});

$('stop').addEventListener('click', () => { stopRequested = true; log('stopping at the next metrics read'); });

async function openRun(id) {
  const run = await api(`/api/runs/${id}`);
  await formReady;
  showConfig(run.config);
  if (run.status === 'created' || run.status === 'disconnected') {
    if (await hasGPU) {  // else it stays as it is (noWebGPU says why)
      await trainRun(id);
      showRun(id, page.status);
    }
    return;
  }
  charts.add((await api(`/api/runs/${id}/metrics`)).records);
  if (run.status === 'finished') showSummary(await api(`/api/runs/${id}/summary`));
  setStatus(run.status, `run ${id}: ${run.status}${run.message ? ` — ${run.message}` : ''}`);
  showRun(id, run.status);
  if (run.status === 'finished' && run.config.model === 'gpt') await sampleText(id);
}

if (params.get('run')) {
  openRun(params.get('run')).catch((e) => { page.error = e.message; setStatus('failed', e.message); });
} else {
  gpuReady.then(() => setStatus('idle', 'ready: choose a model and press Start'), () => {});
}
