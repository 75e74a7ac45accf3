// The run form (#controls' fields), made from GET /api/form; reading its values into a run's config,
// presets, and the server's messages next to their fields.
// The server describes every TrainConfig field (kind, choices, help text, the models that read it,
// its group, whether it shows before "more settings", why a page cannot set it), each model's
// defaults and the presets; the page knows no field, default or preset of its own. A run's config
// holds the model and only the fields that differ from that model's defaults: the server fills in
// the rest (MODEL_DEFAULTS), as `webmp train` does for flags left out. The server validates (422: one
// "invalid FIELD: message" line per field, `webmp train`'s words), and each message is shown next to
// its field. Two fields have inputs of their own: the network's JSON editor with its layer table
// (network.js) and the data's upload (upload.js).
import {$, page} from './page.js';
import {api} from './server.js';
import {NetworkField} from './network.js';
import {DataField} from './upload.js';

// The form's fields, groups, defaults and presets (GET /api/form), their inputs and the model they
// show; `sample`: the text generation form's defaults (`webmp sample`'s) and limits.
export const form = {ready: false, fields: [], groups: [], defaults: {}, presets: [], sample: null, inputs: {}, labels: {},
                     model: null, own: {}, maxUpload: 0};  // own: the fields with inputs of their own, by name

const sameValue = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// One field's message beside it ('' clears it), as showFieldErrors shows the server's.
function showFieldError(name, message) {
  form.labels[name].querySelector('.field-error').textContent = message;
  if (message) page.fieldErrors[name] = message;
  else delete page.fieldErrors[name];
}

// The network's table depends on the batch size and the data (its input must be theirs).
function tableContext() {
  const get = (name) => getField(form.fields.find((f) => f.name === name));
  const data = get('data');
  return {batch_size: get('batch_size'), ...(data === null ? {} : {data})};
}

function ownInput(f) {
  const id = `cfg-${f.name}`;
  if (f.kind === 'network') {
    return new NetworkField(id, {context: tableContext, onError: (detail) =>
      showFieldError(f.name, detail.replace(/^invalid model_spec: /, '').replaceAll('\n', '; '))});
  }
  return new DataField(id, {maxBytes: form.maxUpload, onError: (detail) => showFieldError(f.name, detail)});
}

function fieldInput(f) {
  let el;
  if (f.kind === 'network' || f.kind === 'data') {
    form.own[f.name] = ownInput(f);
    el = form.own[f.name].input;
  } else if (f.kind === 'choice') {
    el = document.createElement('select');
    for (const c of f.choices) el.append(new Option(c, c));
  } else {
    el = document.createElement('input');
    if (f.kind === 'bool') {
      el.type = 'checkbox';
    } else if (f.kind === 'int' || f.kind === 'float') {
      el.type = 'number';  // ranges are the server's to check (its 422 names the field)
      el.step = f.kind === 'int' ? '1' : 'any';
    } else {  // int_list (comma-separated) or text
      el.size = 10;
    }
  }
  el.id = `cfg-${f.name}`;
  el.disabled = f.disabled !== null;
  return el;
}

// A number as typed, else the text itself: the server's message then says what is wrong with it.
const number = (text) => (text.trim() !== '' && Number.isFinite(Number(text)) ? Number(text) : text);

function getField(f) {
  const el = form.inputs[f.name];
  if (form.own[f.name]) return form.own[f.name].value();
  switch (f.kind) {
    case 'bool': return el.checked;
    case 'int': case 'float': return number(el.value);
    case 'int_list': return el.value.split(',').map(number);
    case 'text': return el.value === '' ? null : el.value;
    default: return el.value;
  }
}

function setField(f, value) {
  const el = form.inputs[f.name];
  if (form.own[f.name]) form.own[f.name].set(value);
  else if (f.kind === 'bool') el.checked = Boolean(value);
  else el.value = Array.isArray(value) ? value.join(',') : value === null ? '' : String(value);
}

const applies = (f, model) => f.models === null || f.models.includes(model);

// Shows the fields `model` reads; a field still at the previous model's default takes this one's.
function selectModel(model) {
  const before = form.model === null ? null : form.defaults[form.model];
  for (const f of form.fields) {
    if (f.name !== 'model' && (before === null || sameValue(getField(f), before[f.name]))) {
      setField(f, form.defaults[model][f.name]);
    }
    form.labels[f.name].hidden = !applies(f, model);
  }
  form.model = model;
  if (model === 'net') form.own.model_spec?.refresh();
}

