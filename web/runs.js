// The runs panel: every run in the server's runs directory (GET /api/runs), browser runs and the
// run directories `webmp train` wrote there (kind native, read-only), with their status and what
// can be done with each: open it (a running browser run is then followed, live), resume a browser
// run that stopped, failed or lost its page, put its settings in the form for a new run, and tick
// runs to compare (compare.js); name and note a run, delete an ended one (its directory moves to
// the server's .deleted folder), sort the list. While this tab trains a run, the links open in a new tab (leaving
// this one would end its run), and the run it trains is marked as such rather than linked.

const REFRESH_MS = 5000;

// label: the column's name, shown beside the value where the table is laid out as cards (a phone)
const cell = (content, className, label) => {
  const td = document.createElement('td');
  if (className) td.className = className;
  if (label) td.dataset.label = label;
  td.append(content);
  return td;
};

// A link to another view of the page; while this tab trains run `training`, it opens a new tab.
const link = (text, href, title, training = null) => {
  const a = document.createElement('a');
  a.textContent = text;
  a.href = href;
  if (title) a.title = title;
  if (training) {
    a.target = '_blank';
    a.rel = 'noopener';
    a.title = `${title ? `${title} ` : ''}(in a new tab: this tab is training run ${training})`;
  }
  return a;
};

const formatLoss = (v) => (v === null || v === undefined ? '—' : typeof v === 'string' ? v : v.toPrecision(4));

