import { api, ApiError } from '../api';
import { lineChart } from '../charts/line';
import { clear, h } from '../dom';
import { ms, num, pct, tokPerS, when } from '../format';
import { can, session } from '../session';
import type { Page as ApiPage, Sla, Tenant } from '../types';
import { empty, errorBox, link, section, table } from '../ui';
import type { Page } from './page';

const items = <T>(x: T[] | ApiPage<T>): T[] => (Array.isArray(x) ? x : x.items);

export const tenantsPage: Page = async (main) => {
  const list = h('div');
  main.append(h('div', { class: 'page-head' }, h('h1', null, 'Tenants'), can('tenants.create') ? createTenant(() => void load()) : null), list);
  async function load(): Promise<void> {
    const ts = items(await api<Tenant[] | ApiPage<Tenant>>('/tenants'));
    clear(list);
    list.append(ts.length
      ? table(['Tenant', 'Model', 'Created', ''], ts.map((t) => [link(`#/tenants/${t.id}`, t.name), t.model ?? '–', when(t.created_at),
        link(`#/tenants/${t.id}`, 'SLA and statistics')]), 'tenant-list')
      : empty('No tenants yet', can('tenants.create') ? 'Create the first tenant with “New tenant”.' : 'An admin has not created any tenant.'));
  }
  await load();
};

function createTenant(done: () => void): HTMLElement {
  const d = h('details', { class: 'new-run' });
  const name = h('input', { name: 'name', required: true, pattern: '[a-z0-9][a-z0-9-]{0,62}', placeholder: 'acme-chat' });
  const ttft = h('input', { name: 'ttft_ms', type: 'number', min: '1', step: 'any', placeholder: '500' });
  const tpot = h('input', { name: 'tpot_ms', type: 'number', min: '1', step: 'any', placeholder: '50' });
  const out = h('div', { role: 'status' });
  d.append(h('summary', { class: 'btn btn-primary' }, 'New tenant'), h('form', { onsubmit: async (e: Event) => {
    e.preventDefault();
    const body: Record<string, unknown> = { name: name.value.trim() };
    if (ttft.value || tpot.value) body.sla = { ttft_ms: Number(ttft.value), tpot_ms: Number(tpot.value) };
    try {
      const r = await api<{ id: string; api_key?: string; key?: string }>('/tenants', { method: 'POST', body: JSON.stringify(body) });
      out.replaceChildren(keyOnce(r.api_key ?? r.key ?? ''));
      done();
    } catch (err) {
      out.replaceChildren(h('p', { class: 'form-error' }, err instanceof ApiError ? `${err.title}: ${err.detail}` : String(err)));
    }
  } }, h('label', null, 'Name', name), h('label', null, 'TTFT target (ms)', ttft), h('label', null, 'TPOT target (ms)', tpot),
  h('button', { class: 'btn btn-primary', type: 'submit' }, 'Create'), out));
  return d;
}

export function keyOnce(key: string): HTMLElement {
  return h('div', { class: 'key-once', 'data-testid': 'new-key' },
    h('p', null, h('b', null, 'Copy this key now: it is shown once and stored only hashed.')),
    h('code', null, key),
    h('button', { class: 'btn btn-small', type: 'button', onclick: () => void navigator.clipboard?.writeText(key) }, 'Copy'));
}