// A run's config: every field as it was (a run opened from its URL).
export function showConfig(cfg) {
  for (const f of form.fields) setField(f, cfg[f.name]);
  form.model = cfg.model;
  selectModel(cfg.model);  // the same model: only shows its fields
}

// A preset: its model's defaults with the preset's fields changed.
function applyPreset(name) {
  const preset = form.presets.find((p) => p.name === name);
  $('preset-note').textContent = preset ? preset.description : '';
  if (!preset) return;
  const cfg = {...form.defaults[preset.config.model || 'mlp'], ...preset.config};
  showConfig(cfg);
  showFieldErrors('');
}

// A run's config holds the model, its network (net: it has no default the server would fill in) and
// only the fields that differ from that model's defaults.
export function formConfig() {
  const model = form.inputs.model.value, cfg = {model};
  for (const f of form.fields) {
    if (f.name === 'model' || f.disabled !== null || !applies(f, model)) continue;
    const value = getField(f);
    if (f.kind === 'network' || !sameValue(value, form.defaults[model][f.name])) cfg[f.name] = value;
  }
  return cfg;
}

// The server's 422 lines ("invalid FIELD: message", `webmp train`'s) next to their fields; lines
// about the config as a whole (or a field the form does not show) go under the form.
export function showFieldErrors(detail) {
  const general = [];
  page.fieldErrors = {};
  for (const el of document.querySelectorAll('#fields .field-error')) el.textContent = '';
  for (const line of detail.split('\n').filter(Boolean)) {
    const m = /^invalid ([A-Za-z_0-9]+)[^:]*: (.*)$/.exec(line);
    const label = m && form.labels[m[1]];
    if (label && !label.hidden) {
      label.querySelector('.field-error').textContent = m[2];
      page.fieldErrors[m[1]] = m[2];
      label.closest('details')?.setAttribute('open', '');
    } else {
      general.push(line);
    }
  }
  $('form-error').textContent = general.join('\n');
  $('form-error').hidden = general.length === 0;
}

function fieldLabel(f) {
  const label = document.createElement('label'), name = document.createElement('span');
  const error = document.createElement('span');
  label.title = f.help;
  label.className = `field ${f.kind}`;
  name.textContent = f.label;
  error.className = 'field-error';
  error.setAttribute('role', 'alert');
  const input = fieldInput(f);
  label.append(name, input, ...(form.own[f.name]?.extra ?? []), error);
  if (f.disabled !== null) {
    const why = document.createElement('small');
    why.className = 'why';
    why.textContent = `not in the browser: ${f.disabled}`;
    label.append(why);
  }
  form.inputs[f.name] = input;
  form.labels[f.name] = label;
  return label;
}

// Each group's common fields, then "more settings" holding the rest, by group again.
function buildForm() {
  const fieldset = (group, fields) => {
    const box = document.createElement('fieldset'), legend = document.createElement('legend');
    box.className = `group group-${group.name}`;
    legend.textContent = group.title;
    box.append(legend, ...fields.map(fieldLabel));
    return box;
  };
  const inGroup = (g, common) => form.fields.filter((f) => f.group === g.name && f.common === common);
  const more = document.createElement('details'), summary = document.createElement('summary');
  const groups = document.createElement('div');
  more.id = 'more-settings';
  summary.textContent = 'more settings';
  groups.id = 'more-groups';
  groups.append(...form.groups.map((g) => fieldset(g, inGroup(g, false))).filter((b) => b.children.length > 1));
  more.append(summary, groups);
  $('fields').replaceChildren(...form.groups.map((g) => fieldset(g, inGroup(g, true))), more);
  $('preset').append(...form.presets.map((p) => new Option(p.title, p.name)));
}

// The form's fields that differ from a run's settings (labels), to say what Resume leaves out.
export function formChanges(cfg) {
  return form.fields.filter((f) => applies(f, form.inputs.model.value) && !sameValue(getField(f), cfg[f.name]))
    .map((f) => f.label);
}

export let formReady = null;  // GET /api/form, and the form built from it (loadForm, when the page opens)

export function loadForm() {
  formReady = api('/api/form').then(({fields, groups, defaults, presets, sample, max_upload: maxUpload}) => {
    Object.assign(form, {fields, groups, defaults, presets, sample, maxUpload});
    buildForm();
    form.inputs.model.addEventListener('change', () => selectModel(form.inputs.model.value));
    for (const name of ['batch_size', 'data']) {
      form.inputs[name].addEventListener('input', () => { if (form.model === 'net') form.own.model_spec.refresh(); });
    }
    $('preset').addEventListener('change', () => applyPreset($('preset').value));
    selectModel(form.inputs.model.value);
    form.ready = true;
  });
  return formReady;
}
