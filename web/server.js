// Talking to the server: its JSON API (the errors it answers carry their status and detail, and
// say the server's words: the request stays in err.request for the log), the run's WebSocket
// (WS /api/runs/{id}/ws) and the WGSL kernels a plan names.

export async function api(path, {method = 'GET', body, raw = false} = {}) {
  const headers = {};  // a server with a token set it as a cookie when this page was opened
  if (body !== undefined && !(body instanceof ArrayBuffer)) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {method, headers,
    body: body === undefined || body instanceof ArrayBuffer ? body : JSON.stringify(body)});
  if (!res.ok) {
    const detail = await res.json().then((j) => j.detail, () => null);
    const err = new Error(explain(res, detail));
    Object.assign(err, {status: res.status, detail, request: `${method} ${path.split('?')[0]}`});
    throw err;
  }
  return raw ? res.arrayBuffer() : res.json();
}

// What a refused request says to a person: the server's one line, a validation list as
// "field: problem" lines, else what the status means.
function explain(res, detail) {
  if (typeof detail === 'string' && detail) return detail;
  if (Array.isArray(detail)) {
    return detail.map((d) => `${(d.loc || []).filter((p) => p !== 'body' && p !== 'query').join('.') || 'request'}: ${d.msg}`).join('; ');
  }
  const meaning = {401: 'this server needs its token (open the URL it printed)', 404: 'not found on the server',
                   413: 'too large for the server', 500: 'the server failed (its log says why)',
                   502: 'the server cannot be reached', 503: 'the server is busy or stopping'};
  return `${meaning[res.status] || 'the server refused it'} (HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''})`;
}

// JSON has no NaN or Infinity: send them as strings, which the server's pydantic models accept.
const finite = (key, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v);

// The run's WebSocket: every message gets one reply (ack or error), in order.
class RunSocket {
  static open(runId) {
    const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/api/runs/${runId}/ws`;
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      ws.onmessage = (e) => {
        const m = JSON.parse(e.data);
        if (m.type === 'welcome') resolve(new RunSocket(ws));
        else reject(new Error(m.message || 'the server refused the connection'));
      };
      ws.onclose = (e) => reject(new Error(`the server closed the connection (${e.code})`));
    });
  }

  constructor(ws) {
    this.ws = ws;
    this.waiting = [];
    ws.onmessage = (e) => {
      const m = JSON.parse(e.data), w = this.waiting.shift();
      if (!w) return;
      if (m.type === 'error') w.reject(new Error(`server: ${m.message}`));
      else w.resolve(m);
    };
    ws.onclose = () => {
      for (const w of this.waiting.splice(0)) w.reject(new Error('the connection to the server closed'));
    };
  }

  request(msg) {
    if (this.ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error('the connection to the server closed'));
    return new Promise((resolve, reject) => {
      this.waiting.push({resolve, reject});
      this.ws.send(JSON.stringify(msg, finite));
    });
  }

  close() { this.ws.close(); }
}

export async function openSocket(runId) {
  // A reloaded page can arrive before the server has seen the old page leave: retry briefly.
  for (let attempt = 1; ; attempt++) {
    try {
      return await RunSocket.open(runId);
    } catch (e) {
      if (attempt >= 5 || !/already has a page/.test(e.message)) throw e;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

// A kernel file's text by its name: every file comes in one answer, fetched once (a plan's ~40
// files one request each took 0.35 s of a cold start; a failed fetch is tried again next time).
let shaders = null;
export const fetchShader = (name) => {
  shaders = shaders || fetch('/shaders.json').then((r) => {
    if (!r.ok) throw new Error(`the kernel files (/shaders.json): ${r.status}`);
    return r.json();
  }).catch((e) => { shaders = null; throw e; });
  return shaders.then((all) => {
    if (!(name in all)) throw new Error(`shader ${name}: the server has no such kernel file`);
    return all[name];
  });
};
