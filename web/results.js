// The result panel: a finished run's summary (GET /api/runs/{id}/summary, its summary.json) and,
// for a GPT run, text generated on this page's GPU from its final checkpoint, with a form to sample
// again.
import {openGPU, Runner, checkPlan} from './runner.js';
import {generate, decode} from './loops.js';
import {$, page, log, fill} from './page.js';
import {api, fetchShader} from './server.js';
import {form, formReady} from './form.js';

// A language model's summary has val_loss (nats per character); the MLPs' has only test accuracy.
// The Result panel of run `runId` from its summary.json, with its files to download.
export function showSummary(s, runId) {
  $('summary-panel').hidden = false;
  showDownloads(runId);
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

const sizeText = (n) => (n === null ? '' : n < 1024 ? `${n} B` : n < 1 << 20 ? `${(n / 1024).toFixed(1)} kB` : `${(n / (1 << 20)).toFixed(1)} MB`);

// Links to every file of the run (the server lists them): each downloads as itself.
async function showDownloads(runId) {
  const box = $('downloads');
  box.replaceChildren('downloads: ');
  let files;
  try {
    files = await api(`/api/runs/${runId}/files`);
  } catch (e) {
    box.append(`(the run's files could not be listed: ${e.message})`);
    return;
  }
  files.forEach((f, i) => {
    const a = document.createElement('a');
    a.href = `/api/runs/${runId}/files/${encodeURIComponent(f.name)}`;
    a.download = f.name;
    a.textContent = f.name;
    a.title = `${f.what}${f.bytes === null ? '' : ` (${sizeText(f.bytes)})`}`;
    box.append(...(i ? [' · '] : []), a);
  });
  page.downloads = files.map((f) => f.name);
}

// --- text generation: a finished GPT run's sampling plan, replayed on this page's GPU -----------------
// The server builds the plan from the run's final checkpoint with `webmp sample`'s code and checks the
// settings (422 with one line); the page replays it (loops.js generate) and decodes the tokens with
// the plan's vocabulary. The form starts at `webmp sample`'s defaults, served in GET /api/form.

let sampleGeneration = 0;  // a newer run or sample makes an older sample's result stale

export function hideSample() {
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

export async function sampleText(runId, settings = null) {
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
    // where the driver compiles at first dispatch, compiled first on more devices (Runner.precompile)
    runner = await Runner.create(gpu, got.plan, blob, fetchShader, () => {}, null, page.tune.compileHelpers || 0);
    const t1 = performance.now();
    const {ids, overflow} = await generate(runner);
    const seconds = (performance.now() - t1) / 1000;
    const text = got.prompt + decode(ids, got.plan.sample.vocab);
    if (!current()) return;
    showSampleText(got.prompt, text.slice(got.prompt.length));
    const what = `${got.tokens} characters at temperature ${got.temperature}, seed ${got.seed}, ${got.f16_path} ` +
                 `f16 path: generated in ${seconds.toFixed(2)} s, after ${((t1 - t0) / 1000).toFixed(1)} s creating the pipelines` +
                 (runner.precompiled ? ` (compiled on ${runner.precompiled.helpers + 1} devices)` : '');
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
