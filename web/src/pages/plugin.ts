// One plugin (#/plugins/{id}): what it is, its state, trial replays of exactly this
// component (admins may start one even while it is inactive), and Activate / Disable.

import { api, ApiError, qs } from '../api';
import { clear, h } from '../dom';
import { bytes, pct, shortId, tokPerS, when } from '../format';
import { can } from '../session';
import type { Page as ApiPage, Plugin, Run, Scenario, Summary } from '../types';
import { badge, empty, errorBox, link, loading, progressBar, section, table } from '../ui';
import type { Page } from './page';
import { action } from './plugins';
import { plugins } from './policies';
import { compareHref } from './selection';

export const pluginPage: Page = async (main, ctx) => {
  const id = ctx.route.path[1];
  let timer = 0;
  ctx.onLeave(() => clearTimeout(timer));
  const head = h('div');
  const trials = h('div', null, loading('Loading trial replays…'));
  main.append(head);
  const pinned = `plugin:${id}`;

  const reload = () => show().then(() => undefined);
  const show = async (): Promise<Plugin> => {
    const p = await api<Plugin>(`/plugins/${id}`);
    void plugins(true).catch(() => undefined); // the form's policy list may have changed
    clear(head);
    head.append(h('div', { class: 'page-head' },
      h('div', null, h('h1', null, `${p.name} `, h('small', null, `${p.version} · interface ${p.interface_version ?? '?'}`)),
        h('div', { class: 'meta' }, h('span', { class: `badge badge-${p.state}`, 'data-state': p.state }, p.state),
          p.builtin ? ' built into the binary' : ` uploaded by ${p.uploaded_by ?? '?'} ${when(p.created_at)}`)),
      h('a', { class: 'btn', href: '#/plugins' }, '← Plugins')),
    section('Component', table(['Name', 'Version', 'Interface', 'Size', 'SHA-256'], [[p.name, p.version,
      p.interface_version ?? '–', p.size_bytes ? bytes(p.size_bytes) : '–', h('code', { class: 'hash' }, p.sha256_hex ?? '–')]])),
    section('State',
      h('p', null, p.state === 'inactive' ? 'Validated and stored, but no run can name it until an admin activates it.'
        : p.state === 'active' ? 'Active: runs may name it, and the new-run form offers it.'
          : p.state === 'quarantined' ? 'Quarantined: the sandbox stopped it during a run (the audit log says why). Runs fall back to a safe built-in.'
            : 'Disabled: no run can name it.'),
      can('plugins.manage') ? h('div', { class: 'actions' },
        p.state !== 'active' ? action(p, 'activate', 'Activate', reload) : null,
        p.state === 'active' ? action(p, 'disable', 'Disable', reload) : null) : null));
    return p;
  };
  const p = await show();
  main.append(section('Trial replays', h('p', { class: 'hint' },
    `A trial replays a scenario under exactly this component (runs with policy ${pinned}), whatever its state, so you can see how it behaves before activating it.`),
  can('plugins.manage') && !p.builtin ? trialForm(id, () => void loadTrials()) : null, trials));

  async function loadTrials(): Promise<void> {
    clearTimeout(timer);
    let page: ApiPage<Run>;
    try {
      page = await api<ApiPage<Run>>(`/runs${qs({ policy: pinned, limit: 50 })}`);
    } catch (e) {
      trials.replaceChildren(errorBox(e, () => void loadTrials()));
      return;
    }
    if (!page.items.length) {
      trials.replaceChildren(empty('No trial yet', p.builtin ? 'A built-in policy is replayed by name from the runs page.' : 'Start one above.'));
      return;
    }
    const done = page.items.filter((r) => r.status === 'succeeded').map((r) => String(r.id));
    trials.replaceChildren(...([h('div', { class: 'table-scroll' }, table(['Run', 'Scenario', 'Status', 'Progress', 'Violations', 'Output', 'Created', ''],
      page.items.map((r) => {
        const s = r.summary as Summary | null;
        return [link(`#/runs/${r.id}`, shortId(r.id)), r.scenario, badge(r.status), progressBar(r.progress, r.status, r.kind),
          s ? pct(s.violation_rate) : '–', s ? tokPerS(s.output_tokens_per_s) : '–', when(r.created_at),
          r.status === 'succeeded' ? link(`#/runs?scenario=${encodeURIComponent(r.scenario)}&kind=replay`, 'compare with others') : ''];
      }), 'trials')),
    done.length >= 2 ? h('p', null, link(compareHref(done.slice(0, 6)), 'Compare these trials side by side')) : null] as (HTMLElement | null)[]).filter((x): x is HTMLElement => !!x));
    trials.querySelector('table')?.setAttribute('data-testid', 'trial-runs');
    if (page.items.some((r) => r.status === 'queued' || r.status === 'running')) {
      timer = window.setTimeout(() => void loadTrials(), 2000);
    } else if (page.items.length) {
      void show().catch(() => undefined); // a trial can have quarantined it
    }
  }
  void loadTrials();
};

function trialForm(id: string, started: () => void): HTMLElement {
  const scenario = h('select', { name: 'scenario', required: true, 'aria-label': 'Scenario' });
  const rate = h('input', { type: 'number', name: 'rate_scale', min: '0.05', max: '64', step: '0.05', placeholder: '1', 'aria-label': 'Rate scale' });
  const msg = h('p', { class: 'form-error', role: 'alert' });
  void api<Scenario[] | { items: Scenario[] }>('/scenarios').then((list) => {
    for (const s of Array.isArray(list) ? list : list.items) {
      const name = typeof s === 'string' ? s : s.name;
      scenario.append(h('option', { value: name, selected: name === 'smoke' }, name));
    }
  }).catch((e) => { msg.textContent = `Could not list scenarios: ${e instanceof ApiError ? e.title : e}`; });
  return h('form', { class: 'inline-form', 'data-testid': 'trial-form', onsubmit: async (e: Event) => {
    e.preventDefault();
    const body: Record<string, unknown> = { scenario: scenario.value };
    if (rate.value) body.rate_scale = Number(rate.value);
    try {
      await api(`/plugins/${id}/trial`, { method: 'POST', body: JSON.stringify(body) });
      msg.textContent = '';
      started();
    } catch (err) {
      msg.textContent = err instanceof ApiError ? `${err.title}${err.field ? ` (${err.field})` : ''}: ${err.detail}` : String(err);
    }
  } }, h('label', null, 'Scenario', scenario), h('label', null, 'Rate scale', rate),
  h('button', { class: 'btn btn-primary', type: 'submit' }, 'Start a trial replay'), msg);
}
