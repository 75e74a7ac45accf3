// The data field: the page's own training data. A file chosen here goes to the server (PUT
// /api/data), which checks it with `webmp train --data`'s loaders (.npz and .csv: a table; any other
// name: UTF-8 text, for the GPT) and stores it under its SHA-256; the field then holds that hash
// ("sha256:<hex>"), which is all a run's config says of its data. Empty: the built-in data.
import {page} from './page.js';
import {api} from './server.js';

export class DataField {
  // onError(detail) shows the server's refusal beside the field ('' clears it); maxBytes: the
  // server's limit for one upload (GET /api/form's max_upload).
  constructor(id, {onError, maxBytes}) {
    this.onError = onError;
    this.input = Object.assign(document.createElement('input'), {id, size: 20, placeholder: 'built-in data'});
    const file = Object.assign(document.createElement('input'), {type: 'file', hidden: true,
                                                                  accept: '.npz,.csv,.txt,text/*'});
    const pick = Object.assign(document.createElement('button'), {type: 'button', textContent: 'upload a file'});
    this.note = document.createElement('small');
    this.note.className = 'data-note';
    pick.addEventListener('click', () => file.click());
    file.addEventListener('change', () => {
      if (file.files.length) this.upload(file.files[0], maxBytes).finally(() => { file.value = ''; });
    });
    const tools = document.createElement('span');
    tools.className = 'data-tools';
    tools.append(pick, file);
    this.extra = [tools, this.note];
  }

  async upload(file, maxBytes) {
    if (file.size > maxBytes) {
      this.onError(`${file.name}: ${file.size} bytes; an upload is at most ${maxBytes}`);
      return;
    }
    this.note.textContent = `uploading ${file.name}…`;
    try {
      const got = await api(`/api/data?${new URLSearchParams({name: file.name})}`,
                            {method: 'PUT', body: await file.arrayBuffer()});
      page.upload = got;
      this.input.value = got.data;
      this.note.textContent = `${got.name}: ${got.description}`;
      this.onError('');
      this.input.dispatchEvent(new Event('input', {bubbles: true}));  // the layer table, Resume's note
    } catch (e) {
      this.note.textContent = '';
      this.onError(typeof e.detail === 'string' ? e.detail : e.message);
    }
  }

  value() { return this.input.value.trim() === '' ? null : this.input.value.trim(); }

  set(value) {
    this.input.value = value === null ? '' : value;
    if (value !== page.upload?.data) this.note.textContent = '';
  }
}
