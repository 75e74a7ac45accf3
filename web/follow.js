// Following a run another page (or `webmp train`) trains: its records as they come, its status and
// how it ended (WS /api/runs/{id}/follow); only one page trains a run. When the page training it
// leaves, this one keeps following (and offers Resume): the page that resumes it goes on here too,
// its records sent again from the first (the resume dropped those after its checkpoint).
import {$, page} from './page.js';
import {api} from './server.js';
import {setStatus} from './status.js';
import {charts, lens} from './charts.js';
import {showSummary} from './results.js';

export let following = null;  // {id, ws}: this page watches a run another page trains (WS /api/runs/{id}/follow)

export function stopFollowing() {
  if (following) following.ws.close();
  following = null;
  page.mode = 'training';
}

// Follows `run` live; showRun then gets it as the server has it once it ended (GET /api/runs/{id}).
export function follow(run, showRun) {
  stopFollowing();
  lens.reset(null);  // a follower gets records, not the trainer's lens counts
  page.mode = 'following';
  page.records = 0;
  charts.reset();
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/api/runs/${run.id}/follow`;
  const ws = new WebSocket(url), mine = {id: run.id, ws};
  following = mine;
  const where = run.kind === 'native' ? 'natively (webmp train)' : 'in another page';
  const live = (status, asked) => {
    setStatus('running', `run ${run.id}: ${status === 'created' ? 'being prepared' : 'training'} ${where}; following it live` +
      (asked ? ' (stop asked: it stops at its next metrics read)' : ''));
    $('stop').disabled = run.kind === 'native';  // a native run is stopped where it runs (Ctrl-C)
  };
  live(run.status, run.stop_requested);
  ws.onmessage = async (e) => {
    if (following !== mine) return;
    const m = JSON.parse(e.data);
    if (m.type === 'resumed') {
      charts.reset();
      page.records = 0;
      page.followResumes++;
    } else if (m.type === 'records') {
      charts.add(m.records);
      page.records += m.records.length;
      const last = m.records.at(-1);
      if (last) $('progress').textContent = `step ${last.step + 1}/${run.steps}, loss ${Number(last.loss).toPrecision(4)}, scale ${last.scale}`;
    } else if (m.type === 'status' && m.status === 'created' && !m.connected) {
      stopFollowing();  // the page that was preparing it left before it started
      setStatus('idle', `run ${run.id}: the page preparing it left before it started; reload this page to train it here`);
    } else if (m.type === 'status' && (m.status === 'running' || m.status === 'created')) {
      const wasAway = page.status === 'disconnected';
      live(m.status, m.stop_requested);
      if (wasAway) showRun(await api(`/api/runs/${run.id}`));  // Resume no longer offered
    } else if (m.type === 'status' && m.status === 'disconnected') {
      setStatus('disconnected', `run ${run.id}: ${m.message}; still following it: it goes on here when a page resumes it`);
      showRun(await api(`/api/runs/${run.id}`));  // Resume is offered in this tab too
    } else if (m.type === 'status') {
      following = null;
      if (m.status === 'finished') showSummary(await api(`/api/runs/${run.id}/summary`), run.id);
      setStatus(m.status, `run ${run.id}: ${m.status}${m.message ? ` — ${m.message}` : ''}`);
      showRun(await api(`/api/runs/${run.id}`));
    } else if (m.type === 'error') {
      following = null;
      page.error = m.message;
      setStatus('failed', m.message);
    }
  };
  ws.onclose = () => {
    if (following !== mine) return;
    following = null;
    page.error = 'the connection to the server closed';
    setStatus('failed', `run ${run.id}: the connection to the server closed while following it; reload to follow again`);
  };
}
