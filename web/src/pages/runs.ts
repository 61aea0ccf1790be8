import { api, ApiError, qs, newestOnly } from '../api';
import { clear, h } from '../dom';
import { pct, shortId, tokPerS, wall, when } from '../format';
import { zone, zoneLabel } from '../prefs';
import { replaceQuery } from '../router';
import { can } from '../session';
import type { Page as ApiPage, Run, Summary } from '../types';
import { badge, empty, errorBox, link, loading, progressBar } from '../ui';
import { newRunForm } from './new-run';
import { drawLabel, fallbackText, rateLabel } from '../run-label';
import { FALLBACK_BADGE } from '../truth-style';
import type { Page } from './page';
import { allPolicyNames } from './policies';
import { selectionBar, selectBox } from './selection';
const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted'];
const LIVE_MS = 2000;

export const runsPage: Page = (main, ctx) => {
  const q = ctx.route.query;
  const f = {
    kind: q.get('kind') ?? '', policy: q.get('policy') ?? '', scenario: q.get('scenario') ?? '', status: q.get('status') ?? '',
    since: q.get('since') ?? '', until: q.get('until') ?? '',
  };
  // Cursors of the pages before this one, so "Previous" works with forward-only cursors.
  const cursors: (string | null)[] = [null];
  let timer = 0;
  ctx.onLeave(() => clearTimeout(timer));

  const select = (name: keyof typeof f, label: string, opts: string[]) =>
    h('label', null, label, h('select', { name, onchange: (e: Event) => set(name, (e.target as HTMLSelectElement).value) },
      h('option', { value: '' }, 'any'), opts.map((o) => h('option', { value: o, selected: f[name] === o }, o))));
  const dateInput = (name: 'since' | 'until', label: string) =>
    h('label', null, label, h('input', { type: 'date', name, value: f[name].slice(0, 10),
      onchange: (e: Event) => set(name, (e.target as HTMLInputElement).value) }));
  // Part of a name is enough (the API matches case-insensitively); typing filters as it goes.
  let typing = 0;
  ctx.onLeave(() => clearTimeout(typing));
  const scenarioInput = h('input', { name: 'scenario', value: f.scenario, placeholder: 'part of a name, e.g. azure',
    type: 'search', oninput: (e: Event) => {
      clearTimeout(typing);
      const v = (e.target as HTMLInputElement).value.trim();
      typing = window.setTimeout(() => { if (v !== f.scenario) set('scenario', v); }, 300);
    } });
  const policySelect = select('policy', 'Policy', f.policy ? [f.policy] : []);
  void allPolicyNames().then((names) => {
    const sel = policySelect.querySelector('select')!;
    for (const n of names) if (n !== f.policy) sel.append(h('option', { value: n }, n));
  }).catch(() => undefined);

  const body = h('div', { class: 'runs-body' }, loading('Loading runs…'));
  const bar = selectionBar();
  const pager = h('div', { class: 'pager' });
  main.append(
    h('div', { class: 'page-head' }, h('h1', null, 'Runs'),
      can('runs.start') ? newRunForm(() => load()) : null),
    h('form', { class: 'filters', 'aria-label': 'Filters', onsubmit: (e: Event) => e.preventDefault() },
      select('kind', 'Kind', ['replay', 'sweep']), policySelect,
      h('label', null, 'Scenario', scenarioInput),
      select('status', 'Status', STATUSES), dateInput('since', `From (${zoneLabel()})`), dateInput('until', `To (${zoneLabel()})`)),
    bar.el, body, pager);

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
    clearTimeout(timer);
    const utc = zone() === 'utc';
    const stale = begin();
    const cursor = cursors[cursors.length - 1];
    let page: ApiPage<Run>;
    try {
      page = await api<ApiPage<Run>>(`/runs${qs({
        kind: f.kind, policy: f.policy, scenario: f.scenario, status: f.status, limit: 25, cursor,
        // Days in the zone the user reads times in.
        since: f.since ? new Date(`${f.since}T00:00:00${utc ? 'Z' : ''}`).toISOString() : '',
        until: f.until ? new Date(`${f.until}T23:59:59.999${utc ? 'Z' : ''}`).toISOString() : '',
      })}`);
    } catch (e) {
      if (stale()) return;
      clear(body);
      clear(pager);
      body.append(errorBox(e, () => void load()));
      if (e instanceof ApiError && e.unreachable) timer = window.setTimeout(load, LIVE_MS * 3);
      return;
    }
    if (stale()) return;
    clear(body);
    if (!page.items.length) {
      body.append(empty('No runs match', Object.values(f).some(Boolean)
        ? 'No run matches these filters. Clear a filter to see more.'
        : can('runs.start') ? 'Start a replay or a sweep with “New run”.' : 'An admin has not started any run yet.'));
    } else {
      body.append(h('div', { class: 'table-scroll' }, runsTable(page.items, () => void load(), bar.changed)));
    }
    clear(pager);
    pager.append(
      h('button', { class: 'btn', disabled: cursors.length === 1, onclick: () => { cursors.pop(); void load(); } }, '← Newer'),
      h('span', { class: 'hint' }, `page ${cursors.length}`),
      h('button', { class: 'btn', disabled: !page.next_cursor, onclick: () => { cursors.push(page.next_cursor); void load(); } }, 'Older →'));
    // Poll only while something on this page can still change.
    if (page.items.some((r) => r.status === 'queued' || r.status === 'running')) {
      timer = window.setTimeout(load, LIVE_MS);
    }
  }
  void load();
};

