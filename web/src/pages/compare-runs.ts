// Replays of one scenario side by side (#/compare?runs=a,b,c&base=a): summary figures
// with ratios to a baseline run, the over-time charts overlaid on one time axis, and the
// per-tenant SLA figures of every run.

import { api } from '../api';
import { lineChart, type LineSeries } from '../charts/line';
import { download, toCsv } from '../charts/tools';
import { h } from '../dom';
import { ms, num, pct, ratio, shortId, tokPerS } from '../format';
import { tenantColor } from '../palette';
import { go } from '../router';
import type { Run, Series, Summary } from '../types';
import { badge, errorBox, link, loading, section } from '../ui';
import { seriesLength, timeAxisLabel, windows } from './run-parts';

type Metric = { label: string; get: (s: Summary) => number | null | undefined; show: (v: number | null | undefined) => string;
  /** Whether more is better, for the ratio's colour; null: neither. */
  more: boolean | null };

/** Goodput on this page: requests that met their SLA per simulated second. */
const goodput = (s: Summary) => (s.completed * (1 - s.violation_rate)) / (s.duration_s || 1);

const METRICS: Metric[] = [
  { label: 'Output tokens/s', get: (s) => s.output_tokens_per_s, show: tokPerS, more: true },
  { label: 'Prompt tokens/s', get: (s) => s.prompt_tokens_per_s, show: tokPerS, more: true },
  { label: 'Goodput (requests within SLA /s)', get: goodput, show: (v) => `${num(v)} req/s`, more: true },
  { label: 'SLA violation rate', get: (s) => s.violation_rate, show: (v) => pct(v), more: false },
  { label: 'TTFT p50', get: (s) => s.ttft_p50_ms, show: (v) => ms(v), more: false },
  { label: 'TTFT p99', get: (s) => s.ttft_p99_ms, show: (v) => ms(v), more: false },
  { label: 'TPOT p50', get: (s) => s.tpot_p50_ms, show: (v) => ms(v), more: false },
  { label: 'TPOT p99', get: (s) => s.tpot_p99_ms, show: (v) => ms(v), more: false },
  { label: 'GPU busy', get: (s) => s.gpu_busy_fraction, show: (v) => pct(v), more: null },
  { label: 'Borrowed ops', get: (s) => s.scheduling?.borrowed_ops ?? null, show: num, more: null },
  { label: 'Requests', get: (s) => s.requests, show: num, more: null },
  { label: 'Completed', get: (s) => s.completed, show: num, more: true },
  { label: 'OOM events', get: (s) => s.oom_events, show: num, more: false },
];

/** A run's label: id, policy and, when the API says, its rate scale. */
function label(r: Run): string {
  const scale = (r as Run & { rate_scale?: number | null }).rate_scale;
  return `${shortId(r.id)} ${(r.policies ?? []).join(', ')}${scale && scale !== 1 ? ` ×${scale}` : ''}`;
}

