// The compare view: the chosen runs' loss and loss-scale curves overlaid (uPlot, log axes), their
// names, the settings they differ in (every config field whose value is not the same in all, marked)
// and their summary numbers side by side, each read from the run's summary.json (GET
// /api/runs/{id}/summary): its format (precision, f16 path), final loss, step time and the plan's GPU
// memory by category (gpu_memory_bytes, each category the summaries name); a note says when the runs train different models or data. Long runs come
// thinned by the server (?max_points=), the last record always included.

const MAX_POINTS = 2000;
const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#17becf'];

const positive = (v) => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : null);
const text = (v, digits = 5) => (v === null || v === undefined ? '—'
  : typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toPrecision(digits)) : String(v));
// bytes in KiB under a MiB, else in MiB
const bytes = (v) => (typeof v !== 'number' ? null
  : v < 2 ** 20 ? `${(v / 2 ** 10).toFixed(1)} KiB` : `${(v / 2 ** 20).toFixed(2)} MiB`);
const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);

// The rows of the summary table: a label and how to read it from a run (info) and its summary.
const ROWS = [
  ['kind', (run) => run.kind],
  ['status', (run) => run.status],
  ['precision', (run, s) => s?.precision ?? run.config.precision],
  ['f16 path', (run, s) => s?.f16_path ?? run.f16_path ?? '—'],
  ['steps', (run, s) => s?.steps ?? run.last_step + 1],
  ['last train loss', (run, s) => s?.last_loss],
  ['mean loss, last steps', (run, s) => s?.final_train_loss],
  ['test accuracy', (run, s) => (s && s.val_loss === null ? `${(100 * s.test_accuracy).toFixed(2)} %` : null)],
  ['bits / char', (run, s) => s?.val_bits_per_char],
  ['skipped steps', (run, s) => s?.skipped_steps],
  ['final loss scale', (run, s) => s?.final_scale],
  ['steps / s', (run, s) => s?.steps_per_second],
  ['ms / step', (run, s) => (s?.steps_per_second ? (1000 / s.steps_per_second).toFixed(2) : null)],
  ['adapter', (run, s) => s?.adapter ?? run.adapter],
];

export class CompareView {
  constructor({api, uPlot}) {
    Object.assign(this, {api, uPlot});
    this.section = document.getElementById('compare');
    this.charts = [];
    document.getElementById('compare-close').addEventListener('click', () => this.close());
  }

  close() {
    for (const c of this.charts) c.destroy();
    this.charts = [];
    this.section.hidden = true;
    window.webmp.compare = null;
  }

  // runs: RunInfo objects (GET /api/runs)
  async show(runs) {
    this.close();
    const got = await Promise.all(runs.map(async (run) => {
      const {records} = await this.api(`/api/runs/${run.id}/metrics?max_points=${MAX_POINTS}`);
      const summary = run.status === 'finished' ? await this.api(`/api/runs/${run.id}/summary`) : null;
      return {run, records, summary};
    }));
    this.section.hidden = false;
    this.table(got);
    this.draw(got);
    window.webmp.compare = {runs: got.map((g) => g.run.id), points: got.map((g) => g.records.length),
                            differs: this.differences(got).map(([k]) => k), warning: this.warning(got),
                            labels: got.map((g) => this.label(g.run))};
    this.section.scrollIntoView({block: 'start'});
  }

  // a run's name in the legend: its own name, else its id, with its precision
  label(run) {
    return `${run.name || run.id} (${run.config.precision}, ${run.kind})`;
  }

  // the config fields whose values are not the same in every run (the network as its layers)
  differences(got) {
    const show = (cfg, key) => (key === 'model_spec' && cfg.model_spec
      ? cfg.model_spec.layers.map((l) => l.type).join('-') : JSON.stringify(cfg[key]) ?? '—');
    const keys = [...new Set(got.flatMap((g) => Object.keys(g.run.config)))].sort();
    return keys.filter((k) => new Set(got.map((g) => show(g.run.config, k))).size > 1)
      .map((k) => [k, (run) => show(run.config, k).replace(/^"(.*)"$/, '$1')]);
  }

