import { api, ApiError } from '../api';
import { attainmentChart } from '../charts/attainment';
import { lineChart } from '../charts/line';
import { clear, h } from '../dom';
import { ms, num, pct, shortId, tokPerS, when } from '../format';
import { go } from '../router';
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
      ? table(['Tenant', 'TTFT target', 'TPOT target', 'SLA version', 'Created', ''], ts.map((t) => [
        link(`#/tenants/${t.id}`, t.name), t.sla ? slaTtft(t.sla) : '–', t.sla ? ms(t.sla.tpot_ms) : '–',
        String(t.sla?.version ?? '–'), when(t.created_at), link(`#/tenants/${t.id}`, 'SLA and statistics')]), 'tenant-list')
      : empty('No tenants yet', can('tenants.create') ? 'Create the first tenant with “New tenant”.' : 'An admin has not created any tenant.'));
  }
  await load();
};

function createTenant(done: () => void): HTMLElement {
  const d = h('details', { class: 'new-run' });
  const name = h('input', { name: 'name', required: true, pattern: '[a-z0-9][a-z0-9-]{0,62}', placeholder: 'acme-chat' });
  const ttft = h('input', { name: 'ttft_ms', type: 'number', min: '0.001', max: '600000', step: 'any', value: '1000', required: true });
  const per1k = h('input', { name: 'ttft_ms_per_1k', type: 'number', min: '0', max: '600000', step: 'any', value: '0' });
  const tpot = h('input', { name: 'tpot_ms', type: 'number', min: '0.001', max: '10000', step: 'any', value: '100', required: true });
  const out = h('div', { role: 'status' });
  d.append(h('summary', { class: 'btn btn-primary' }, 'New tenant'), h('form', { onsubmit: async (e: Event) => {
    e.preventDefault();
    const body = { name: name.value.trim(),
      sla: { ttft_ms: Number(ttft.value), ttft_ms_per_1k: Number(per1k.value || 0), tpot_ms: Number(tpot.value) } };
    try {
      const r = await api<{ api_key?: string; key?: string }>('/tenants', { method: 'POST', body: JSON.stringify(body) });
      out.replaceChildren(keyOnce(r.api_key ?? r.key ?? ''));
      done();
    } catch (err) {
      out.replaceChildren(h('p', { class: 'form-error' }, err instanceof ApiError ? `${err.title}: ${err.detail}` : String(err)));
    }
  } }, h('label', null, 'Name', name), h('label', null, 'TTFT target (ms)', ttft),
  h('label', null, 'TTFT extra per 1k prompt tokens (ms)', per1k), h('label', null, 'TPOT target (ms)', tpot),
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
  main.append(h('div', { class: 'page-head' }, h('h1', null, t.name, ' ', h('small', null, t.model ?? '')),
    can('tenants.remove') ? removeButton(t) : null));
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
    ...((mine || session.me?.role === 'admin') && can('sla.edit') ? [slaForm(id, sla, () => void loadSla())] : []));
    clear(histBox);
    const sorted = [...hist].sort((a, b) => (a.version ?? 0) - (b.version ?? 0));
    if (sorted.length > 1) histBox.append(lineChart([
      { name: 'TTFT target (ms)', color: '#4e79a7', x: sorted.map((s, i) => s.version ?? i + 1), y: sorted.map((s) => s.ttft_ms), points: true },
      { name: 'TPOT target (ms)', color: '#f28e2b', x: sorted.map((s, i) => s.version ?? i + 1), y: sorted.map((s) => s.tpot_ms), points: true },
    ], { xLabel: 'SLA version', yLabel: 'target (ms)', height: 200, xInt: true }));
    histBox.append(table(['Version', 'TTFT target', 'TPOT target', 'Changed by', 'When'], [...sorted].reverse().map((s) => [
      String(s.version ?? ''), slaTtft(s), ms(s.tpot_ms), s.changed_by ?? '–', when(s.changed_at)]), 'sla-history'));
  };
  await loadSla().catch((e) => slaBox.append(errorBox(e)));
  await api<StatsAnswer>(`/tenants/${id}/stats`).then((s) => statsBox.append(statsView(s)))
    .catch((e) => statsBox.append(errorBox(e)));
};

/** Admins remove a tenant: kept for the record, its keys revoked, its pages gone. */
function removeButton(t: Tenant): HTMLElement {
  const msg = h('span', { class: 'form-error', role: 'alert' });
  return h('div', null, h('button', { class: 'btn btn-danger', 'data-action': 'remove-tenant', onclick: async (e: Event) => {
    const b = e.currentTarget as HTMLButtonElement;
    if (!window.confirm(`Remove tenant “${t.name}”? Its keys are revoked at once; its SLA history and the runs that replayed it are kept.`)) return;
    b.disabled = true;
    try {
      await api(`/tenants/${t.id}`, { method: 'DELETE' });
      go('/tenants');
    } catch (err) {
      b.disabled = false;
      msg.textContent = err instanceof ApiError ? `${err.title}: ${err.detail}` : String(err);
    }
  } }, 'Remove tenant'), msg);
}

