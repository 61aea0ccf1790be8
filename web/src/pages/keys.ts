// Admins create keys for analysts (read-only history); tenant keys come with the tenant,
// and the admin token comes from the service's configuration.

import { api, ApiError } from '../api';
import { h } from '../dom';
import { keyOnce } from './tenants';
import type { Page } from './page';

export const keysPage: Page = (main) => {
  const name = h('input', { name: 'name', required: true, placeholder: 'e.g. jane (analytics)' });
  const out = h('div', { role: 'status' });
  main.append(h('h1', null, 'API keys'),
    h('p', { class: 'hint' }, 'Analyst keys read the history (runs, results, tenants) and change nothing. Tenant keys are created with the tenant. A key is shown once; the service stores only its hash.'),
    h('form', { class: 'panel inline-form', onsubmit: async (e: Event) => {
      e.preventDefault();
      try {
        const r = await api<{ api_key?: string; key?: string }>('/keys', { method: 'POST', body: JSON.stringify({ role: 'analyst', name: name.value.trim() }) });
        out.replaceChildren(keyOnce(r.api_key ?? r.key ?? ''));
      } catch (err) {
        out.replaceChildren(h('p', { class: 'form-error' }, err instanceof ApiError ? `${err.title}: ${err.detail}` : String(err)));
      }
    } }, h('label', null, 'Name', name), h('button', { class: 'btn btn-primary', type: 'submit' }, 'Create key')),
    out);
};
