// A run trained on this page's GPU (trainRun): its plan and blob from the server, the kernels
// compiled, training on the plan's schedule (loops.js) with the records, lens counts and checkpoints
// sent as they come, then the held-out evaluation and the summary; a finished GPT run then samples
// (results.js). Stop asks it to stop at its next metrics read.
import {openGPU, Runner, checkPlan} from './runner.js';
import {train} from './loops.js';
import {$, page, log} from './page.js';
import {api, openSocket, fetchShader} from './server.js';
import {setStatus} from './status.js';
import {charts, lens} from './charts.js';
import {tilesReady, showPath} from './adapter.js';
import {showSummary, hideSample, sampleText} from './results.js';

let stopRequested = false;

// Stop pressed on the page training the run.
export function stopRun() {
  stopRequested = true;
  log('stopping at the next metrics read');
}

async function uploadCheckpoint(runner, runId, offer, step) {
  const bytes = await runner.read(runner.plan.checkpoint_buffers);
  await api(`/api/runs/${runId}/checkpoint?f16=${offer}&step=${step}`, {method: 'PUT', body: bytes});
  log(`checkpoint at step ${step} uploaded`);
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

// "45 s", "12 min", "3.2 h": how long the rest of a run takes at its rate so far
export function formatDuration(seconds) {
  if (seconds < 90) return `${Math.max(0, Math.round(seconds))} s`;
  if (seconds < 90 * 60) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

export async function trainRun(runId) {
  page.runId = runId;
  page.training = runId;
  page.eta = null;
  $('progress').textContent = '';  // not the last run's while this one prepares and compiles
  page.error = null;
  page.phases = [];
  stopRequested = false;
  setStatus('preparing', `run ${runId}: preparing`);
  $('summary-panel').hidden = true;
  hideSample();
  let sock = null, gpu = null, runner = null, generatesText = false;
  try {
    sock = await openSocket(runId);  // first, so that any failure below reaches the server
    gpu = await openGPU();
    const offer = gpu.hasF16 ? 'native' : 'emulated';
    await tilesReady;
    page.planRequested = performance.now();  // webmp bench --cold-start: plan to first finished step
    // the adapter's key: its tuned tiles, and its class's shipped ones for the rest (the server decides)
    const tiles = page.tune.key ? `&tiles=${page.tune.key}` : '';
    const {plan, start_step: startStep, f16_path: f16Path, matmul_tiles: matmulTiles, generates_text: text} =
      await api(`/api/runs/${runId}/plan?f16=${offer}${tiles}`);
    generatesText = text;
    log(`matmul tiles: ${matmulTiles}`);
    if (plan.attention) log(plan.attention.line);  // the form and why, as the native log says it
    if (plan.accumulation) log(plan.accumulation);  // the native log's line, from the plan
    page.f16Path = f16Path;
    showPath(f16Path, plan);
    checkPlan(plan, gpu);  // before downloading the blob
    const blob = await api(`/api/runs/${runId}/blob?f16=${offer}${tiles}`, {raw: true});
    const timing = page.timing = newTiming();
    const helpers = page.tune.compileHelpers || 0;
    runner = page.runner = await Runner.create(gpu, plan, blob, fetchShader, (k, n) => {
      timing.compiled = k;
      timing.kernels = n;
      const seconds = ((performance.now() - timing.compileStart) / 1000).toFixed(1);
      setPhase('compiling', `run ${runId}: compiling kernels ${k}/${n} (${seconds} s)`);
    }, ['train_step', 'histograms'], helpers);
    // the step's and the lens's kernels first (the lens runs at the first read), as webmp train's
    // FIRST_PROGRAMS; the evaluation's are made while it trains
    timing.compileEnd = performance.now();
    const pre = page.precompile = runner.precompiled;
    if (pre) {
      log(`compiled the step's ${pre.kernels} kernels on ${pre.helpers + 1} devices at once in ${pre.seconds.toFixed(2)} s ` +
          `(${pre.byHelpers} by the helpers; ${page.tune.compileWhy})` + (pre.errors.length ? `; a helper failed: ${pre.errors[0]}` : ''));
    }
    log(`compiled the training step's ${timing.kernels} kernels in ${((timing.compileEnd - timing.compileStart) / 1000).toFixed(2)} s` +
        ` (${plan.kernels.length - timing.kernels} more while it trains: the evaluation's` +
        `${plan.quick && helpers > 0 ? " and the plan's own matmuls" : ''})`);
    if (plan.quick && helpers > 0) {
      log("the first steps run the plan's quick tier (its matmuls with the register core's 4 x 4 blocks: " +
          'the same steps, kernels that compile in half the time) while the helpers compile its own');
      runner.upgraded.then(() => {
        if (runner.upgradedAt === null) return;
        log(`the plan's own kernels from step ${timing.stepsDone + 1} on, ` +
            `${((runner.upgradedAt - timing.compileEnd) / 1000).toFixed(2)} s after the quick tier's`);
      });
    }
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
      page.eta = rate ? (steps - timing.stepsDone) / rate : null;  // seconds of training left
      $('progress').textContent = [`step ${timing.stepsDone}/${steps}`, rate !== null ? `${rate.toFixed(1)} steps/s` : '',
        page.eta !== null ? `about ${formatDuration(page.eta)} left` : '',
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
    showSummary(await api(`/api/runs/${runId}/summary`), runId);
    const ended = await api(`/api/runs/${runId}`);  // the server's verdict: a diverged run failed
    if (ended.status === 'failed') throw new Error(ended.message);
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
    page.training = null;
    sock?.close();
    if (runner) runner.destroy();
    else gpu?.device.destroy();
  }
  if (page.status === 'finished' && generatesText) await sampleText(runId);  // its device is freed
}
