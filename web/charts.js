// The run's live views: its loss (log10) and loss-scale (log2) charts with skipped steps marked
// (uPlot, served from /vendor/uplot/: the page trains without it), and the gradient-range lens
// (lens.js) below them.
import {$, page} from './page.js';
import {Lens} from './lens.js';

let uPlot = null;

// The chart library (null where it is missing: a note then says so), for these charts and the
// compare view's.
export async function loadChartLibrary() {
  try {
    uPlot = (await import('/vendor/uplot/uPlot.esm.js')).default;
  } catch {
    $('chart-note').hidden = false;
    $('chart-note').textContent = 'The chart library is missing (run `npm ci --prefix web` on the server); training still works.';
  }
  return uPlot;
}

// The loss as drawn: smoothed by an exponential moving average of weight `smooth` (0: raw), bias-
// corrected as TensorBoard's is (the first points are not pulled towards 0); gaps stay gaps.
export function smoothed(values, smooth) {
  if (!smooth) return values;
  let avg = 0, weight = 0;
  return values.map((v) => {
    if (v === null) return null;
    avg = smooth * avg + (1 - smooth) * v;
    weight = smooth * weight + (1 - smooth);
    return avg / weight;
  });
}

class Charts {
  constructor() {
    this.view = {log: true, smooth: 0};  // the loss chart's toggles (#chart-tools)
    this.reset();
    $('loss-log').addEventListener('change', (e) => this.setView({log: e.target.checked}));
    $('loss-smooth').addEventListener('change', (e) => this.setView({smooth: Number(e.target.value)}));
    // The charts take their section's width, also after the window is resized.
    new ResizeObserver(() => {
      for (const c of [this.lossChart, this.scaleChart]) c?.setSize({width: this.width(), height: 230});
    }).observe($('charts'));
  }

  // a chart's width: its section's, or its grid cell's where the charts sit side by side
  width() { return Math.max(300, $('loss-chart').clientWidth || $('charts').clientWidth); }

  reset() {
    $('chart-tools').hidden = true;  // shown with the charts
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

  setView(view) {
    Object.assign(this.view, view);
    this.lossChart?.destroy();
    this.lossChart = null;  // a scale's kind is fixed when a chart is made
    this.draw();
  }

  draw() {
    if (!uPlot || this.data.step.length === 0) return;
    $('chart-tools').hidden = false;
    const d = this.data, loss = smoothed(d.loss, this.view.smooth);
    page.lossShown = loss;
    if (!this.lossChart) {
      const width = this.width();
      const x = {time: false};
      const what = page.lossAxis = `loss${this.view.smooth ? `, smoothed ${this.view.smooth}` : ''} (${this.view.log ? 'log' : 'linear'} scale)`;
      this.lossChart = new uPlot({
        title: 'training loss', width, height: 230, scales: {x, y: this.view.log ? {distr: 3} : {}},
        series: [{label: 'step'}, {label: 'loss', stroke: '#1f77b4', width: 1.5}],
        axes: [{label: 'step'}, {label: what, size: 80}],
      }, [d.step, loss], $('loss-chart'));
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
      this.lossChart.setData([d.step, loss]);
      this.scaleChart.setData([d.step, d.scale, d.skipped]);
    }
  }
}

export const charts = page.charts = new Charts();  // page.charts.data: the points drawn
export const lens = new Lens($('lens'));
