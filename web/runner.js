// The browser runtime: creates what a webmp plan lists on navigator.gpu and replays its programs.
// It is the twin of webmp/engine/runtime.py and decides nothing: kernels, dispatch order, sizes and
// hyper-parameters all come from the plan built by webmp.models.build_plan on the server; the
// device checks are the plan's required_features and required_limits, the metrics records and the
// state words are decoded by the plan's metrics.fields and state.fields. The loops that replay a
// plan (training on plan.schedule, sampling on plan.sample) are loops.js's.
//
// A training step is one command encoder with one compute pass holding the plan's dispatch list,
// submitted once. Metrics stay in a GPU ring buffer that is copied to one reused staging buffer
// and mapped only when run() is asked to read them. A sampling plan has no state or metrics (a
// one-word stand-in buffer is named for both), which the Runner never needs unless asked for
// records or the state.

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const SCRATCH_BYTES = 65536;  // precompile's scratch buffers: more than any kernel's fixed-size struct needs

// The adapter and a device with shader-f16 when the adapter has it, and the adapter's real limits
// (not WebGPU's defaults).
export async function openGPU() {
  if (!navigator.gpu) {
    throw new Error('WebGPU is not available here (navigator.gpu is undefined): use a browser with WebGPU ' +
                    'enabled, over http://127.0.0.1 or https');
  }
  // Right after a headless browser starts, requestAdapter() can resolve to null once or twice.
  let adapter = null;
  for (let i = 0; i < 10 && !adapter; i++) {
    adapter = await navigator.gpu.requestAdapter({powerPreference: 'high-performance'}).catch(() => null);
    if (!adapter) await sleep(300);
  }
  if (!adapter) throw new Error('navigator.gpu.requestAdapter() found no WebGPU adapter (10 tries)');
  const hasF16 = adapter.features.has('shader-f16');
  const hasSubgroups = adapter.features.has('subgroups');
  // Every limit the adapter reports, at its value: checkPlan compares a plan's required_limits with
  // them, and the page's tuning pass sends them to the server (its tile choices must fit them).
  const limits = {};
  for (const key in adapter.limits) {
    if (typeof adapter.limits[key] === 'number') limits[key] = adapter.limits[key];
  }
  const device = await adapter.requestDevice({
    requiredFeatures: [...(hasF16 ? ['shader-f16'] : []), ...(hasSubgroups ? ['subgroups'] : [])],
    requiredLimits: limits,
  });
  const info = adapter.info || {};
  return {
    device, hasF16, hasSubgroups, limits,
    features: [...adapter.features].sort(),
    adapter: {vendor: info.vendor || '', architecture: info.architecture || '', device: info.device || '',
              description: info.description || ''},
    subgroupSizes: [info.subgroupMinSize || null, info.subgroupMaxSize || null],
  };
}

// Throws a readable error when the plan needs a feature or a limit the device lacks.
export function checkPlan(plan, gpu) {
  if (plan.required_features.includes('shader-f16') && !gpu.hasF16) {
    throw new Error("the plan uses native f16 but this adapter lacks 'shader-f16'");
  }
  if (plan.required_features.includes('subgroups') && !gpu.hasSubgroups) {
    throw new Error("the plan's matmul tiles use subgroups but this adapter lacks 'subgroups'");
  }
  for (const [key, need] of Object.entries(plan.required_limits)) {
    const have = gpu.limits[key];
    if (!(need <= have)) {
      const worst = plan.buffers.reduce((a, b) => (b.bytes > a.bytes ? b : a));
      const what = key === 'maxStorageBuffersPerShaderStage' ? '' : ` (largest buffer: ${worst.name}, ${worst.bytes} bytes)`;
      throw new Error(`this model does not fit the adapter: the plan needs ${key} = ${need} but the adapter ` +
                      `allows ${have}${what}; use a smaller model or batch size`);
    }
  }
}

// Rows of u32/f32 words -> objects, per [[name, 'u32'|'f32'], ...].
function decodeRecords(arrayBuffer, fields) {
  const u32 = new Uint32Array(arrayBuffer), f32 = new Float32Array(arrayBuffer);
  const out = [];
  for (let row = 0; row + fields.length <= u32.length; row += fields.length) {
    const rec = {};
    fields.forEach(([name, kind], i) => { rec[name] = kind === 'f32' ? f32[row + i] : u32[row + i]; });
    out.push(rec);
  }
  return out;
}

