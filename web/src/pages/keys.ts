// Admins create keys for analysts (read-only history) and further admins.

import { api, ApiError } from '../api';
import { h } from '../dom';
import { keyOnce } from './tenants';
import type { Page } from './page';

export const keysPage: Page = (main) => {
  const role = h('select', { name: 'role' }, h('option', { value: 'analyst' }, 'analyst'), h('option', { value: 'admin' }, 'admin'));
  const name = h('input', { name: 'name', required: true, placeholder: 'e.g. jane (analytics)' });
  const out = h('div', { role: 'status' });
  main.append(h('h1', null, 'API keys'),
    h('p', { class: 'hint' }, 'Tenant keys are created with the tenant. A key is shown once; the service stores only its hash.'),
    h('form', { class: 'panel inline-form', onsubmit: async (e: Event) => {
      e.preventDefault();
      try {
        const r = await api<{ api_key?: string; key?: string }>('/keys', { method: 'POST', body: JSON.stringify({ role: role.value, name: name.value.trim() }) });
        out.replaceChildren(keyOnce(r.api_key ?? r.key ?? ''));
      } catch (err) {
        out.replaceChildren(h('p', { class: 'form-error' }, err instanceof ApiError ? `${err.title}: ${err.detail}` : String(err)));
      }
    } }, h('label', null, 'Role', role), h('label', null, 'Name', name), h('button', { class: 'btn btn-primary', type: 'submit' }, 'Create key')),
    out);
};
