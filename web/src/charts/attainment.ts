// A tenant's SLA attainment over time: one point per run attributed to it (when the
// run started, share of its requests within SLA), coloured by the SLA version it was
// judged against, with a marked line where each new SLA version took effect.

import { svg, h } from '../dom';
import { niceTicks } from './axis';

export interface AttainmentPoint { at: number; attainment: number; version: number; label: string }
export interface VersionMark { at: number; version: number }

const COLORS = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#b07aa1', '#76b7b2', '#edc948', '#9c755f'];
export const versionColor = (v: number) => COLORS[(v - 1 + COLORS.length) % COLORS.length];

const clock = (t: number) => new Date(t).toISOString().slice(11, 19);

export function attainmentChart(points: AttainmentPoint[], marks: VersionMark[]): HTMLElement {
  const W = 620, H = 230, L = 52, R = 16, T = 22, B = 40;
  const ts = [...points.map((p) => p.at), ...marks.map((m) => m.at)];
  let x0 = Math.min(...ts), x1 = Math.max(...ts);
  if (!(x1 > x0)) { x0 -= 60_000; x1 += 60_000; }
  const pad = (x1 - x0) * 0.04;
  x0 -= pad; x1 += pad;
  const ys = points.map((p) => p.attainment);
  const y0 = Math.max(0, Math.floor((Math.min(1, ...ys) - 0.05) * 10) / 10);
  const sx = (t: number) => L + ((t - x0) / (x1 - x0)) * (W - L - R);
  const sy = (v: number) => T + (1 - (v - y0) / (1 - y0 || 1)) * (H - T - B);
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', style: `max-width:${W}px`, role: 'img',
    'aria-label': 'SLA attainment per run over time, SLA versions marked', 'data-testid': 'attainment-chart' });
  for (const v of niceTicks(y0, 1, 4)) {
    g.append(svg('line', { x1: L, x2: W - R, y1: sy(v), y2: sy(v), class: 'grid' }),
      svg('text', { x: L - 6, y: sy(v) + 4, 'text-anchor': 'end', class: 'tick' }, `${Math.round(v * 100)}%`));
  }
  g.append(svg('line', { x1: L, x2: W - R, y1: H - B, y2: H - B, class: 'axis' }),
    svg('text', { x: L, y: H - B + 16, class: 'tick' }, clock(x0)),
    svg('text', { x: W - R, y: H - B + 16, 'text-anchor': 'end', class: 'tick' }, clock(x1)),
    svg('text', { x: (L + W - R) / 2, y: H - 4, 'text-anchor': 'middle', class: 'label' }, 'run start (UTC)'),
    svg('text', { x: 12, y: T + (H - T - B) / 2, transform: `rotate(-90 12 ${T + (H - T - B) / 2})`, 'text-anchor': 'middle', class: 'label' }, 'within SLA'));
  for (const m of marks) {
    const X = sx(m.at);
    g.append(svg('line', { x1: X, x2: X, y1: T - 6, y2: H - B, stroke: versionColor(m.version), 'stroke-dasharray': '4 3', 'data-version-mark': m.version }),
      svg('text', { x: X + 3, y: T - 8, class: 'tick', fill: versionColor(m.version) }, `SLA v${m.version}`));
  }
  const sorted = [...points].sort((a, b) => a.at - b.at);
  if (sorted.length > 1) {
    g.append(svg('path', { d: sorted.map((p, i) => `${i ? 'L' : 'M'}${sx(p.at).toFixed(1)},${sy(p.attainment).toFixed(1)}`).join(''),
      fill: 'none', stroke: '#888', 'stroke-width': 1.5 }));
  }
  for (const p of sorted) {
    g.append(svg('circle', { cx: sx(p.at), cy: sy(p.attainment), r: 4, fill: versionColor(p.version), 'data-sla-version': p.version,
      'data-attainment': p.attainment.toFixed(4) }, svg('title', {}, `${p.label}: ${(p.attainment * 100).toFixed(1)} % within SLA v${p.version}`)));
  }
  const versions = [...new Set(points.map((p) => p.version))].sort((a, b) => a - b);
  return h('figure', { class: 'figure' }, g, h('div', { class: 'legend' }, versions.map((v) =>
    h('span', { class: 'legend-item' }, h('i', { style: { background: versionColor(v) } }), `judged against SLA v${v}`))));
}