async function scoped(device, what, create) {
  device.pushErrorScope('out-of-memory');
  device.pushErrorScope('validation');
  const value = await create();
  const [validation, oom] = [await device.popErrorScope(), await device.popErrorScope()];
  const err = validation || oom;
  if (err) throw new Error(`WebGPU ${oom && !validation ? 'out of memory' : 'validation error'} while ${what}: ${err.message}`);
  return value;
}

export class Runner {
  // gpu: from openGPU(); fetchText(name) returns a file of shaders/ as text; onCompile(k, n), when
  // given, is called as the pipelines are created (k = 0 first, then once each) of the n kernels
  // that `first` needs: with `first` (program names) only those programs' pipelines are made before
  // create returns, the others in the background after it (a first step need not wait for the
  // evaluation's kernels; run() and ready() wait for them, and a failure there ends the run);
  // without, all of them.
  // compileHelpers: where the driver compiles a kernel at its first dispatch, the `first` programs'
  // kernels are also compiled before create returns, on this device and that many more at once
  // (precompile; what it did in `precompiled`).
  static async create(gpu, plan, blob, fetchText, onCompile = () => {}, first = null, compileHelpers = 0) {
    checkPlan(plan, gpu);
    const r = new Runner(gpu, plan);
    await r.init(new Uint8Array(blob), fetchText, onCompile, first, compileHelpers);
    return r;
  }

  constructor(gpu, plan) {
    this.gpu = gpu;
    this.device = gpu.device;
    this.plan = plan;
    this.readbacks = 0;
    this.submits = 0;
    this.error = null;     // set by device.lost or an uncaptured WebGPU error; ends the run
    this.destroyed = false;
    this.firstRunDone = new Promise((resolve) => { this.markFirstRunDone = resolve; });
    this.device.lost.then((info) => {
      if (!this.destroyed) this.error = this.error || new Error(`the GPU device was lost (${info.reason}): ${info.message}`);
    });
    this.device.addEventListener('uncapturederror', (e) => {
      this.error = this.error || new Error(`WebGPU error: ${e.error.message}`);
    });
  }

