// The page's entry: it starts the parts in the page's order and wires the controls to them. The
// parts: the run form (form.js), the status line (status.js), the live charts and lens (charts.js),
// the adapter panel and its tuning pass (adapter.js), a run trained here (run.js, over runner.js and
// loops.js) or followed (follow.js), the result panel with its text generation (results.js), the
// runs panel (runs.js) and the compare view (compare.js); page.js holds window.webmp, server.js
// talks to the server.
// Opening /?run=ID trains (or resumes) a created or disconnected run, follows a run another page
// is training, and shows any other; Start always trains a new run from the form, Resume continues
// the shown run with its own settings. A finished GPT run then generates text on this GPU from the
// sampling plan the server builds of its final checkpoint (`webmp sample`'s), and the results panel
// offers to sample again.
import {RunsPanel} from './runs.js';
import {CompareView} from './compare.js';
import {$, page, log} from './page.js';
import {api} from './server.js';
import {form, formReady, loadForm, showConfig, formConfig, showFieldErrors, formChanges} from './form.js';
import {setStatus} from './status.js';
import {loadChartLibrary, charts, lens} from './charts.js';
import {showAdapter, tunePass, gpuReady, hasGPU, setPathRow} from './adapter.js';
import {showSummary, hideSample, sampleText} from './results.js';
import {trainRun, stopRun} from './run.js';
import {following, follow, stopFollowing} from './follow.js';

const params = new URLSearchParams(location.search);
const uPlot = await loadChartLibrary();
loadForm().then(() => setStatus(page.status, $('status').textContent))
  .catch((e) => { page.error = e.message; setStatus('failed', `the form could not be loaded: ${e.message}`); });
showAdapter();

// The adapter panel's tuning pass, and the result panel's Sample (again, with its form's settings).
$('tune-form').addEventListener('submit', (e) => {
  e.preventDefault();
  tunePass();
});

$('sample-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const runId = $('sample-box').dataset.run;
  if (runId) sampleText(runId);
});

// --- controls ----------------------------------------------------------------------------------

let current = null;  // the run this page shows: a RunInfo (GET /api/runs/{id}) with its status now

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
    const cfg = formConfig();
    const refused = adapterRefuses(cfg);
    if (refused) {  // before a run is made that could only fail here
      showFieldErrors(refused);
      setStatus('failed', 'this adapter cannot run these settings: see the message next to the field');
      return;
    }
    const run = await api('/api/runs', {method: 'POST', body: cfg});
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

// What the server cannot know: whether this browser's adapter runs the settings. f16 'native' needs
// shader-f16 (fp32 and bf16 run no f16 at all); said as the server's 422 lines are, beside the field.
function adapterRefuses(cfg) {
  const usesF16 = !['fp32', 'bf16'].includes(cfg.precision || 'mixed');  // bf16 needs no shader-f16
  if (cfg.f16 === 'native' && usesF16 && page.hasF16 === false) {
    return "invalid f16: 'native' needs shader-f16, which this browser's WebGPU adapter lacks; choose " +
           "'auto' or 'emulated' (f16 stored as f16, computed in f32)";
  }
  return '';
}

async function resume(run) {
  if (!(await hasGPU)) return;
  stopFollowing();  // this tab trains it now
  const refused = adapterRefuses(run.config);
  if (refused) {
    setStatus('failed', `run ${run.id} cannot resume here: ${refused.replace(/^invalid f16: /, 'its f16 ')}`);
    return;
  }
  // what trains is the run's own settings (the form showed them when the run was opened); edits
  // made since stay in the form, for Start (updateResume's note says so)
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
  stopRun();
});

// Leaving the page (a reload, another address, closing the tab) while it trains ends the run here:
// the browser asks first. What was uploaded stays (the last checkpoint; Resume continues from it).
window.addEventListener('beforeunload', (e) => {
  if (!page.training) return;
  e.preventDefault();
  e.returnValue = '';  // the older browsers' way of asking
});

// --- the runs panel and the compare view -----------------------------------------------------------

const compareView = new CompareView({api, uPlot});
const runsPanel = new RunsPanel({
  api,
  training: () => page.training,
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
    follow(run, showRun);
    return;
  }
  const resumeAsked = params.get('resume') === '1' && run.resumable;
  if (resumeAsked) history.replaceState(null, '', `?${new URLSearchParams({run: id})}`);
  if (run.kind === 'browser' && (run.status === 'created' || run.status === 'disconnected' || resumeAsked)) {
    if (await hasGPU) await resume(run);  // else it stays as it is (noWebGPU says why)
    return;
  }
  charts.add((await api(`/api/runs/${id}/metrics`)).records);
  const read = (k) => api(`/api/runs/${id}/histograms?read=${k}`);
  await api(`/api/runs/${id}/histograms`).then((view) => lens.showStored(view, read), (e) => {
    if (e.status !== 404) log(`gradient histograms: ${e.message}`);  // 404: the run has none yet
  });
  if (run.f16_path) {  // the path the run trained on (its page said so in its hello)
    page.f16Path = run.f16_path;
    setPathRow(run.f16_path);
  }
  if (run.status === 'finished' || run.status === 'failed') {  // a diverged run failed with its summary
    await api(`/api/runs/${id}/summary`).then((s) => showSummary(s, id), (e) => {
      if (e.status !== 404) log(`summary: ${e.message}`);
    });
  }
  setStatus(run.status, `run ${id}: ${run.status}${run.message ? ` — ${run.message}` : ''}`);
  if (run.status === 'finished' && run.generates_text && run.kind === 'browser') await sampleText(id);
}

if (params.get('run')) {
  openRun(params.get('run')).catch((e) => { page.error = e.message; setStatus('failed', e.message); });
} else {
  gpuReady.then(() => setStatus('idle', 'ready: choose a model and press Start'), () => {});
}
