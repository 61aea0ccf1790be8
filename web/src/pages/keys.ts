// Admins create keys for analysts (read-only history), list every key and revoke any of
// them; tenant keys are created with the tenant, and the admin token comes from the
// service's configuration. A revoked key answers 401 from its next request on.

import { api, ApiError } from '../api';
import { clear, h } from '../dom';
import { shortId, when } from '../format';
import type { ApiKey } from '../types';
import { badge, errorBox } from '../ui';
import { keyOnce } from './tenants';
import type { Page } from './page';

export const keysPage: Page = (main) => {
  const name = h('input', { name: 'name', required: true, placeholder: 'e.g. jane (analytics)' });
  const out = h('div', { role: 'status' });
  const list = h('div', { 'data-testid': 'key-list' });
  main.append(h('h1', null, 'API keys'),
    h('p', { class: 'hint' }, 'Analyst keys read the history (runs, results, tenants) and change nothing. Tenant keys are created with the tenant. A key is shown once; the service stores only its hash. A revoked key is refused from its next request on.'),
    h('form', { class: 'panel inline-form', onsubmit: async (e: Event) => {
      e.preventDefault();
      try {
        const r = await api<{ api_key?: string; key?: string }>('/keys', { method: 'POST', body: JSON.stringify({ role: 'analyst', name: name.value.trim() }) });
        out.replaceChildren(keyOnce(r.api_key ?? r.key ?? ''));
        void load();
      } catch (err) {
        out.replaceChildren(h('p', { class: 'form-error' }, err instanceof ApiError ? `${err.title}: ${err.detail}` : String(err)));
      }
    } }, h('label', null, 'Name', name), h('button', { class: 'btn btn-primary', type: 'submit' }, 'Create key')),
    out, list);

  async function load(): Promise<void> {
    let keys: ApiKey[];
    try {
      keys = (await api<{ items: ApiKey[] }>('/keys')).items;
    } catch (e) {
      list.replaceChildren(errorBox(e, () => void load()));
      return;
    }
    clear(list);
    list.append(h('table', { class: 'tbl keys' },
      h('thead', null, h('tr', null, ['Key', 'Name', 'Role', 'Tenant', 'Created', 'By', 'State', ''].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, keys.slice().reverse().map((k) => h('tr', { 'data-key': k.id },
        h('td', null, h('code', null, shortId(k.id))), h('td', null, k.name), h('td', null, k.role),
        h('td', null, k.tenant_id ? h('a', { href: `#/tenants/${k.tenant_id}` }, shortId(k.tenant_id)) : '–'),
        h('td', null, when(k.created_at)), h('td', null, k.created_by),
        h('td', null, k.revoked_at
          ? h('span', { title: `revoked by ${k.revoked_by ?? '?'}` }, badge('revoked'), ` ${when(k.revoked_at)}`)
          : badge('valid')),
        h('td', null, k.revoked_at ? null : revokeButton(k)))))));
  }

  function revokeButton(k: ApiKey): HTMLElement {
    return h('button', { class: 'btn btn-small btn-danger', 'data-action': 'revoke', 'aria-label': `Revoke key ${k.name} ${shortId(k.id)}`,
      onclick: async (e: Event) => {
        const b = e.currentTarget as HTMLButtonElement;
        if (!window.confirm(`Revoke the ${k.role} key “${k.name}”? Whoever holds it is refused from the next request on.`)) return;
        b.disabled = true;
        try {
          await api(`/keys/${k.id}`, { method: 'DELETE' });
        } catch (err) {
          b.disabled = false;
          b.title = err instanceof ApiError ? `${err.title}: ${err.detail}` : String(err);
          b.textContent = 'Revoke failed';
          return;
        }
        void load();
      } }, 'Revoke');
  }
  void load();
};