  warning(got) {
    const models = [...new Set(got.map((g) => g.run.config.model))];
    const data = new Set(got.map((g) => g.run.config.data ?? ''));
    if (models.length > 1) return `these runs train different models (${models.join(', ')}): their losses are not comparable`;
    if (data.size > 1) return 'these runs train on different data: their losses are not comparable';
    return '';
  }

  draw(got) {
    const note = document.getElementById('compare-note');
    if (!this.uPlot) {
      note.textContent = 'The chart library is missing (run `npm ci --prefix web` on the server): only the table is shown.';
      return;
    }
    note.textContent = [this.warning(got), got.some((g) => g.records.length >= MAX_POINTS)
      ? `long runs are drawn from ${MAX_POINTS} evenly spaced records` : ''].filter(Boolean).join('; ');
    // uPlot draws series over one x axis: join the runs' steps (a run without a step gets a gap)
    const table = (key) => this.uPlot.join(got.map((g) => [g.records.map((r) => r.step),
      g.records.map((r) => positive(key === 'loss' ? Math.max(r.loss, 1e-12) : r.scale))]));
    const width = Math.max(300, this.section.clientWidth - 24);
    const series = got.map((g, i) => ({label: this.label(g.run), stroke: COLORS[i % COLORS.length], width: 1.5,
                                       spanGaps: true}));
    const x = {time: false};
    this.charts.push(new this.uPlot({
      title: 'training loss', width, height: 260, scales: {x, y: {distr: 3}},
      series: [{label: 'step'}, ...series], axes: [{label: 'step'}, {label: 'loss (log scale)', size: 80}],
    }, table('loss'), document.getElementById('compare-loss')));
    this.charts.push(new this.uPlot({
      title: 'loss scale', width, height: 260, scales: {x, y: {distr: 3, log: 2}},
      series: [{label: 'step'}, ...series],
      axes: [{label: 'step'}, {label: 'loss scale (log2)', size: 80,
              values: (u, vals) => vals.map((v) => (v > 0 ? `2^${Math.round(Math.log2(v))}` : ''))}],
    }, table('scale'), document.getElementById('compare-scale')));
  }

  table(got) {
    const head = document.createElement('tr');
    head.append(document.createElement('th'));
    got.forEach((g, i) => {
      const th = document.createElement('th');
      const swatch = document.createElement('span');
      swatch.className = 'swatch';
      swatch.style.background = COLORS[i % COLORS.length];
      const a = document.createElement('a');
      a.href = g.run.page_url;
      a.textContent = g.run.name || g.run.id;
      a.title = g.run.name ? `${g.run.id}${g.run.note ? `: ${g.run.note}` : ''}` : 'open this run';
      th.append(swatch, a);
      th.dataset.run = g.run.id;
      head.append(th);
    });
    // model, then the settings that differ (those the summary rows show: there, marked too)
    const differs = this.differences(got), shown = new Set(ROWS.map(([label]) => label));
    const settings = [['model', (run) => run.config.model], ...differs.filter(([k]) => k !== 'model' && !shown.has(k))];
    // the GPU memory rows: each category any summary names, then their total
    const cats = [...new Set(got.flatMap((g) => Object.keys(g.summary?.gpu_memory_bytes ?? {})))];
    const memory = cats.map((c) => [`memory: ${c}`, (run, s) => bytes(s?.gpu_memory_bytes?.[c])]);
    if (cats.length) memory.push(['memory: total', (run, s) => (s?.gpu_memory_bytes ? bytes(sum(s.gpu_memory_bytes)) : null)]);
    const rows = [...settings, ...ROWS, ...memory].map(([label, read]) => {
      const tr = document.createElement('tr');
      if (differs.some(([k]) => k === label)) tr.className = 'differs';
      const th = document.createElement('th');
      th.textContent = label;
      tr.append(th);
      for (const g of got) {
        const td = document.createElement('td');
        td.dataset.run = g.run.id;
        td.dataset.key = label;
        td.textContent = text(read(g.run, g.summary));
        tr.append(td);
      }
      return tr;
    });
    document.getElementById('compare-table').replaceChildren(head, ...rows);
  }
}
