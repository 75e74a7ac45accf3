// The gradient-range lens, drawn live: per layer of the plan's lens (plan.histograms, see
// webmp.engine.plan.HistogramSpec), the log2 histogram of its activation gradients' |values| at a
// metrics read, as stored (loss-scaled, bars) and unscaled (divided by the loss scale: the same bars
// shifted by -log2(scale), an outline), against f16's range: shaded where f16 flushes to zero
// (below 2^-24), is subnormal (below 2^-14) and overflows (65504 and above); the exact zeros and the
// values the overflow test flagged as bars of their own at the ends ("0", "ovf"). A slider picks the
// read: every read of the run this page trains, or of a stored run (fetched by index). The counts
// come from the GPU (runner.js); the shares printed per layer are the server's (its ack of the
// counts, webmp.train.rundir.histogram_shares), so this file only draws.

const ROW = 124;        // px per layer
const LABEL = 34;       // px above a row's bars: its name and shares, then every format's
const AXIS = 16;        // px below them: exponent ticks
const LEFT = 12, RIGHT = 12;
const EDGE = 26;        // px of the zero bar (left) and the overflow bar (right), beside the exponents
const COLORS = {stored: '#1f77b4', unscaled: '#ff7f0e', flush: 'rgba(214, 39, 40, 0.13)',
                subnormal: 'rgba(255, 193, 7, 0.18)', overflow: 'rgba(214, 39, 40, 0.13)', marker: '#777'};

const percent = (x) => `${(100 * x).toFixed(x > 0 && x < 0.001 ? 3 : 1)} %`;

export class Lens {
  // section: the page's #lens element (a .lens-note paragraph and a canvas inside).
  constructor(section) {
    this.section = section;
    this.canvas = section.querySelector('canvas');
    this.note = section.querySelector('.lens-note');
    this.note.title = 'stored: the values as the engine keeps them in f16, multiplied by the loss scale; unscaled: ' +
      'what they would be without it. zero: exact zeros (after ReLU, or a causal mask: the GPT\'s dS is zero above ' +
      'its diagonal); subnormal: below 2^-14, with fewer bits of precision; flush to zero: below 2^-24, lost in ' +
      'f16; overflow: 65504 and above. Layer names: d<buffer> is the gradient of that buffer (dZ0: layer 0\'s ' +
      'pre-activation), dlogits the loss\'s gradient of the logits. The line under each name: the same counts ' +
      'against each format\'s range (flush to zero / subnormal / overflow): fp16 at the loss scale, bf16 unscaled ' +
      '(it has f32\'s range), E4M3 and E5M2 with a per-tensor power-of-two scale that puts the largest values ' +
      'just under the format\'s largest (as fp8 training\'s amax scaling does).';
    this.slider = section.querySelector('#lens-read');
    this.sliderNote = section.querySelector('#lens-read-note');
    this.slider.addEventListener('input', () => this.pick(Number(this.slider.value)));
    this.reset(null);
    new ResizeObserver(() => this.draw()).observe(section);
  }

  // A new run: its plan's lens spec (null hides the lens).
  reset(spec) {
    this.spec = spec;
    this.last = null;
    this.history = [];  // every read shown live, in order
    this.stored = null;  // a stored run's reads: {fetch(index) -> view, reads}
    this.section.hidden = true;
    if (window.webmp) window.webmp.lens = {shown: 0, step: null};
  }

  // One read: {step, counts: [[u32 per bucket] per layer]} and the server's answer to them (the
  // records ack's `histograms`: {step, scale, shares: [{name, stored, unscaled}]}). The slider
  // follows the newest read unless it was moved back.
  show(histograms, ack) {
    const read = {step: histograms.step, counts: histograms.counts, scale: ack.scale, shares: ack.shares};
    const atNewest = this.history.length === 0 || Number(this.slider.value) === this.history.length - 1;
    this.history.push(read);
    window.webmp.lens.shown++;
    this.setSlider(this.history.length, atNewest ? this.history.length - 1 : Number(this.slider.value));
    if (atNewest) this.display(read);
  }

  // A run this page did not train: a stored read (GET /api/runs/{id}/histograms[?read=k], which has
  // the spec's exponents and f16's range, the counts and the shares per layer, and how many reads
  // the run has); `fetch(k)` gets read k for the slider.
  showStored(view, fetch) {
    this.spec = {e_min: view.e_min, e_max: view.e_max, f16_range: view.f16_range};
    this.stored = {fetch, reads: view.reads};
    window.webmp.lens.shown++;
    this.setSlider(view.reads, view.reads - 1);
    this.display(Lens.fromView(view));
  }