function formatTime(unixSeconds) {
  const d = new Date(unixSeconds * 1000), pad = (n) => String(n).padStart(2, '0');
  return `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

// The settings a run differs in, in a few words: what tells runs apart in the list.
function settings(cfg) {
  const shape = cfg.model === 'gpt' ? `${cfg.n_layer}×${cfg.d_model}`
    : cfg.model === 'net' ? `${cfg.model_spec.layers.map((l) => l.type).join('-')}` : (cfg.hidden || []).join('-');
  return `${cfg.model} ${shape}, ${cfg.precision}${cfg.data ? `, data ${cfg.data.slice(7, 15)}` : ''}`;
}

export class RunsPanel {
  // api: the page's fetch helper; training(): the id of the run this tab trains, or null;
  // onNewFrom(run): put a run's settings in the form; onCompare(runs): show them compared.
  constructor({api, training, onNewFrom, onCompare}) {
    Object.assign(this, {api, training, onNewFrom, onCompare});
    this.runs = [];
    this.chosen = new Set();
    this.body = document.getElementById('runs-body');
    this.compareButton = document.getElementById('compare-go');
    this.note = document.getElementById('runs-note');
    this.compareButton.addEventListener('click', () => {
      this.onCompare(this.runs.filter((r) => this.chosen.has(r.id)));
    });
    document.getElementById('runs-refresh').addEventListener('click', () => this.refresh());
    this.sort = document.getElementById('runs-sort');
    this.sort.addEventListener('change', () => this.render());
    setInterval(() => { if (!document.hidden) this.refresh(); }, REFRESH_MS);
  }

  async refresh() {
    try {
      this.runs = await this.api('/api/runs');
      this.note.textContent = this.runs.length ? '' : 'No runs yet: choose a model and press Start.';
      this.note.className = '';
    } catch (e) {
      this.note.textContent = `the runs could not be listed: ${e.message}`;
      this.note.className = 'error';
      return;
    }
    for (const id of [...this.chosen]) if (!this.runs.some((r) => r.id === id)) this.chosen.delete(id);
    this.render();
  }

  render() {
    // the rows are made anew; keyboard focus in one stays on the same control of the same run
    const focused = this.body.contains(document.activeElement) ? document.activeElement : null;
    const row = focused?.closest('tr');
    const place = row && [row.dataset.run, [...row.querySelectorAll('a, button, input')].indexOf(focused)];
    this.body.replaceChildren(...this.sorted().map((run) => this.row(run)));
    if (place) {
      const again = [...this.body.querySelectorAll('tr')].find((tr) => tr.dataset.run === place[0]);
      again?.querySelectorAll('a, button, input')[place[1]]?.focus();
    }
    this.compareButton.disabled = this.chosen.size < 1;
    this.compareButton.textContent = `Compare selected (${this.chosen.size})`;
  }

  // the runs in the chosen order (newest first: the run just started is at the top)
  sorted() {
    const runs = [...this.runs], loss = (r) => (Number.isFinite(r.final_loss) ? r.final_loss : Infinity);
    const by = {
      newest: () => runs.reverse(),
      oldest: () => runs,
      loss: () => runs.sort((a, b) => loss(a) - loss(b)),
      name: () => runs.sort((a, b) => (a.name || '\uffff').localeCompare(b.name || '\uffff') || a.created - b.created),
    };
    return by[this.sort.value]();
  }

  async rename(run) {
    const name = prompt(`Name of run ${run.id} (one line; empty: none)`, run.name);
    if (name === null) return;
    const note = prompt(`A note on run ${run.id} (what it was for; empty: none)`, run.note);
    if (note === null) return;
    await this.act(() => this.api(`/api/runs/${run.id}/label`, {method: 'POST', body: {name, note}}), 'renamed');
  }

  async remove(run) {
    if (!confirm(`Delete run ${run.id}${run.name ? ` (${run.name})` : ''}? It leaves the list; its directory moves ` +
                 'to the runs directory\'s .deleted folder, from where it can be moved back.')) return;
    await this.act(() => this.api(`/api/runs/${run.id}`, {method: 'DELETE'}), 'deleted');
  }

  async act(request, what) {
    try {
      await request();
      await this.refresh();
    } catch (e) {
      this.note.textContent = `not ${what}: ${e.message}`;
      this.note.className = 'error';
    }
  }

  row(run) {
    const tr = document.createElement('tr');
    tr.dataset.run = run.id;
    tr.className = `status-${run.status}`;
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.className = 'choose';
    box.checked = this.chosen.has(run.id);
    box.title = 'compare this run';
    box.addEventListener('change', () => {
      if (box.checked) this.chosen.add(run.id);
      else this.chosen.delete(run.id);
      this.render();
    });
    const status = document.createElement('span');
    status.className = 'status';
    status.textContent = run.status + (run.stop_requested ? ' (stop asked)' : '');
    if (run.message) status.title = run.message;
    const done = run.last_step + 1;
    const training = this.training();
    tr.append(
      cell(box),
      cell(this.idCell(run, training), 'id'),
      cell(run.kind, 'kind', 'kind'),
      cell(status, '', 'status'),
      cell(`${done}/${run.steps}`, 'num', 'steps'),
      cell(formatLoss(run.final_loss), 'num loss', 'last loss'),
      cell(settings(run.config), 'settings'),
      cell(formatTime(run.created), 'created', 'created'),
      cell(this.actions(run), 'actions'),
    );
    return tr;
  }

  idCell(run, training) {
    const span = document.createElement('span');
    if (run.name) {
      const name = document.createElement('strong');
      name.className = 'run-name';
      name.textContent = run.name;
      if (run.note) name.title = run.note;
      span.append(name, document.createElement('br'));
    }
    span.append(run.id === training ? run.id : link(run.id, run.page_url, 'open this run', training));
    return span;
  }

  actions(run) {
    const span = document.createElement('span');
    const training = this.training();
    if (run.id === training) {
      const here = document.createElement('span');
      here.className = 'training-here';
      here.textContent = 'training in this tab';
      span.append(here);
    } else {
      const open = run.status === 'running' ? 'follow' : 'open';
      const title = run.status === 'running' ? 'watch it train, live (another page or webmp train trains it)' : 'show its curves and result';
      span.append(link(open, run.page_url, title, training));
    }
    if (run.resumable && run.id !== training) {
      const resume = link('resume', `${run.page_url}&resume=1`,
        `continue this run in ${training ? 'a new' : 'this'} tab with its own settings${run.checkpoint_step ? ` from step ${run.checkpoint_step}` : ' from the start'}`,
        training);
      resume.className = 'resume';
      span.append(' · ', resume);
    }
    const again = document.createElement('button');
    again.type = 'button';
    again.className = 'new-from';
    again.textContent = 'new run like it';
    again.title = 'put this run\'s settings in the form; Start then trains a new run';
    again.addEventListener('click', () => this.onNewFrom(run));
    const button = (text, cls, title, onClick) => {
      const b = document.createElement('button');
      Object.assign(b, {type: 'button', className: cls, textContent: text, title});
      b.addEventListener('click', onClick);
      return b;
    };
    span.append(' · ', again, ' ', button('name', 'rename', 'name this run and note what it was for', () => this.rename(run)));
    if (run.status !== 'running' && !run.connected && run.id !== training) {
      span.append(' ', button('delete', 'delete', 'take it off the list (its directory moves to .deleted)', () => this.remove(run)));
    }
    return span;
  }
}