export async function compareRuns(main: HTMLElement, ids: string[], baseId: string | null): Promise<void> {
  const runs = await Promise.all(ids.map((id) => api<Run>(`/runs/${encodeURIComponent(id)}`)));
  const head = h('div', { class: 'page-head' }, h('div', null,
    h('h1', null, `Compare ${runs.length} replays `, h('small', null, runs[0]?.scenario ?? '')),
    h('p', { class: 'hint' }, 'Goodput on this page means requests that met their SLA per simulated second. Ratios are to the baseline run.')),
  h('a', { class: 'btn', href: '#/runs' }, '← Runs'));
  main.append(head);
  const bad = runs.find((r) => r.kind !== 'replay' || r.status !== 'succeeded' || !r.summary);
  const scenarios = [...new Set(runs.map((r) => r.scenario))];
  if (runs.length < 2 || bad || scenarios.length > 1) {
    main.append(h('div', { class: 'state state-error', role: 'alert', 'data-testid': 'compare-refused' },
      h('h3', null, 'These runs cannot be compared'),
      h('p', null, runs.length < 2 ? 'Compare needs two or more runs: select them in the runs list.'
        : bad ? `Run ${shortId(bad.id)} is a ${bad.kind} that is ${bad.status}: only finished replays compare side by side.`
          : `They replay different scenarios (${scenarios.join(', ')}): only runs of one scenario are comparable.`),
      bad ? badge(bad.status) : null));
    return;
  }
  const base = runs.find((r) => String(r.id) === baseId) ?? runs[0];
  const colour = (i: number) => tenantColor(i);
  const pick = h('select', { id: 'compare-base', 'aria-label': 'Baseline run', onchange: () => {
    go(`/compare?runs=${ids.join(',')}&base=${pick.value}`);
  } }, runs.map((r) => h('option', { value: String(r.id), selected: r === base }, label(r))));
  head.querySelector('div')!.append(h('label', { class: 'inline' }, 'Baseline: ', pick));

  // Summary figures, one column per run, each with its ratio to the baseline.
  const bs = base.summary as Summary;
  const headRow = ['Figure', ...runs.map(label)];
  const cells = METRICS.map((m) => [m.label, ...runs.map((r) => {
    const v = m.get(r.summary as Summary), b = m.get(bs);
    const q = r === base || v == null || b == null || b === 0 ? null : v / b;
    const better = q === null || m.more === null || q === 1 ? '' : (q > 1) === m.more ? 'ok' : 'over';
    return { text: m.show(v), ratio: q, cls: better, raw: v ?? null };
  })] as const);
  main.append(section('Summary', h('div', { class: 'table-scroll' }, h('table', { class: 'tbl compare-summary', 'data-testid': 'compare-summary' },
    h('thead', null, h('tr', null, headRow.map((c, i) => h('th', { scope: 'col' }, i ? h('span', { class: 'swatch-name' },
      h('i', { class: 'swatch', style: { background: colour(i - 1) } }), link(`#/runs/${runs[i - 1].id}`, c), runs[i - 1] === base ? ' (baseline)' : '') : c)))),
    h('tbody', null, cells.map(([name, ...vals]) => h('tr', { 'data-metric': name }, h('th', { scope: 'row' }, name),
      vals.map((v, i) => h('td', { class: 'num', 'data-run': String(runs[i].id), 'data-value': v.raw ?? '', 'data-ratio': v.ratio ?? '' },
        v.text, v.ratio !== null ? h('span', { class: `ratio ${v.cls}` }, ` ${ratio(v.ratio)}`) : null))))))),
  h('p', null, h('button', { type: 'button', class: 'btn btn-small', 'data-save': 'compare-csv', onclick: () => download(new Blob([toCsv(
    ['figure', ...runs.flatMap((r) => [`${label(r)} value`, `${label(r)} ratio to baseline`])],
    cells.map(([name, ...vals]) => [name, ...vals.flatMap((v) => [v.raw, v.ratio])]))], { type: 'text/csv' }), `compare-${runs[0].scenario}.csv`),
  }, 'Save this table as CSV')),
  runs.length === 2 ? h('p', null, link(`#/runs/${runs[0].id}/timeline?with=${runs[1].id}`, 'Open both timelines stacked on one time axis')) : null));

  // Over-time charts, overlaid on one axis: the same window size for every run.
  const charts = h('div', { class: 'grid2' }, loading('Loading the time series…'));
  main.append(section('Over time', charts));
  void Promise.all(runs.map((r) => api<Series>(`/runs/${r.id}/series`))).then((all) => {
    const maxN = Math.max(...all.map(seriesLength));
    const per = Math.max(1, Math.ceil(maxN / 300));
    const ws = all.map((s) => windows(s, 300, per));
    const end = Math.max(...ws.map((w) => w.end));
    const axis = { xLabel: timeAxisLabel(runs.map((r) => r.kind)), xMin: 0, xMax: end };
    const lines = (k: 'output' | 'prompt' | 'viol'): LineSeries[] => ws.map((w, i) => ({
      name: label(runs[i]), color: colour(i), x: w.x, y: w[k], dashed: runs[i] === base }));
    const suffix = per > 1 ? ` (${ws[0].windowS} s windows)` : '';
    const viol = lines('viol');
    const vmax = Math.max(0.1, ...viol.flatMap((l) => l.y.filter(Number.isFinite))) * 1.05;
    charts.replaceChildren(
      h('div', { class: 'span2', 'data-testid': 'compare-output' }, h('h3', null, `Output tokens/s${suffix}`),
        lineChart(lines('output'), { ...axis, yLabel: 'output tokens/s', name: 'compared output tokens per second', height: 200 })),
      h('div', { class: 'span2', 'data-testid': 'compare-prompt' }, h('h3', null, `Prompt tokens/s${suffix}`),
        lineChart(lines('prompt'), { ...axis, yLabel: 'prompt tokens/s', name: 'compared prompt tokens per second', height: 200 })),
      h('div', { class: 'span2', 'data-testid': 'compare-violations' }, h('h3', null, `SLA violation rate${suffix}`),
        lineChart(viol, { ...axis, yLabel: 'violation rate', yMax: vmax, name: 'compared violation rate',
          yFormat: (v) => `${+(v * 100).toFixed(1)}%` })),
      h('p', { class: 'hint span2' }, 'Dashed: the baseline run. One time axis for every run and chart; hover or focus a chart and use the arrow keys for the values.'));
  }).catch((e) => charts.replaceChildren(errorBox(e)));

  // Per tenant: each run's figures against the tenant's SLA (as each run judged it).
  const names = [...new Set(runs.flatMap((r) => (r.summary as Summary).tenants.map((t) => t.name)))];
  const cell = (r: Run, name: string) => (r.summary as Summary).tenants.find((t) => t.name === name);
  const over = (v: number | undefined, target: number | undefined) =>
    h('span', { class: v !== undefined && target ? (v > target ? 'over' : 'ok') : '' }, ms(v));
  main.append(section('Tenants against their SLA', h('div', { class: 'table-scroll' }, h('table', { class: 'tbl compare-tenants', 'data-testid': 'compare-tenants' },
    h('thead', null,
      h('tr', null, h('th', { scope: 'col', rowspan: 2 }, 'Tenant'), h('th', { scope: 'col', rowspan: 2 }, 'SLA (TTFT / TPOT)'),
        runs.map((r, i) => h('th', { scope: 'colgroup', colspan: 3, class: 'group' },
          h('span', { class: 'swatch-name' }, h('i', { class: 'swatch', style: { background: colour(i) } }), label(r))))),
      h('tr', null, runs.map(() => ['Violations', 'TTFT p99', 'TPOT p99'].map((c) => h('th', { scope: 'col' }, c))))),
    h('tbody', null, names.map((name) => {
      const ref = runs.map((r) => cell(r, name)).find(Boolean)!;
      return h('tr', { 'data-tenant': name }, h('th', { scope: 'row' }, name),
        h('td', null, `${ref.sla_ttft_ms_per_1k ? `${ms(ref.sla_ttft_ms)} + ${ms(ref.sla_ttft_ms_per_1k)}/1k` : ms(ref.sla_ttft_ms)} / ${ms(ref.sla_tpot_ms)}`),
        runs.map((r) => {
          const t = cell(r, name);
          if (!t) return [h('td', null, '–'), h('td', null, '–'), h('td', null, '–')];
          return [h('td', { class: 'num', 'data-run': String(r.id) }, pct(t.violation_rate)),
            h('td', { class: 'num' }, over(t.ttft_p99_ms, t.sla_ttft_ms_per_1k ? undefined : t.sla_ttft_ms)),
            h('td', { class: 'num' }, over(t.tpot_p99_ms, t.sla_tpot_ms))];
        }));
    }))))));
}
