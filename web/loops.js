// The page's two loops over a Runner (runner.js): training a plan on its schedule (the twin of
// webmp/train/loop.py's Trainer.run) and replaying a sampling plan (the twin of
// webmp/sample/replay.py's replay). Like the Runner they decide nothing: the steps, when to read
// the metrics ring and when to checkpoint are plan.schedule's; how many tokens, and how many a
// submit, are plan.sample's.

// Trains from `startStep` to plan.schedule.steps: records are read after step s when
// s % log_every == 0, s == steps or s % checkpoint_every == 0; checkpoints are taken after step s
// when s % checkpoint_every == 0 and s < steps (the final one is the caller's). shouldStop() is
// asked after each read, so a stopped run has every step it ran recorded. Each read also runs the
// plan's gradient-range lens (plan.histograms) when it has one: onRecords(records, {step, counts})
// gets the counts after the last record's step, a list of counters per layer. onStepDone(s, time)
// is called as the GPU finishes step s (s steps done; queue.onSubmittedWorkDone, no buffer read),
// in step order: progress between metric reads. Returns the number of steps completed.
export async function train(runner, {startStep, onRecords, onCheckpoint, shouldStop, onStepDone = () => {}}) {
  const {steps, log_every: logEvery, checkpoint_every: ckptEvery} = runner.plan.schedule;
  let step = startStep, logged = startStep - 1;
  while (step < steps) {
    const s = step + 1;
    const ckpt = ckptEvery > 0 && s % ckptEvery === 0;
    const read = s % logEvery === 0 || s === steps || ckpt;
    const lens = read && Boolean(runner.plan.histograms);
    if (lens) await runner.ready([runner.plan.histograms.program]);  // so that run() submits before it returns
    const submitted = runner.run('train_step', read, 1, lens);  // submits before it returns
    runner.device.queue.onSubmittedWorkDone().then(() => onStepDone(s, performance.now()), () => {});
    const ring = await submitted;
    step = s;
    if (!ring) continue;
    const recs = ring.filter((r) => r.step > logged && r.step < s).sort((a, b) => a.step - b.step);
    if (recs.length !== s - 1 - logged) throw new Error(`the metrics ring lost records between steps ${logged + 1} and ${s - 1}`);
    logged = s - 1;
    await onRecords(recs, lens ? {step: s - 1, counts: runner.lastHistograms} : null);
    if (ckpt && s < steps) await onCheckpoint(s);
    if (shouldStop()) break;
  }
  return step;
}

// Replays a sampling plan (runner.plan.sample, webmp.engine.plan.SampleSpec): each run of
// spec.schedule, its program once per token of the run, at most spec.tokens_per_submit replays a
// submit, with no host work between tokens; then reads the token buffer, its count and the overflow
// flags once. Returns the generated token ids (after the spec.prompt_tokens of the prompt) and
// whether an activation overflowed the f16 range. The sampling itself (window or one position,
// forward pass, draw) is all in the plan's kernels.
export async function generate(runner) {
  const spec = runner.plan.sample;
  for (const run of spec.schedule) {
    for (let left = run.tokens; left > 0; left -= spec.tokens_per_submit) {
      await runner.run(run.program, false, Math.min(left, spec.tokens_per_submit));
    }
  }
  const raw = await runner.read([spec.seq, spec.seq_len, spec.flags]);
  const words = new Uint32Array(raw);
  const capacity = spec.prompt_tokens + spec.tokens;
  const seqWords = runner.buffers[spec.seq].size / 4, lenWords = runner.buffers[spec.seq_len].size / 4;
  const length = words[seqWords];
  if (length !== capacity) throw new Error(`the GPU generated ${length - spec.prompt_tokens} of ${spec.tokens} tokens`);
  return {ids: words.slice(spec.prompt_tokens, capacity), overflow: words[seqWords + lenWords] !== 0};
}

// Token ids -> text with the plan's vocabulary (token id -> character).
export function decode(ids, vocab) {
  return Array.from(ids, (i) => vocab[i]).join('');
}
