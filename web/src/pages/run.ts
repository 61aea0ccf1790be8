import { api } from '../api';
import { clear, h } from '../dom';
import { ms, num, pct, tokPerS, when, shortId } from '../format';
import { fallbackText, runLabel } from '../run-label';
import { FALLBACK_BADGE, WARN_BOX } from '../truth-style';
import { go } from '../router';
import type { Run, RunLatency, Series, Summary } from '../types';
import { badge, card, errorBox, link, loading, progressBar, section, table } from '../ui';
import { distributions, gpuPanel, seriesCharts, targetClass, tenantTable } from './run-parts';
import { exportPanel } from './export';
import { requestsTable, schedulingPanel } from './requests';
import type { Page } from './page';

/** How often a queued or running run is fetched again. */
const POLL_MS = 2000;

export const runPage: Page = async (main, ctx) => {
  const id = ctx.route.path[1];
  let timer = 0;
  ctx.onLeave(() => clearTimeout(timer));
  const head = h('div');
  const body = h('div');
  main.append(head, body);

  let rendered = false;
  let liveBox: HTMLElement | null = null;
  const load = async (): Promise<void> => {
    const run = await api<Run>(`/runs/${id}`);
    if (run.kind === 'sweep' && run.status === 'succeeded') return go(`/compare?run=${id}`);
    clear(head);
    head.append(header(run));
    const pending = run.status === 'queued' || run.status === 'running';
    if (pending) timer = window.setTimeout(() => void load().catch(() => undefined), POLL_MS);
    // Traffic served live is stored as it ends: its figures refresh at every poll.
    if (run.kind === 'live' && run.status === 'running') {
      if (!liveBox) {
        liveBox = h('div', { 'data-testid': 'live-figures' }, loading('Waiting for the first requests to end…'));
        body.replaceChildren(h('p', { class: 'hint', 'data-testid': 'live-note' },
          `Served live: the figures below cover the requests that ended and refresh every ${POLL_MS / 1000} s.`), liveBox);
      }
      if (run.summary) await liveFigures(liveBox, run, run.summary as Summary).catch((e) => liveBox?.replaceChildren(errorBox(e)));
      return;
    }
    if (pending) return;
    if (rendered) return;
    rendered = true;
    clear(body);
    if (run.status !== 'succeeded' || !run.summary) {
      body.append(h('div', { class: 'state state-error', role: 'alert' },
        h('h3', null, `This run ${run.status === 'failed' ? 'failed' : `was ${run.status}`}`),
        h('p', null, run.error ?? 'It stored no results: runs are stored whole or not at all.')));
      return;
    }
    await details(body, run, run.summary as Summary);
  };
  await load();
};

function header(run: Run): HTMLElement {
  const s = run.summary as Summary | null;
  const fb = fallbackText(run);
  return h('div', { class: 'page-head' },
    h('div', null,
      h('h1', null, `Run ${shortId(run.id)} `, h('small', { 'data-testid': 'run-label' }, `${run.kind} · ${runLabel(run)}`)),
      fb ? h('div', { class: 'state state-warn', style: WARN_BOX, role: 'note', 'data-testid': 'fallback-note' },
        h('b', null, 'Succeeded with fallback. '), `${fb}. Its figures are partly the fallback’s, not the plugin’s.`) : null,
      h('div', { class: 'meta' }, run.fallback ? fallbackBadge() : badge(run.status),
        run.kind === 'live' ? h('span', { class: 'badge badge-live', 'data-testid': 'live-badge' }, 'live') : null,
        ' created ', when(run.created_at),
        run.finished_at ? ` · finished ${when(run.finished_at)}` : '',
        s && run.kind === 'live'
          ? h('span', { 'data-testid': 'live-served' }, ` · served ${num(s.duration_s)} s, ${num(s.requests)} requests ended`)
          : s ? ` · simulated ${num(s.duration_s)} s, ${num(s.requests)} requests` : '')),
    (run.status === 'queued' || run.status === 'running') && run.kind !== 'live'
      ? progressBar(run.progress, run.status, run.kind) : null,
    // A live run samples its operators while it serves: its timeline fills as it runs.
    (run.status === 'succeeded' && run.kind === 'replay') || run.kind === 'live'
      ? h('a', { class: 'btn btn-primary', href: `#/runs/${run.id}/timeline` }, 'Open timeline') : null);
}

/** The status of a run whose plugin failed: succeeded, but not by its policy alone. */
export function fallbackBadge(): HTMLElement {
  return h('span', { class: 'badge badge-fallback', style: FALLBACK_BADGE, 'data-status': 'succeeded_with_fallback' }, 'succeeded with fallback');
}