  async init(blob, fetchText, onCompile, first, compileHelpers) {
    const dev = this.device, plan = this.plan;
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    this.buffers = await scoped(dev, 'creating buffers', () => {
      const out = {};
      for (const b of plan.buffers) {
        out[b.name] = dev.createBuffer({size: b.bytes, usage, label: b.name});
        // writeBuffer wants a multiple of 4 bytes; the blob pads every init to 4 bytes
        if (b.init) dev.queue.writeBuffer(out[b.name], 0, blob, b.init.offset, Math.ceil(b.init.bytes / 4) * 4);
      }
      return out;
    });
    const files = [...new Set(plan.kernels.flatMap((k) => k.sources))];
    this.text = Object.fromEntries(await Promise.all(files.map(async (f) => [f, await fetchText(f)])));
    this.modules = new Map();
    this.bindLayouts = new Map();
    this.pipelines = {};
    this.layouts = {};
    this.programs = {};
    // A plan's quick tier (webmp/engine/tiers.py): twins of its first programs, the same steps with
    // matmul kernels that compile in about half the time. Where the helpers compile (the driver
    // compiles at first dispatch), a program runs as its twin until its own kernels, compiled by
    // the helpers meanwhile, are made here; `upgraded` resolves then (upgradedAt: its time).
    const tiers = compileHelpers > 0 && plan.quick ? plan.quick : {};
    const twins = new Set(Object.values(plan.quick || {}));
    const names = Object.keys(plan.programs).filter((p) => !twins.has(p));
    const now = first ? names.filter((p) => first.includes(p)) : names;
    const later = names.filter((p) => !now.includes(p));
    const runs = (p) => tiers[p] || p;  // the program that runs as p for now
    const kernelsOf = (programs) => new Set(programs.flatMap((p) => plan.programs[p].map((d) => d.kernel)));
    const needed = kernelsOf(now.map(runs));
    const kernels = plan.kernels.filter((k) => needed.has(k.name));
    let compiled = 0;
    onCompile(0, kernels.length);
    const made = () => onCompile(++compiled, kernels.length);
    // compiled as their pipelines come, in their order of first use; precompile makes this device's
    // pipelines as it goes (made at once, all of them, they would queue ahead of the helpers' in
    // the browser's compile threads: the helpers started 2.4 s late on the GPT's cold start)
    const order = now.map(runs).flatMap((p) => plan.programs[p].map((d) => d.kernel));
    this.precompiled = compileHelpers > 0 ? await this.precompile(order, compileHelpers, made) : null;
    await this.makePipelines(kernels, made);
    await this.preparePrograms(now, runs);
    this.upgradedAt = null;
    const upgrading = now.filter((p) => tiers[p]);
    this.upgraded = upgrading.length === 0 ? Promise.resolve() : (async () => {
      await this.firstRunDone;  // the first step waits for nothing it does not need
      const own = kernelsOf(upgrading);
      const rest = plan.kernels.filter((k) => own.has(k.name) && !needed.has(k.name));
      // the helpers alone: this device's queue runs the steps, and a kernel compiled there would
      // hold them up for as long
      await this.precompile(rest.map((k) => k.name), compileHelpers, () => {}, false);
      await this.makePipelines(rest);
      Object.assign(this.programs, Object.fromEntries(
        upgrading.map((name) => [name, plan.programs[name].map((d) => this.prepare(d))])));
      this.upgradedAt = performance.now();
    })().catch((e) => { this.error = this.error || e; });
    this.background = later.length === 0 ? Promise.resolve() : (async () => {
      await this.makePipelines(plan.kernels.filter((k) => kernelsOf(later).has(k.name)));
      // no error scope here: scopes are the device's, and the training submits meanwhile (a failure
      // still ends the run, through 'uncapturederror')
      Object.assign(this.programs, Object.fromEntries(
        later.map((name) => [name, plan.programs[name].map((d) => this.prepare(d))])));
    })().catch((e) => { this.error = this.error || e; });
    this.metricsBytes = this.buffers[plan.metrics.buffer].size;
    // A training plan's gradient-range lens (plan.histograms): its counts are staged after the ring.
    this.lensBytes = plan.histograms ? this.buffers[plan.histograms.buffer].size : 0;
    this.lastHistograms = null;  // the counts per layer read by the last run(..., histograms = true)
    this.staging = dev.createBuffer({size: this.metricsBytes + this.lensBytes,
                                     usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
  }

  // The pipelines of `kernels` (their shader modules and layouts made once, shared), created in
  // parallel where not yet asked for; onEach after each one this call creates.
  async makePipelines(kernels, onEach = () => {}) {
    await Promise.all(kernels.map((k) => this.pipelineFor(k, onEach)));
  }

  // Kernel k's pipeline on this device, created once: until made, this.pipelines holds its promise
  // (this.layouts its layout at once); onMade when it is.
  pipelineFor(k, onMade = () => {}) {
    if (!(k.name in this.pipelines)) {
      this.pipelines[k.name] = this.makePipeline(k).then((pipeline) => {
        this.pipelines[k.name] = pipeline;
        onMade();
        return pipeline;
      });
    }
    return Promise.resolve(this.pipelines[k.name]);
  }

  async makePipeline(k) {
    const dev = this.device, plan = this.plan;
    const sig = k.bindings.map((b) => `${b.binding}:${b.type}`).join(',');
    if (!this.bindLayouts.has(sig)) {
      const bgl = dev.createBindGroupLayout({entries: k.bindings.map((b) => (
        {binding: b.binding, visibility: GPUShaderStage.COMPUTE, buffer: {type: b.type}}))});
      this.bindLayouts.set(sig, [bgl, dev.createPipelineLayout({bindGroupLayouts: [bgl]})]);
    }
    const [bgl, layout] = this.bindLayouts.get(sig);
    this.layouts[k.name] = bgl;
    const key = k.sources.join('|');
    if (!this.modules.has(key)) {
      // Browsers need these for the subgroup matmul core (wgpu-py's naga refuses the first and does
      // not know the second's rule: see webmp/engine/wgsl.py SOURCE_FEATURES)
      const enable = plan.required_features.includes('subgroups')
        ? 'enable subgroups;\ndiagnostic(off, subgroup_uniformity);\n' : '';
      const module = dev.createShaderModule({code: enable + k.sources.map((f) => this.text[f]).join('\n'), label: k.sources.at(-1)});
      this.modules.set(key, module.getCompilationInfo().then((info) => {
        const errors = info.messages.filter((m) => m.type === 'error');
        if (errors.length) {
          throw new Error(`WGSL of ${k.sources.join(' + ')} does not compile: ` +
                          errors.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`).join('; '));
        }
        return module;
      }));
    }
    const module = await this.modules.get(key);
    return dev.createComputePipelineAsync({
      label: k.name, layout, compute: {module, entryPoint: k.entry, constants: k.constants},
    }).catch((e) => { throw new Error(`pipeline ${k.name} failed: ${e.message}`); });
  }

  // The kernels `names` (in their order of first use) compiled before their first run, on this
  // device and `helpers` more devices of the adapter at once, where the driver compiles a kernel at
  // its first dispatch (lavapipe; why and how: webmp/engine/precompile.py). Each device takes
  // kernels from its end of one list and dispatches each with no workgroups on scratch buffers, one
  // compiling while the next one's pipeline is made; the driver's on-disk cache hands the helpers'
  // work to this device, which makes its pipeline of a kernel a helper compiled once the helper is
  // done with it (onMade after each of this device's pipelines). Resolves with what it did.
  async precompile(names, helpers, onMade = () => {}, here = true) {
    const kernels = Object.fromEntries(this.plan.kernels.map((k) => [k.name, k]));
    const todo = [...new Set(names)];
    const count = todo.length;
    const t0 = performance.now();
    const compileOn = async (device, pipelineOf, fromFront, onDone = () => {}) => {
      const scratch = [];
      let n = 0, last = Promise.resolve();
      for (let name = fromFront ? todo.shift() : todo.pop(); name !== undefined;
        name = fromFront ? todo.shift() : todo.pop()) {
        const [pipeline, layout] = await pipelineOf(kernels[name]);
        const bindings = kernels[name].bindings;
        while (scratch.length < bindings.length) {  // one per binding: writable bindings may not alias
          scratch.push(device.createBuffer({size: SCRATCH_BYTES, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.UNIFORM}));
        }
        const bindGroup = device.createBindGroup({layout, entries: bindings.map(
          (b, i) => ({binding: b.binding, resource: {buffer: scratch[i]}}))});
        const enc = device.createCommandEncoder();
        const pass = enc.beginComputePass();
        pass.setPipeline(pipeline);
        pass.setBindGroup(0, bindGroup);
        pass.dispatchWorkgroups(0, 0, 0);
        pass.end();
        await last;
        device.queue.submit([enc.finish()]);
        last = device.queue.onSubmittedWorkDone().then(() => onDone(kernels[name]));
        n++;
      }
      await last;
      scratch.forEach((b) => b.destroy());
      return n;
    };
    const helper = async () => {
      const adapter = await navigator.gpu.requestAdapter({powerPreference: 'high-performance'});
      if (!adapter) throw new Error('no second adapter');
      const device = await adapter.requestDevice({requiredFeatures: this.plan.required_features,
                                                  requiredLimits: this.gpu.limits});
      const made = new Runner({...this.gpu, device}, this.plan);  // for its makePipeline alone
      made.text = this.text;
      [made.modules, made.bindLayouts, made.pipelines, made.layouts] = [new Map(), new Map(), {}, {}];
      try {
        // this device's pipeline of k, from the driver's cache (a failure is this device's to report)
        const then = (k) => { this.pipelineFor(k, onMade).catch(() => {}); };
        return await compileOn(device, async (k) => [await made.makePipeline(k), made.layouts[k.name]], false, then);
      } finally {
        made.destroyed = true;
        device.destroy();
      }
    };
    const errors = [];
    const helping = Array.from({length: helpers}, () => helper().catch((e) => { errors.push(e.message); return 0; }));
    if (here) await compileOn(this.device, async (k) => [await this.pipelineFor(k, onMade), this.layouts[k.name]], true);
    const byHelpers = (await Promise.all(helping)).reduce((a, b) => a + b, 0);
    return {kernels: count, helpers, byHelpers, seconds: (performance.now() - t0) / 1000, errors};
  }

  // Bind groups of the programs `names`, each as the program runs(name) (its quick twin for now).
  async preparePrograms(names, runs = (p) => p) {
    const made = await scoped(this.device, 'creating bind groups', () => Object.fromEntries(
      names.map((name) => [name, this.plan.programs[runs(name)].map((d) => this.prepare(d))])));
    Object.assign(this.programs, made);
  }

  // Resolves when the programs `names` can run (the background pipelines of Runner.create's `first`).
  async ready(names) {
    if (names.every((p) => this.programs[p])) return;
    await this.background;
    if (this.error) throw this.error;
    const missing = names.filter((p) => !this.programs[p]);
    if (missing.length) throw new Error(`the plan has no program ${missing.join(', ')}`);
  }

  prepare(d) {
    const bindGroup = this.device.createBindGroup({layout: this.layouts[d.kernel], entries: d.bind.map(
      (name, i) => ({binding: i, resource: {buffer: this.buffers[name]}}))});
    return [this.pipelines[d.kernel], bindGroup, d.workgroups];
  }

  encode(enc, program) {
    const pass = enc.beginComputePass();
    for (const [pipeline, bindGroup, [x, y, z]] of this.programs[program]) {
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, bindGroup);
      pass.dispatchWorkgroups(x, y, z);
    }
    pass.end();
  }

  // Seconds for `reps` dispatches of a program in one submit (one compute pass each), from the
  // submit to the queue's report that the work is done: the page's tuning pass times with it.
  async time(program, reps) {
    await this.device.queue.onSubmittedWorkDone();
    const t0 = performance.now();
    await this.run(program, false, reps);
    await this.device.queue.onSubmittedWorkDone();
    if (this.error) throw this.error;
    return (performance.now() - t0) / 1000;
  }

  // One submit of a program (`repeat` times over, one compute pass each, in one command buffer: a
  // sampling plan's tokens); with readMetrics also copies the metrics ring and returns its records.
  // With histograms, where `program` is the one the plan's lens replaces, its last run is the lens's
  // program (the same step, counting); with readMetrics the counts come back in the same map, as
  // lastHistograms (a list of counters per layer).
  async run(program, readMetrics = false, repeat = 1, histograms = false) {
    if (this.error) throw this.error;
    const lens = this.plan.histograms;
    const counts = histograms && lens && program === lens.replaces;
    if (histograms && !(counts || (readMetrics && this.lensBytes))) throw new Error(`the plan's lens neither counts in ${program} nor is read with metrics`);
    const programs = counts ? [program, lens.program] : [program];
    if (!programs.every((p) => this.programs[p])) await this.ready(programs);  // else it submits before returning
    const enc = this.device.createCommandEncoder();
    for (let i = 0; i < repeat; i++) this.encode(enc, counts && i === repeat - 1 ? lens.program : program);
    if (readMetrics) enc.copyBufferToBuffer(this.buffers[this.plan.metrics.buffer], 0, this.staging, 0, this.metricsBytes);
    if (histograms && readMetrics) enc.copyBufferToBuffer(this.buffers[lens.buffer], 0, this.staging, this.metricsBytes, this.lensBytes);
    this.device.queue.submit([enc.finish()]);
    if (this.submits++ === 0) this.device.queue.onSubmittedWorkDone().then(this.markFirstRunDone);
    return readMetrics ? this.mapRing(histograms) : null;
  }

  async mapRing(histograms = false) {
    this.readbacks++;
    await this.staging.mapAsync(GPUMapMode.READ);
    const raw = this.staging.getMappedRange().slice(0);
    this.staging.unmap();
    if (this.error) throw this.error;
    if (histograms) {
      const {layers, buckets} = this.plan.histograms;
      const counts = new Uint32Array(raw, this.metricsBytes, this.lensBytes / 4);
      this.lastHistograms = layers.map((l) => Array.from(counts.subarray(l.offset, l.offset + buckets)));
    }
    return decodeRecords(raw.slice(0, this.metricsBytes), this.plan.metrics.fields);
  }

  // The named buffers' bytes, concatenated in order (checkpoints, the state, the eval result), in one
  // copy and one map.
  async read(names) {
    const sizes = names.map((n) => this.buffers[n].size);
    const total = sizes.reduce((a, b) => a + b, 0);
    const staging = this.device.createBuffer({size: total, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
    const enc = this.device.createCommandEncoder();
    let offset = 0;
    names.forEach((n, i) => { enc.copyBufferToBuffer(this.buffers[n], 0, staging, offset, sizes[i]); offset += sizes[i]; });
    this.device.queue.submit([enc.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const out = staging.getMappedRange().slice(0);
    staging.destroy();
    if (this.error) throw this.error;
    return out;
  }

  async readState() {
    return decodeRecords(await this.read([this.plan.state.buffer]), this.plan.state.fields)[0];
  }

  // Program 'eval', then its results: the counts in plan.eval.result_buffer ([correct, counted], u32)
  // and, when the plan names a loss_buffer (f32 [1], the summed validation loss), that sum (else null).
  async evaluate() {
    await this.run('eval');
    const {result_buffer: result, loss_buffer: loss} = this.plan.eval;
    const raw = await this.read(loss ? [result, loss] : [result]);
    const [correct, counted] = new Uint32Array(raw, 0, 2);
    const lossSum = loss ? new Float32Array(raw, this.buffers[result].size, 1)[0] : null;
    return {correct, counted, lossSum};
  }

  // What to report for an error `e`: a lost device is the cause of whatever failed after it.
  async cause(e) {
    await Promise.race([this.device.lost, sleep(500)]);
    return this.error || e;
  }

  destroy() {
    this.destroyed = true;
    this.device.destroy();
  }
}