function slaForm(id: string, sla: Sla, saved: () => void): HTMLElement {
  const ttft = h('input', { type: 'number', name: 'ttft_ms', min: '0.001', max: '600000', step: 'any', value: String(sla.ttft_ms), required: true });
  const per1k = h('input', { type: 'number', name: 'ttft_ms_per_1k', min: '0', max: '600000', step: 'any', value: String(sla.ttft_ms_per_1k ?? 0) });
  const tpot = h('input', { type: 'number', name: 'tpot_ms', min: '0.001', max: '10000', step: 'any', value: String(sla.tpot_ms), required: true });
  const msg = h('p', { class: 'form-error', role: 'alert' });
  return h('form', { class: 'inline-form', 'data-testid': 'sla-form', onsubmit: async (e: Event) => {
    e.preventDefault();
    try {
      await api(`/tenants/${id}/sla`, { method: 'PUT', body: JSON.stringify({ ttft_ms: Number(ttft.value),
        ttft_ms_per_1k: Number(per1k.value || 0), tpot_ms: Number(tpot.value) }) });
      saved();
    } catch (err) {
      msg.textContent = err instanceof ApiError ? `${err.title}${err.field ? ` (${err.field})` : ''}: ${err.detail}` : String(err);
    }
  } }, h('label', null, 'TTFT target (ms)', ttft), h('label', null, '+ per 1k prompt tokens (ms)', per1k),
  h('label', null, 'TPOT target (ms)', tpot), h('button', { class: 'btn btn-primary', type: 'submit' }, 'Save new version'), msg);
}

function slaTtft(s: Sla): string {
  return s.ttft_ms_per_1k ? `${ms(s.ttft_ms)} + ${ms(s.ttft_ms_per_1k)}/1k` : ms(s.ttft_ms);
}

interface RunStats { run_id: string; scenario: string; policies: string[]; rate_scale?: number | null;
  started_at?: string | null; finished_at: string | null; scenario_tenant?: string; matched_by?: string;
  sla_version?: number; sla_ttft_ms?: number; sla_ttft_ms_per_1k?: number; sla_tpot_ms?: number;
  attainment?: number; fallback?: boolean; stats: Record<string, number> }
interface StatsAnswer { runs?: RunStats[]; sla_versions?: Sla[] }

/** The tenant's figures in each replay attributed to it, newest first, and its
 * attainment over time with the SLA versions marked. */
function statsView(s: StatsAnswer): HTMLElement {
  const runs = s.runs ?? [];
  if (!runs.length) return empty('No statistics yet', 'No finished replay is attributed to this tenant yet (a run is when its request names the tenant, or when a scenario tenant has its name at the run’s start).');
  const n = (r: RunStats, k: string) => r.stats?.[k];
  const points = runs.filter((r) => r.started_at || r.finished_at).map((r) => ({
    at: Date.parse((r.started_at ?? r.finished_at) as string), attainment: r.attainment ?? 1 - (n(r, 'violation_rate') ?? 0),
    version: r.sla_version ?? 1, label: `${shortId(r.run_id)} ${r.scenario} · ${r.policies.join(', ')}`,
  }));
  const marks = (s.sla_versions ?? []).filter((v) => v.changed_at).map((v) => ({ at: Date.parse(v.changed_at as string), version: v.version ?? 1 }));
  return h('div', { 'data-testid': 'tenant-stats' },
    h('h3', null, 'SLA attainment over time'), attainmentChart(points, marks),
    table(
      ['Run', 'Scenario', 'Policy', 'Rate', 'Started', 'SLA version', 'Within SLA', 'Requests', 'TTFT p50 / p99', 'TPOT p50 / p99', 'Output'],
      runs.map((r) => [
        can('runs.read') ? link(`#/runs/${r.run_id}`, shortId(r.run_id)) : shortId(r.run_id), r.scenario,
        `${r.policies.join(', ')}${r.fallback ? ' (fallback)' : ''}`, `${r.rate_scale ?? 1}×`,
        when(r.started_at ?? r.finished_at),
        h('span', { 'data-sla-version': r.sla_version ?? '', title: r.matched_by === 'request' ? 'named in the run request' : 'matched by name' },
          `v${r.sla_version ?? '?'}: TTFT ${ms(r.sla_ttft_ms)}, TPOT ${ms(r.sla_tpot_ms)}`),
        h('span', { 'data-attainment': (r.attainment ?? 0).toFixed(4) }, pct(r.attainment)), num(n(r, 'requests')),
        `${ms(n(r, 'ttft_p50_ms'))} / ${ms(n(r, 'ttft_p99_ms'))}`, `${ms(n(r, 'tpot_p50_ms'))} / ${ms(n(r, 'tpot_p99_ms'))}`,
        tokPerS(n(r, 'output_tokens_per_s')),
      ]), 'tenant-runs'));
}