/** Every parameter the run ran with, as stored. */
export function paramsPanel(run: Run): HTMLElement {
  const p = run.params;
  if (!p) return h('p', { class: 'hint', 'data-testid': 'run-params' }, 'This run was stored before runs recorded their parameters.');
  const row = (k: string, v: string | HTMLElement) => [k, v];
  const rows: (string | HTMLElement)[][] = [
    row('Scenario', p.scenario), row('Scenario SHA-256', h('code', null, p.scenario_sha256)),
    row('Seed', p.draw ? `${p.seed}, draw ${p.draw} (seed + ${p.draw}·0x9E3779B97F4A7C15 mod 2⁶³)` : String(p.seed)),
    ...(p.inputs ?? []).map((f) => row(`File ${f.path}`, h('span', null, `${f.role} · ${num(f.bytes)} bytes · SHA-256 `,
      h('code', { title: f.sha256 }, f.sha256.slice(0, 16))))),
    ...(run.kind === 'replay' ? [row('Rate scale', `${p.rate_scale ?? 1}×`)] : []),
    ...(p.violation_targets ? [row('Violation targets', p.violation_targets.map((t) => pct(t)).join(', '))] : []),
    // The draws' own seeds are past what a JS number holds exactly: the count, and how
    // they are drawn, rather than digits that would be wrong.
    ...(run.kind === 'sweep' && (p.seeds ?? 1) > 1
      ? [row('Draws per point', `${p.seeds}: seed ${p.seed}, then seed + k·0x9E3779B97F4A7C15 mod 2⁶³; a point counts all their requests`)] : []),
    ...p.policies.map((x) => row(`Policy ${x.name}`, h('span', null, `${x.name} ${x.version} · ${x.kind} · interface ${x.interface_version} · `, h('code', { title: x.sha256 }, x.sha256.slice(0, 16))))),
    ...p.tenants.map((t) => row(`SLA of ${t.scenario_tenant}`, h('span', null, link(`#/tenants/${t.tenant_id}`, t.tenant),
      ` v${t.sla_version} (${t.matched_by === 'request' ? 'named in the request' : 'matched by name'}): TTFT ${ms(t.ttft_ms)}${t.ttft_ms_per_1k ? ` + ${ms(t.ttft_ms_per_1k)}/1k` : ''}, TPOT ${ms(t.tpot_ms)}; the scenario file said TTFT ${ms(t.scenario_sla.ttft_ms)}, TPOT ${ms(t.scenario_sla.tpot_ms)}`))),
    ...Object.entries(p.core).map(([k, v]) => row(k.replace(/_/g, ' '), String(v))),
  ];
  if (!p.tenants.length) rows.push(row('SLAs', 'from the scenario file (no scenario tenant is a registered tenant)'));
  return h('div', { 'data-testid': 'run-params' }, table(['Parameter', 'Value'], rows, 'params'));
}

/** A live run's figures so far, swapped in whole once the series and histograms arrived. */
async function liveFigures(box: HTMLElement, run: Run, s: Summary): Promise<void> {
  const [series, lat] = await Promise.all([api<Series>(`/runs/${run.id}/series`), api<RunLatency>(`/runs/${run.id}/latency`)]);
  box.replaceChildren(cards(run, s),
    section('Over time', h('div', { class: 'grid2' }, ...seriesCharts(series, { targets: null, live: true }))),
    section('Latency distributions', h('div', { class: 'grid2' }, ...distributions(lat))),
    section('Tenants against their SLA', tenantTable(s, null)),
    section('GPUs: busy fraction and idle gaps', gpuPanel(s)));
}

function cards(run: Run, s: Summary): HTMLElement {
  const dur = s.duration_s || 1;
  // Violation targets are the run's own (a sweep's); a replay without any is not judged.
  const targets = run.violation_targets ?? null;
  const metOk = s.completed * (1 - s.violation_rate);
  return h('div', { class: 'cards', 'data-testid': 'summary-cards' },
    card('Output throughput', tokPerS(s.output_tokens_per_s), 'generated tokens', '', s.output_tokens_per_s),
    card('Prompt throughput', tokPerS(s.prompt_tokens_per_s), 'prefilled tokens', '', s.prompt_tokens_per_s),
    card('Goodput', `${num(metOk / dur)} req/s`, `requests within SLA per second: ${num(Math.round(metOk))} of ${num(s.requests)}`),
    card('SLA violation rate', pct(s.violation_rate), targets?.length
      ? `TTFT or mean TPOT over target; run’s targets ${targets.map((t) => pct(t, 0)).join(', ')}`
      : 'TTFT or mean TPOT over target', { over: 'bad', ok: 'good', '': '' }[targetClass(s.violation_rate, targets)], s.violation_rate),
    card('TTFT p50 / p99', `${ms(s.ttft_p50_ms)} / ${ms(s.ttft_p99_ms)}`),
    card('TPOT p50 / p99', `${ms(s.tpot_p50_ms)} / ${ms(s.tpot_p99_ms)}`),
    card('OOM events', String(s.oom_events), s.oom_events === 0 ? 'memory safety held' : 'must never happen', s.oom_events === 0 ? 'good' : 'bad', s.oom_events),
    card('GPU busy', pct(s.gpu_busy_fraction, 1), s.scheduling ? `${num(s.scheduling.borrowed_ops)} ops borrowed idle slices` : undefined));
}

async function details(body: HTMLElement, run: Run, s: Summary): Promise<void> {
  const targets = run.violation_targets ?? null;
  body.append(cards(run, s));

  const seriesBox = h('div', { class: 'grid2' }, loading('Loading the time series…'));
  const distBox = h('div', { class: 'grid2' }, loading('Loading the latency histograms…'));
  body.append(
    section('Over time', seriesBox),
    section('Latency distributions', distBox),
    section('Tenants against their SLA', tenantTable(s, targets)),
    section('GPUs: busy fraction and idle gaps', gpuPanel(s)),
    section('Requests', requestsTable(run, s)),
    section('Scheduling', schedulingPanel(run, s)),
    section('How this run ran', paramsPanel(run)),
    section('Export', exportPanel(run)));

  // The two slower fetches fill their panels as they arrive; a failure stays local.
  void api<Series>(`/runs/${run.id}/series`)
    .then((series) => seriesBox.replaceChildren(...seriesCharts(series, { targets, live: run.kind === 'live' })))
    .catch((e) => seriesBox.replaceChildren(errorBox(e)));
  // Histograms of every request of the run, computed by the service in SQL.
  void api<RunLatency>(`/runs/${run.id}/latency`)
    .then((l) => distBox.replaceChildren(...distributions(l)))
    .catch((e) => distBox.replaceChildren(errorBox(e)));
}
