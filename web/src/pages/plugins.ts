import { api, ApiError } from '../api';
import { clear, h } from '../dom';
import { bytes, when } from '../format';
import { can } from '../session';
import type { Page as ApiPage, Plugin } from '../types';
import { empty, link, loading, table } from '../ui';
import type { Page } from './page';

/** The service's default limit; it refuses larger bodies anyway, this only answers sooner. */
const MAX_BYTES = 16 << 20;

export const pluginsPage: Page = async (main) => {
  // (The plugin's own page, #/plugins/{id}, is plugin.ts.)
  const list = h('div', { class: 'table-scroll' }, loading('Loading plugins…'));
  main.append(h('div', { class: 'page-head' }, h('h1', null, 'Policy plugins')),
    h('p', { class: 'hint' }, 'Policies are sandboxed Wasm components. An upload is validated by instantiating it in the sandbox and stored inactive: no run can use it until an admin activates it, after a trial replay on its page if they like. A plugin that traps, times out or answers invalidly is quarantined and the scheduler falls back to a safe built-in.'),
    ...(can('plugins.manage') ? [upload(() => void load())] : []), list);
  async function load(): Promise<void> {
    const raw = await api<Plugin[] | ApiPage<Plugin>>('/plugins');
    const ps = Array.isArray(raw) ? raw : raw.items;
    clear(list);
    if (!ps.length) { list.append(empty('No plugins', 'Upload a policy component (.wasm).')); return; }
    list.append(table(['Name', 'Version', 'State', 'Interface', 'Size', 'SHA-256', 'Uploaded', ''], ps.map((p) => [
      h('span', null, link(`#/plugins/${p.id}`, p.name, { 'data-plugin': String(p.id) }),
        p.builtin ? h('span', { class: 'badge badge-builtin', title: 'carried by the binary' }, 'built-in') : null),
      p.version, h('span', { class: `badge badge-${p.state}`, 'data-state': p.state }, p.state), p.interface_version ?? '–',
      p.size_bytes ? bytes(p.size_bytes) : '–',
      h('code', { title: p.sha256_hex ?? '' }, (p.sha256_hex ?? '').slice(0, 12)),
      `${p.uploaded_by ?? ''} ${when(p.created_at)}`,
      can('plugins.manage') ? h('span', { class: 'actions' },
        p.state !== 'active' ? action(p, 'activate', 'Activate', load) : null,
        p.state === 'active' ? action(p, 'disable', 'Disable', load) : null) : '',
    ]), 'plugins'));
  }
  await load();
};

export function action(p: Plugin, verb: string, label: string, reload: () => Promise<void>): HTMLElement {
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
  const msg = h('div', { class: 'upload-result', role: 'status', 'data-testid': 'upload-result' });
  const button = h('button', { class: 'btn btn-primary', type: 'submit' }, 'Upload and validate');
  return h('form', { class: 'upload panel', 'data-testid': 'plugin-upload', onsubmit: async (e: Event) => {
    e.preventDefault();
    const f = file.files?.[0];
    if (!f) return;
    if (f.size > MAX_BYTES) { msg.replaceChildren(h('p', { class: 'form-error' }, `Too large: ${bytes(f.size)} (limit ${bytes(MAX_BYTES)}).`)); return; }
    button.disabled = true;
    msg.replaceChildren(h('p', null, `Validating ${f.name} (${bytes(f.size)}) in the sandbox…`));
    try {
      // Name, version and interface version come from the component itself.
      const p = await api<Plugin>('/plugins', { method: 'POST', body: await f.arrayBuffer(),
        headers: { 'Content-Type': 'application/wasm' } });
      msg.replaceChildren(h('p', { class: 'ok', 'data-outcome': 'accepted' },
        `Accepted: ${p.name} ${p.version} (interface ${p.interface_version ?? '?'}), stored ${p.state}. `,
        link(`#/plugins/${p.id}`, p.state === 'active' ? 'Open its page' : 'Try it and activate it on its page', { 'data-testid': 'uploaded-link' })));
      done();
    } catch (err) {
      msg.replaceChildren(h('p', { class: 'form-error', 'data-outcome': 'rejected' }, 'Rejected: ',
        err instanceof ApiError ? `${err.title}${err.detail ? ` — ${err.detail}` : ''}` : String(err)));
    } finally {
      button.disabled = false;
    }
  } }, h('h2', null, 'Upload a policy'), h('label', null, 'Component (.wasm)', file), button, msg);
}
