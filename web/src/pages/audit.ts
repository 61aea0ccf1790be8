// The audit log (admins only): every change, who made it and when, newest first, with the
// service's own filters (actor, action, target id, time) and server-side pages.

import { api, ApiError, qs, newestOnly } from '../api';
import { clear, h } from '../dom';
import { when } from '../format';
import { replaceQuery } from '../router';
import type { AuditEntry, Page as ApiPage } from '../types';
import { empty, errorBox } from '../ui';
import type { Page } from './page';

const ACTIONS = ['tenant.create', 'tenant.remove', 'sla.update', 'key.create', 'key.revoke', 'plugin.upload',
  'plugin.active', 'plugin.disabled', 'plugin.quarantine', 'run.create', 'run.cancel', 'cluster.create', 'model.create'];

export const auditPage: Page = (main, ctx) => {
  const q = ctx.route.query;
  const f = { actor: q.get('actor') ?? '', action: q.get('action') ?? '', target: q.get('target') ?? '',
    since: q.get('since') ?? '', until: q.get('until') ?? '' };
  const cursors: (string | null)[] = [null];
  const text = (name: 'actor' | 'target', label: string, ph: string) => h('label', null, label,
    h('input', { name, value: f[name], placeholder: ph, onchange: (e: Event) => set(name, (e.target as HTMLInputElement).value.trim()) }));
  const date = (name: 'since' | 'until', label: string) => h('label', null, label,
    h('input', { type: 'date', name, value: f[name].slice(0, 10), onchange: (e: Event) => set(name, (e.target as HTMLInputElement).value) }));
  const body = h('div');
  const pager = h('div', { class: 'pager' });
  main.append(h('div', { class: 'page-head' }, h('h1', null, 'Audit log')),
    h('p', { class: 'hint' }, 'Every change made through the API or by the service itself (a plugin quarantined during a run), with who made it and when.'),
    h('form', { class: 'filters', 'aria-label': 'Filters', onsubmit: (e: Event) => e.preventDefault() },
      text('actor', 'Actor', 'e.g. admin:admin'),
      h('label', null, 'Action', h('select', { name: 'action', onchange: (e: Event) => set('action', (e.target as HTMLSelectElement).value) },
        h('option', { value: '' }, 'any'), ACTIONS.map((a) => h('option', { value: a, selected: f.action === a }, a)))),
      text('target', 'Target id', 'a tenant, key, plugin or run id'),
      date('since', 'From'), date('until', 'To')),
    body, pager);

  function set(k: keyof typeof f, v: string): void {
    f[k] = v;
    const p = new URLSearchParams();
    for (const [key, val] of Object.entries(f)) if (val) p.set(key, val);
    replaceQuery(p);
    cursors.length = 1;
    void load();
  }

  const begin = newestOnly();
  async function load(): Promise<void> {
    const stale = begin();
    let page: ApiPage<AuditEntry>;
    try {
      page = await api<ApiPage<AuditEntry>>(`/audit${qs({
        actor: f.actor, action: f.action, target: f.target, limit: 50, cursor: cursors[cursors.length - 1],
        since: f.since ? new Date(`${f.since}T00:00:00Z`).toISOString() : '',
        until: f.until ? new Date(`${f.until}T23:59:59Z`).toISOString() : '',
      })}`);
    } catch (e) {
      if (stale()) return;
      clear(pager);
      body.replaceChildren(errorBox(e, () => void load()));
      if (e instanceof ApiError && e.field) body.append(h('p', { class: 'form-error' }, `Check the ${e.field} filter.`));
      return;
    }
    if (stale()) return;
    clear(body);
    if (!page.items.length) {
      body.append(empty('No entries', Object.values(f).some(Boolean) ? 'No change matches these filters.' : 'Nothing has been changed yet.'));
    } else {
      body.append(h('table', { class: 'tbl audit', 'data-testid': 'audit-table' },
        h('thead', null, h('tr', null, ['When', 'Actor', 'Action', 'Target', 'Detail'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', null, page.items.map((e) => h('tr', { 'data-audit': e.id, 'data-action': e.action },
          h('td', { title: e.at }, when(e.at)), h('td', null, e.actor), h('td', null, h('code', null, e.action)),
          h('td', null, h('code', { class: 'id' }, e.target)),
          h('td', { class: 'detail' }, h('code', null, JSON.stringify(e.detail))))))));
    }
    clear(pager);
    pager.append(
      h('button', { class: 'btn', disabled: cursors.length === 1, onclick: () => { cursors.pop(); void load(); } }, '← Newer'),
      h('span', { class: 'hint' }, `page ${cursors.length}`),
      h('button', { class: 'btn', disabled: !page.next_cursor, onclick: () => { cursors.push(page.next_cursor); void load(); } }, 'Older →'));
  }
  void load();
};
