import { api, ApiError } from '../api';
import { clear, h } from '../dom';
import { bytes, when } from '../format';
import { can } from '../session';
import type { Page as ApiPage, Plugin } from '../types';
import { empty, table } from '../ui';
import type { Page } from './page';

const MAX_BYTES = 16 << 20;

export const pluginsPage: Page = async (main) => {
  const list = h('div');
  main.append(h('div', { class: 'page-head' }, h('h1', null, 'Policy plugins')),
    h('p', { class: 'hint' }, 'Policies are sandboxed Wasm components. An upload is validated by instantiating it in the sandbox before it is stored; a plugin that traps, times out or answers invalidly is quarantined and the scheduler falls back to a safe built-in.'),
    ...(can("plugins.manage") ? [upload(() => void load())] : []), list);
  async function load(): Promise<void> {
    const raw = await api<Plugin[] | ApiPage<Plugin>>('/plugins');
    const ps = Array.isArray(raw) ? raw : raw.items;
    clear(list);
    if (!ps.length) { list.append(empty('No plugins', 'Upload a policy component (.wasm).')); return; }
    list.append(table(['Name', 'Version', 'State', 'Interface', 'Hash', 'Uploaded', ''], ps.map((p) => [
      p.name, p.version, h('span', { class: `badge badge-${p.state}`, 'data-state': p.state }, p.state), p.interface_version ?? '–',
      h('code', { title: p.content_hash ?? p.hash ?? '' }, (p.content_hash ?? p.hash ?? '').slice(0, 12)),
      `${p.uploaded_by ?? ''} ${when(p.uploaded_at)}`,
      can('plugins.manage') ? h('span', { class: 'actions' },
        p.state !== 'active' ? action(p, 'activate', 'Activate', load) : null,
        p.state === 'active' ? action(p, 'disable', 'Disable', load) : null) : '',
    ]), 'plugins'));
  }
  await load();
};

function action(p: Plugin, verb: string, label: string, reload: () => Promise<void>): HTMLElement {
  return h('button', { class: 'btn btn-small', 'data-action': verb, 'aria-label': `${label} ${p.name} ${p.version}`, onclick: async (e: Event) => {
    const b = e.currentTarget as HTMLButtonElement;
    b.disabled = true;
    try {
      await api(`/plugins/${p.id}/${verb}`, { method: 'POST' });
      await reload();
    } catch (err) {
      b.disabled = false;
      b.title = err instanceof ApiError ? err.detail : String(err);
      b.textContent = `${label} failed`;
    }
  } }, label);
}

function upload(done: () => void): HTMLElement {
  const file = h('input', { type: 'file', id: 'plugin-file', accept: '.wasm,application/wasm', required: true });
  const name = h('input', { name: 'name', id: 'plugin-name', placeholder: 'from the file name', pattern: '[a-z0-9][a-z0-9_-]{0,62}' });
  const version = h('input', { name: 'version', id: 'plugin-version', placeholder: '0.1.0' });
  const msg = h('div', { class: 'upload-result', role: 'status', 'data-testid': 'upload-result' });
  const button = h('button', { class: 'btn btn-primary', type: 'submit' }, 'Upload and validate');
  return h('form', { class: 'upload panel', 'data-testid': 'plugin-upload', onsubmit: async (e: Event) => {
    e.preventDefault();
    const f = file.files?.[0];
    if (!f) return;
    if (f.size > MAX_BYTES) { msg.replaceChildren(h('p', { class: 'form-error' }, `Too large: ${bytes(f.size)} (limit ${bytes(MAX_BYTES)}).`)); return; }
    const params = new URLSearchParams();
    params.set('name', name.value.trim() || f.name.replace(/\.wasm$/, '').toLowerCase().replace(/[^a-z0-9_-]/g, '-'));
    if (version.value.trim()) params.set('version', version.value.trim());
    button.disabled = true;
    msg.replaceChildren(h('p', null, `Validating ${f.name} (${bytes(f.size)}) in the sandbox…`));
    try {
      const p = await api<Plugin>(`/plugins?${params}`, { method: 'POST', body: await f.arrayBuffer(),
        headers: { 'Content-Type': 'application/wasm' } });
      msg.replaceChildren(h('p', { class: 'ok' }, `Accepted: ${p.name} ${p.version} (${p.state}). Activate it to use it in runs.`));
      done();
    } catch (err) {
      msg.replaceChildren(h('p', { class: 'form-error' }, 'Rejected: ',
        err instanceof ApiError ? `${err.title}${err.detail ? ` — ${err.detail}` : ''}` : String(err)));
    } finally {
      button.disabled = false;
    }
  } }, h('h2', null, 'Upload a policy'), h('label', null, 'Component (.wasm)', file), h('label', null, 'Name', name),
  h('label', null, 'Version', version), button, msg);
}
