// The network field (model net): a JSON editor, a button that loads a .json file into it, and the
// layer table the server makes of the network as it changes (POST /api/network: the rows of
// webmp.models.summary.layer_table, or a 422 whose line form.js shows beside its field). The page
// checks nothing itself: a network that is not JSON goes to the server as text, which reads it as
// `webmp train --model-spec` reads a file and says what is wrong in the same words.
import {page} from './page.js';
import {api} from './server.js';

// JSON on one line, a space after each colon and comma.
function oneLine(v) {
  if (Array.isArray(v)) return `[${v.map(oneLine).join(', ')}]`;
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${oneLine(x)}`).join(', ')}}`;
}

// The network as JSON, one layer a line, a residual block's layers indented under it (any other
// value on one line): JSON.parse gives back the same object, keys in order.
export function formatNetwork(spec, indent = '') {
  if (spec === null || typeof spec !== 'object' || !Array.isArray(spec.layers)) return oneLine(spec);
  const inner = indent + '  ';
  const head = Object.entries(spec).map(([k, v]) => (k === 'layers' ? null : `${JSON.stringify(k)}: ${oneLine(v)}`));
  const layers = spec.layers.map((l) => inner + formatNetwork(l, inner));
  const parts = head.map((h) => h ?? `"layers": [\n${layers.join(',\n')}\n${indent}]`);
  return `{${parts.join(', ')}}`;
}

// The editor's value: the network as an object, null when empty, else the text as typed.
export function networkValue(text) {
  if (text.trim() === '') return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

// Bytes as webmp.models.summary.size writes them (decimal units).
function size(n) {
  for (const [unit, scale] of [['GB', 1e9], ['MB', 1e6], ['kB', 1e3]]) {
    if (n >= scale) return `${(n / scale).toFixed(2)} ${unit}`;
  }
  return `${n} B`;
}

function row(cells, tag = 'td') {
  const tr = document.createElement('tr');
  for (const [text, cls] of cells) {
    const td = document.createElement(tag);
    td.textContent = text;
    if (cls) td.className = cls;
    tr.append(td);
  }
  return tr;
}

// LayerTable.to_dict() as a table: each layer's path (indented by its depth), type, output shape
// with the batch, parameters and activation bytes in mixed and fp32, then the totals and the GPU
// memory of the whole plan in each precision.
export function renderTable(box, table) {
  const el = document.createElement('table'), B = table.batch_size;
  el.className = 'layer-table';
  el.append(row([['layer'], ['type'], ['output shape'], ['params', 'num'], ['act. mixed', 'num'],
                 ['act. fp32', 'num']], 'th'));
  for (const r of table.rows) {
    const shape = r.type === 'scratch' ? '' : `[${[B, ...r.out_shape].join(', ')}]`;  // shared scratch: no output
    const tr = row([[r.path], [r.type], [shape], [r.params.toLocaleString('en'), 'num'],
                    [size(r.activations.mixed), 'num'], [size(r.activations.fp32), 'num']]);
    tr.firstChild.style.paddingLeft = `${6 + 14 * r.depth}px`;
    el.append(tr);
  }
  const t = table.totals;
  const total = row([['total'], [''], [''], [t.params.toLocaleString('en'), 'num'], [size(t.activations.mixed), 'num'],
                     [size(t.activations.fp32), 'num']]);
  total.className = 'total';
  el.append(total);
  const memory = document.createElement('p');
  memory.textContent = Object.entries(t.memory).map(([precision, m]) =>
    `${precision}: ${size(Object.values(m).reduce((a, b) => a + b, 0))} on the GPU`).join('; ') + ` (batch ${B})`;
  box.replaceChildren(el, memory);
}

// The editor's elements for the form's label (`input` first: the label's control) and the table.
// context() gives the other fields the table depends on ({batch_size, data}); onError(detail) shows
// the server's 422 ('' clears it).
export class NetworkField {
  constructor(id, {context, onError}) {
    this.context = context;
    this.onError = onError;
    this.asked = 0;  // the last table request: an older answer arriving late is dropped
    this.input = Object.assign(document.createElement('textarea'), {id, rows: 12, spellcheck: false});
    const file = Object.assign(document.createElement('input'), {type: 'file', accept: '.json,application/json', hidden: true});
    const load = Object.assign(document.createElement('button'), {type: 'button', textContent: 'load a .json file'});
    load.addEventListener('click', () => file.click());
    file.addEventListener('change', async () => {
      if (!file.files.length) return;
      this.set(networkValue(await file.files[0].text()));
      file.value = '';
      this.input.dispatchEvent(new Event('input', {bubbles: true}));
    });
    this.table = document.createElement('div');
    this.table.className = 'layer-table-box';
    const tools = document.createElement('span');
    tools.className = 'network-tools';
    tools.append(load, file);
    this.extra = [tools, this.table];
    this.input.addEventListener('input', () => this.refresh());
  }

  value() { return networkValue(this.input.value); }

  set(value) { this.input.value = value === null ? '' : typeof value === 'string' ? value : formatNetwork(value); }

  // The table of the network as it is now, asked for once the typing pauses.
  refresh() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.ask(), 300);
  }

  async ask() {
    const asked = ++this.asked, spec = this.value();
    if (spec === null) {  // nothing to table (the server's 422 at Start says a net needs one)
      page.layerTable = null;
      this.table.replaceChildren();
      return;
    }
    try {
      const table = await api('/api/network', {method: 'POST', body: {model_spec: spec, ...this.context()}});
      if (asked !== this.asked) return;
      page.layerTable = table;
      renderTable(this.table, table);
      this.onError('');
    } catch (e) {
      if (asked !== this.asked) return;
      page.layerTable = null;
      this.table.replaceChildren();
      this.onError(typeof e.detail === 'string' ? e.detail : e.message);
    }
  }
}