export const tenantPage: Page = async (main, ctx) => {
  const id = ctx.route.path[1];
  const t = await api<Tenant>(`/tenants/${id}`);
  main.append(h('div', { class: 'page-head' }, h('h1', null, t.name, ' ', h('small', null, t.model ?? ''))));
  const slaBox = h('div'), histBox = h('div'), statsBox = h('div');
  main.append(section('Current SLA', slaBox), section('SLA history', histBox), section('Statistics', statsBox));
  const mine = session.me?.role === 'tenant' && String(session.me.tenant_id) === String(id);

  const loadSla = async () => {
    const [sla, hist] = await Promise.all([
      api<Sla>(`/tenants/${id}/sla`),
      api<Sla[] | ApiPage<Sla>>(`/tenants/${id}/sla/history`).then(items),
    ]);
    clear(slaBox);
    slaBox.append(h('div', { class: 'cards' },
      h('div', { class: 'card' }, h('div', { class: 'card-label' }, 'TTFT target'), h('div', { class: 'card-value', 'data-testid': 'sla-ttft' }, ms(sla.ttft_ms)),
        sla.ttft_ms_per_1k ? h('div', { class: 'card-hint' }, `+ ${ms(sla.ttft_ms_per_1k)} per 1k prompt tokens`) : null),
      h('div', { class: 'card' }, h('div', { class: 'card-label' }, 'TPOT target'), h('div', { class: 'card-value', 'data-testid': 'sla-tpot' }, ms(sla.tpot_ms))),
      h('div', { class: 'card' }, h('div', { class: 'card-label' }, 'Version'), h('div', { class: 'card-value' }, String(sla.version ?? '–')),
        h('div', { class: 'card-hint' }, `${sla.changed_by ?? ''} ${when(sla.changed_at)}`))),
    ...((mine || can('tenants.create')) && can('sla.edit') ? [slaForm(id, sla, () => void loadSla())] : []));
    clear(histBox);
    const sorted = [...hist].sort((a, b) => (a.version ?? 0) - (b.version ?? 0));
    if (sorted.length > 1) histBox.append(lineChart([
      { name: 'TTFT target (ms)', color: '#4e79a7', x: sorted.map((s, i) => s.version ?? i + 1), y: sorted.map((s) => s.ttft_ms), points: true },
      { name: 'TPOT target (ms)', color: '#f28e2b', x: sorted.map((s, i) => s.version ?? i + 1), y: sorted.map((s) => s.tpot_ms), points: true },
    ], { xLabel: 'SLA version', yLabel: 'target (ms)', height: 200 }));
    histBox.append(table(['Version', 'TTFT target', 'TPOT target', 'Changed by', 'When'], [...sorted].reverse().map((s) => [
      String(s.version ?? ''), ms(s.ttft_ms), ms(s.tpot_ms), s.changed_by ?? '–', when(s.changed_at)]), 'sla-history'));
  };
  await loadSla().catch((e) => slaBox.append(errorBox(e)));
  await api<Record<string, unknown>>(`/tenants/${id}/stats`).then((s) => statsBox.append(statsView(s)))
    .catch((e) => statsBox.append(errorBox(e)));
};

function slaForm(id: string, sla: Sla, saved: () => void): HTMLElement {
  const ttft = h('input', { type: 'number', name: 'ttft_ms', min: '1', max: '600000', step: 'any', value: String(sla.ttft_ms), required: true });
  const tpot = h('input', { type: 'number', name: 'tpot_ms', min: '1', max: '60000', step: 'any', value: String(sla.tpot_ms), required: true });
  const msg = h('p', { class: 'form-error', role: 'alert' });
  return h('form', { class: 'inline-form', 'data-testid': 'sla-form', onsubmit: async (e: Event) => {
    e.preventDefault();
    try {
      await api(`/tenants/${id}/sla`, { method: 'PUT', body: JSON.stringify({ ...pickSla(sla), ttft_ms: Number(ttft.value), tpot_ms: Number(tpot.value) }) });
      saved();
    } catch (err) {
      msg.textContent = err instanceof ApiError ? `${err.title}${err.field ? ` (${err.field})` : ''}: ${err.detail}` : String(err);
    }
  } }, h('label', null, 'TTFT target (ms)', ttft), h('label', null, 'TPOT target (ms)', tpot),
  h('button', { class: 'btn btn-primary', type: 'submit' }, 'Save new version'), msg);
}

const pickSla = (s: Sla) => (s.ttft_ms_per_1k !== undefined ? { ttft_ms_per_1k: s.ttft_ms_per_1k } : {});

/** Statistics are shown as cards by key, whatever the server adds later. */
function statsView(s: Record<string, unknown>): HTMLElement {
  const fmt = (k: string, v: unknown): string => {
    if (typeof v !== 'number') return String(v ?? '–');
    if (k.endsWith('_ms')) return ms(v);
    if (k.endsWith('tokens_per_s')) return tokPerS(v);
    if (k.endsWith('rate') || k.endsWith('fraction')) return pct(v);
    return num(v);
  };
  const entries = Object.entries(s).filter(([, v]) => typeof v !== 'object' || v === null);
  if (!entries.length) return empty('No statistics yet', 'No stored run includes this tenant.');
  return h('div', { class: 'cards', 'data-testid': 'tenant-stats' }, entries.map(([k, v]) =>
    h('div', { class: 'card' }, h('div', { class: 'card-label' }, k.replace(/_/g, ' ')), h('div', { class: 'card-value' }, fmt(k, v)))));
}