  static fromView(view) {
    return {step: view.step, counts: view.layers.map((l) => l.counts), scale: view.scale,
            shares: view.layers.map(({name, stored, unscaled, formats}) => ({name, stored, unscaled, formats}))};
  }

  setSlider(reads, index) {
    this.slider.max = String(Math.max(0, reads - 1));
    this.slider.value = String(index);
    this.slider.disabled = reads < 2;
  }

  // the slider's read k: from this page's history, or fetched for a stored run
  async pick(k) {
    if (this.stored) {
      const view = await this.stored.fetch(k);
      if (Number(this.slider.value) === k) this.display(Lens.fromView(view));
    } else if (this.history[k]) {
      this.display(this.history[k]);
    }
  }

  display(read) {
    this.last = read;
    this.section.hidden = false;
    const reads = this.stored ? this.stored.reads : this.history.length;
    this.sliderNote.textContent = `${Number(this.slider.value) + 1} of ${reads}: after step ${read.step}`;
    this.draw();
    Object.assign(window.webmp.lens, {step: read.step, scale: read.scale, read: Number(this.slider.value), reads,
                                      totals: read.counts.map((c) => c.reduce((a, b) => a + b, 0)),
                                      nonEmpty: read.counts.map((c) => c.slice(2, -2).some((n) => n > 0)),
                                      formats: read.shares.map((sh) => sh.formats || null)});
  }

  draw() {
    if (!this.spec || !this.last) return;
    const {spec, last} = this, {e_min: eMin, e_max: eMax, f16_range: f16} = spec;
    const shift = last.scale > 0 ? -Math.log2(last.scale) : 0;
    const floors = {flush: Math.log2(f16.subnormal_min), normal: Math.log2(f16.normal_min), max: Math.log2(f16.max)};
    this.note.textContent = `after step ${last.step}, loss scale ${last.scale}: filled bars as stored (scaled), ` +
      `outlines unscaled (÷ ${last.scale}, exponents ${shift >= 0 ? '+' : '−'}${Math.abs(shift)}); shaded: ` +
      'f16 flushes to zero (< 2^-24), is subnormal (< 2^-14), overflows (≥ 65504). Shares of all values, exact zeros included.';
    // the exponents shown: every bucket used in either view, and f16's range
    let lo = floors.flush - 2, hi = Math.ceil(floors.max) + 2;
    for (const counts of last.counts) {
      counts.slice(2, -2).forEach((n, k) => {
        if (n === 0) return;
        const e = eMin + k;
        lo = Math.min(lo, e, e + shift);
        hi = Math.max(hi, e + 1, e + 1 + shift);
      });
    }
    lo = Math.floor(lo) - 1;
    hi = Math.ceil(hi) + 1;

    const width = Math.max(320, this.section.clientWidth - 26), height = ROW * last.counts.length;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.width = width * dpr;
    this.canvas.height = height * dpr;
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    const g = this.canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, width, height);
    const plotW = width - LEFT - RIGHT - 2 * EDGE, x = (e) => LEFT + EDGE + ((e - lo) / (hi - lo)) * plotW;
    const edges = [];