/** Runs whose cancel was accepted: a replay stops at its next progress check, which can
 * take a while, so the row says so instead of offering Cancel again. */
const cancelling = new Set<string>();

function cancelButton(r: Run, reload: () => void): HTMLElement {
  const id = String(r.id);
  if (cancelling.has(id)) return h('span', { class: 'hint', 'data-cancelling': id }, 'cancelling…');
  return h('button', { class: 'btn btn-small btn-danger', 'aria-label': `Cancel run ${shortId(r.id)}`, onclick: async (e: Event) => {
    const b = e.currentTarget as HTMLButtonElement;
    b.disabled = true;
    try {
      await api(`/runs/${r.id}/cancel`, { method: 'POST' });
      cancelling.add(id);
    } catch (err) {
      b.disabled = false;
      b.title = err instanceof ApiError ? `${err.title}: ${err.detail}` : String(err);
      b.textContent = 'Cancel failed';
    }
    reload();
  } }, 'Cancel');
}

function runsTable(runs: Run[], reload: () => void, changed: () => void): HTMLElement {
  return h('table', { class: 'tbl runs', 'data-testid': 'runs-table' },
    h('thead', null, h('tr', null, ['Select', 'Run', 'Kind', 'Scenario', 'Policies', 'Rate', 'Status', 'Progress', 'Created', 'Took',
      'Violations', 'Output', ''].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', null, runs.map((r) => {
      const s = r.kind === 'replay' ? (r.summary as Summary | null) : null;
      const took = r.started_at && r.finished_at ? wall(Date.parse(r.finished_at) - Date.parse(r.started_at)) : '–';
      const draw = drawLabel(r);
      return h('tr', { 'data-run': r.id, 'data-kind': r.kind, class: `row-${r.status}` },
        h('td', null, selectBox(r, changed)),
        h('td', null, link(`#/runs/${r.id}`, shortId(r.id))),
        h('td', null, r.kind),
        h('td', null, r.scenario, draw ? h('small', { 'data-draw': draw }, ` · ${draw}`) : null),
        h('td', { title: (r.params?.policies ?? []).map((p) => `${p.name} ${p.version} (${p.kind}) sha256 ${p.sha256}`).join('\n') },
          (r.params?.policies?.length ? r.params.policies.map((p) => `${p.name} ${p.version}`) : (r.policies ?? [])).join(', ')),
        h('td', { class: 'num', 'data-rate': rateLabel(r) ?? '' }, rateLabel(r) ?? '–'),
        h('td', null, r.fallback
          ? h('span', { class: 'badge badge-fallback', style: FALLBACK_BADGE, 'data-status': 'succeeded_with_fallback', title: fallbackText(r) ?? '' }, 'succeeded with fallback')
          : badge(r.status),
        r.fallback ? h('div', { class: 'cell-error', 'data-testid': 'fallback-cell' }, fallbackText(r)) : null,
        r.error ? h('div', { class: 'cell-error', title: r.error }, r.error) : null),
        h('td', null, progressBar(r.progress, r.status, r.kind)),
        h('td', null, when(r.created_at)),
        h('td', null, took),
        h('td', { class: 'num' }, s ? pct(s.violation_rate) : '–'),
        h('td', { class: 'num' }, s ? tokPerS(s.output_tokens_per_s) : '–'),
        h('td', null,
          r.kind === 'sweep' && r.status === 'succeeded' ? link(`#/compare?run=${r.id}`, 'Compare') : null,
          r.kind === 'replay' && r.status === 'succeeded' ? link(`#/runs/${r.id}/timeline`, 'Timeline') : null,
          can('runs.cancel') && (r.status === 'queued' || r.status === 'running')
            ? cancelButton(r, reload) : null));
    })));
}
