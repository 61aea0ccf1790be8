import { api, qs } from '../api';
import { histogram } from '../charts/bars';
import { lineChart } from '../charts/line';
import { h } from '../dom';
import { ms, pct, ratio, tokPerS, shortId } from '../format';
import { policyColor } from '../palette';
import { go } from '../router';
import type { Page as ApiPage, Run, Summary, SweepReport } from '../types';
import { badge, empty, link, section, table } from '../ui';
import type { Page } from './page';
import { compareRuns } from './compare-runs';
import { exportPanel } from './export';
import { paramsPanel } from './run';
import { compareHref } from './selection';

export const comparePage: Page = async (main, ctx) => {
  const many = ctx.route.query.get('runs');
  if (many) return compareRuns(main, many.split(',').map((x) => x.trim()).filter(Boolean), ctx.route.query.get('base'));
  const id = ctx.route.query.get('run');
  const sweeps = await api<ApiPage<Run>>(`/runs${qs({ kind: 'sweep', status: 'succeeded', limit: 100 })}`)
    .then((p) => p.items);
  const pick = h('select', { id: 'sweep-pick', 'aria-label': 'Sweep run', onchange: () => go(`/compare?run=${pick.value}`) },
    h('option', { value: '' }, sweeps.length ? 'choose a sweep…' : 'no finished sweep'),
    sweeps.map((r) => h('option', { value: String(r.id), selected: String(r.id) === id }, `${shortId(r.id)} ${r.scenario} (${r.policies.join(', ')})`)));
  main.append(h('div', { class: 'page-head' }, h('div', null, h('h1', null, 'Compare policies'),
    h('p', { class: 'hint' }, 'Goodput on this page: the highest arrival-rate scale whose violation rate stays under the target.')),
  h('label', null, 'Sweep: ', pick)));
  if (!id) {
    main.append(empty('Pick a sweep', 'A sweep replays a scenario at rising arrival rates under each policy and finds the goodput: the highest rate whose violation rate stays under a target.'),
      empty('Or compare replays', 'Select two or more finished replays of one scenario in the runs list (the checkboxes), then Compare.',
        h('a', { class: 'btn', href: '#/runs?kind=replay&status=succeeded' }, 'Choose replays')));
    return;
  }
  const run = await api<Run>(`/runs/${id}`);
  const rep = run.summary as SweepReport | null;
  if (run.kind !== 'sweep' || run.status !== 'succeeded' || !rep) {
    main.append(h('div', { class: 'state state-error' }, h('h3', null, `Run ${shortId(id)} has no sweep results`),
      h('p', null, 'Status: ', badge(run.status), run.error ? ` — ${run.error}` : '')));
    return;
  }
  const policies = [...new Set(rep.points.map((p) => p.policy))];
  const targets = [...new Set(rep.results.map((r) => r.target))].sort((a, b) => a - b);
  const curves = policies.map((p, i) => {
    const pts = rep.points.filter((x) => x.policy === p).sort((a, b) => a.rate_scale - b.rate_scale);
    return { name: p, color: policyColor(p, i), x: pts.map((x) => x.rate_scale), y: pts.map((x) => x.violation_rate), points: true };
  });
  const maxV = Math.max(0.2, ...targets.map((t) => t * 2));
  main.append(section('Violation rate against arrival rate',
    h('div', { 'data-testid': 'sweep-chart' }, lineChart(curves.map((c) => ({ ...c, y: c.y.map((v) => Math.min(v, maxV)) })), {
      xLabel: 'arrival-rate scale (log)', yLabel: 'SLA violation rate', xLog: true, yMax: maxV, width: 760, height: 300,
      yFormat: (v) => `${Math.round(v * 100)}%`, hlines: targets.map((t) => ({ y: t, label: `target ${pct(t, 0)}` })),
    })),
    h('p', { class: 'hint', 'data-testid': 'sweep-dots' }, (rep.seeds?.length ?? 0) > 1
      ? `Each dot is ${rep.seeds!.length} full replays, one per draw of the scenario, their requests counted together; rates above the chart are clipped. Dashed lines: violation targets.`
      : 'Each dot is one full replay; rates above the chart are clipped. Dashed lines: violation targets.')));

  const ratioOf = (p: string, t: number) => rep.ratios.find((r) => r.policy === p && r.target === t)?.goodput_vs_dedicated ?? null;
  main.append(section('Goodput (highest rate scale under each target)', table(
    ['Policy', 'Target', 'Goodput (rate scale)', 'vs dedicated', 'Output at goodput', 'Prompt at goodput', 'Violations', 'OOM'],
    rep.results.map((r) => [
      h('span', { class: 'swatch-name' }, h('i', { class: 'swatch', style: { background: policyColor(r.policy, policies.indexOf(r.policy)) } }), r.policy),
      pct(r.target, 0), r.rate_scale ? `${r.rate_scale.toFixed(2)}×` : 'none (violates at min scale)',
      ratio(ratioOf(r.policy, r.target)), tokPerS(r.output_tokens_per_s), tokPerS(r.prompt_tokens_per_s),
      pct(r.violation_rate), String(r.oom_events),
    ]), 'goodput'),
  h('div', { class: 'grid2' }, targets.map((t) => h('div', { 'data-testid': `ratio-${t}` }, h('h3', null, `Goodput × dedicated at ${pct(t, 0)} violations`),
    policies.some((p) => ratioOf(p, t)) ? histogram(policies.map((p, i) => ({ label: p, value: ratioOf(p, t) ?? 0, color: policyColor(p, i),
      title: `${p}: ${ratio(ratioOf(p, t))}` })), { xLabel: 'policy', yLabel: 'goodput ÷ dedicated', every: 1, height: 220 })
      : h('p', { class: 'hint' }, `No ratio: dedicated sustains no rate tried at ${pct(t, 0)} violations (or no policy does).`))))));

  main.append(section('Export', exportPanel(run)));
  main.append(section('How this run ran', paramsPanel(run)));

  // Replays of the same scenario, side by side.
  const replays = await api<ApiPage<Run>>(`/runs${qs({ kind: 'replay', scenario: rep.scenario, status: 'succeeded', limit: 50 })}`)
    .then((p) => p.items.filter((r) => r.kind === 'replay' && r.summary && r.scenario === rep.scenario)).catch(() => [] as Run[]);
  if (replays.length) {
    main.append(section(`Replays of ${rep.scenario}`,
      replays.length >= 2 ? h('p', null, h('a', { class: 'btn', href: compareHref(replays.slice(0, 6).map((r) => String(r.id))) },
        `Compare the ${Math.min(6, replays.length)} newest side by side`)) : null,
      table(
      ['Run', 'Policy', 'Output', 'Prompt', 'Violations', 'TTFT p99', 'TPOT p99', 'GPU busy', 'OOM', ''],
      replays.map((r) => {
        const s = r.summary as Summary;
        return [link(`#/runs/${r.id}`, shortId(r.id)), r.policies.join(', '), tokPerS(s.output_tokens_per_s),
          tokPerS(s.prompt_tokens_per_s), pct(s.violation_rate), ms(s.ttft_p99_ms), ms(s.tpot_p99_ms),
          pct(s.gpu_busy_fraction), String(s.oom_events), link(`#/runs/${r.id}/timeline`, 'timeline')];
      }))));
  }
};