    last.counts.forEach((counts, i) => {
      const top = i * ROW + LABEL, h = ROW - LABEL - AXIS, bottom = top + h;
      const total = counts.reduce((a, b) => a + b, 0) || 1;
      const bars = counts.slice(2, -2).map((n) => n / total);
      const zero = counts[0] / total, flagged = counts.at(-1) / total;
      const peak = Math.max(...bars, zero, flagged, 1e-12);
      // the exact zeros and the flagged overflows: bars of their own at the ends
      for (const [share, left, color, label] of [[zero, LEFT, '#888', '0'], [flagged, width - RIGHT - EDGE + 4, '#d62728', 'ovf']]) {
        g.fillStyle = color;
        if (share > 0) g.fillRect(left, bottom - (share / peak) * h, EDGE - 6, (share / peak) * h);
        g.fillStyle = '#444';
        g.font = '10px system-ui, sans-serif';
        g.textAlign = 'center';
        g.textBaseline = 'top';
        g.fillText(label, left + (EDGE - 6) / 2, bottom + 3);
      }
      edges.push({zero: zero / peak, overflow: flagged / peak});
      // f16's range, shaded
      const band = (a, b, color) => { g.fillStyle = color; g.fillRect(x(Math.max(a, lo)), top, x(Math.min(b, hi)) - x(Math.max(a, lo)), h); };
      band(lo, floors.flush, COLORS.flush);
      band(floors.flush, floors.normal, COLORS.subnormal);
      band(floors.max, hi, COLORS.overflow);
      // as stored: filled bars; unscaled: the same bars shifted, outlined
      g.fillStyle = COLORS.stored;
      bars.forEach((f, k) => {
        if (f > 0) g.fillRect(x(eMin + k) + 0.5, bottom - (f / peak) * h, Math.max(1, x(eMin + k + 1) - x(eMin + k) - 1), (f / peak) * h);
      });
      if (shift !== 0) {
        g.strokeStyle = COLORS.unscaled;
        g.lineWidth = 1.5;
        bars.forEach((f, k) => {
          if (f > 0) g.strokeRect(x(eMin + k + shift) + 0.5, bottom - (f / peak) * h, x(eMin + k + 1 + shift) - x(eMin + k + shift) - 1, (f / peak) * h);
        });
      }
      // markers and the exponent axis
      g.strokeStyle = COLORS.marker;
      g.lineWidth = 1;
      for (const [e, dash] of [[floors.flush, [2, 3]], [floors.normal, [6, 3]], [floors.max, []]]) {
        g.setLineDash(dash);
        g.beginPath();
        g.moveTo(x(e), top);
        g.lineTo(x(e), bottom);
        g.stroke();
      }
      g.setLineDash([]);
      g.beginPath();
      g.moveTo(LEFT + EDGE, bottom + 0.5);
      g.lineTo(LEFT + EDGE + plotW, bottom + 0.5);
      g.stroke();
      g.fillStyle = '#444';
      g.font = '10px system-ui, sans-serif';
      g.textAlign = 'center';
      g.textBaseline = 'top';
      // exponent labels at least ~34 px apart (a phone's lens is narrow)
      const step = [4, 8, 16, 32].find((k) => (plotW * k) / (hi - lo) >= 34) || 32;
      for (let e = Math.ceil(lo / step) * step; e <= hi; e += step) g.fillText(`2^${e}`, x(e), bottom + 3);
      // the layer's name and the server's shares
      const share = last.shares[i];
      g.textAlign = 'left';
      g.textBaseline = 'alphabetic';
      g.font = '600 12px system-ui, sans-serif';
      g.fillStyle = '#222';
      const name = share.name;
      g.fillText(name, LEFT, top - 19);
      const nameW = g.measureText(name).width;
      g.font = '11px system-ui, sans-serif';
      g.fillStyle = '#444';
      const s = share.stored, u = share.unscaled, room = width - LEFT - nameW - 10;
      const long = `stored: zero ${percent(s.zero)}, subnormal ${percent(s.subnormal)}, overflow ${percent(s.overflow)}` +
                   `  ·  unscaled: flush to zero ${percent(u.underflow)}, subnormal ${percent(u.subnormal)}, ` +
                   `overflow ${percent(u.overflow)}`;
      const short = `stored 0 ${percent(s.zero)} sub ${percent(s.subnormal)} ovf ${percent(s.overflow)} · ` +
                    `unscaled flush ${percent(u.underflow)} sub ${percent(u.subnormal)} ovf ${percent(u.overflow)}`;
      g.fillText(g.measureText(long).width <= room ? long : short, LEFT + nameW + 10, top - 19, room);
      if (share.formats) {  // the server's shares per format (webmp.train.format_lens)
        g.font = '10px system-ui, sans-serif';
        g.fillStyle = '#555';
        const line = Object.entries(share.formats).filter(([, x]) => x.view).map(([f, x]) =>
          `${f} (${x.view}) ${percent(x.underflow)} / ${percent(x.subnormal)} / ${percent(x.overflow)}`).join('  ·  ');
        g.fillText(`flush / subnormal / overflow: ${line}`, LEFT, top - 6, width - LEFT - RIGHT);
      }
    });
    window.webmp.lens.edges = edges;  // the zero and overflow bars' heights (of the row's peak)
  }
}
