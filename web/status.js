// The status line, and the buttons that follow it: Stop only while a run prepares or trains here,
// Start and Resume only while none does and the page has WebGPU (Start once the form is built too).
import {$, page} from './page.js';
import {form} from './form.js';

export function setStatus(status, text = status) {
  page.status = status;
  $('status').textContent = text;
  $('status-line').className = status;
  const busy = status === 'preparing' || status === 'running';
  $('start').disabled = busy || !form.ready || page.noWebGPU;
  $('stop').disabled = !busy;
  $('resume').disabled = busy || page.noWebGPU;
}
