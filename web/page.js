// The page's state and its small helpers: window.webmp, what tests and scripts read (the page's
// status, its run, the f16 path, any error, its run's phases and timing, the sample, the tuning
// pass), the log at the bottom, and the definition lists of the adapter and result panels.

export const $ = (id) => document.getElementById(id);
// What tests and scripts can read: the page's status, its run, the f16 path and any error.
export const page = window.webmp = {
  status: 'idle', runId: null, f16Path: null, error: null, records: 0, runner: null,
  training: null,  // the run this tab trains (from preparing to its end): leaving the page ends it
  followResumes: 0,  // resumes of the run this tab follows that it followed on through
  phase: null, phases: [], timing: null, fieldErrors: {},  // a run's phases; the form's errors
  layerTable: null, upload: null,  // the network's last layer table; the last data upload's answer
  sample: {status: 'idle'}, sampled: 0,  // sampled: samples ended (done or failed)
  noWebGPU: false,  // true: no adapter here, the page cannot train
  // the page's tuning pass: this adapter's key on the server, how many shape
  // classes are tuned for it, the last pass's status and verdicts
  tune: {key: null, tuned: 0, status: 'idle', verdicts: [], forms: [], error: null}
};

export function log(line) {
  $('log').textContent += `${new Date().toLocaleTimeString()} ${line}\n`;
}

export function fill(dl, entries) {
  dl.replaceChildren(...entries.flatMap(([k, v]) => {
    const dt = document.createElement('dt'), dd = document.createElement('dd');
    dt.textContent = k;
    dd.append(v);  // text or an element
    return [dt, dd];
  }));
}
