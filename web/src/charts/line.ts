// Line charts in SVG: few points (per-second buckets, sweep points), so SVG stays cheap
// and its text stays crisp and selectable.

import { svg, h } from '../dom';
import { niceTicks, tickLabel } from './axis';

export interface LineSeries { name: string; color: string; x: number[]; y: number[]; dashed?: boolean; points?: boolean }

export interface LineOpts {
  xLabel: string; yLabel: string; width?: number; height?: number;
  yMax?: number; yFormat?: (v: number) => string; xLog?: boolean; xInt?: boolean;
  hlines?: { y: number; label: string }[];
}

export function lineChart(series: LineSeries[], o: LineOpts): HTMLElement {
  const W = o.width ?? 560, H = o.height ?? 220, L = 56, R = 12, T = 12, B = 38;
  const xs = series.flatMap((s) => s.x), ys = series.flatMap((s) => s.y);
  const tx = (v: number) => (o.xLog ? Math.log10(Math.max(v, 1e-9)) : v);
  const x0 = Math.min(...xs.map(tx)), x1 = Math.max(...xs.map(tx));
  const y1 = o.yMax ?? Math.max(1e-9, ...ys, ...(o.hlines ?? []).map((l) => l.y)) * 1.05;
  const sx = (v: number) => L + ((tx(v) - x0) / (x1 - x0 || 1)) * (W - L - R);
  const sy = (v: number) => T + (1 - v / y1) * (H - T - B);
  const fmt = o.yFormat ?? tickLabel;
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', style: `max-width:${W}px`, role: 'img', 'aria-label': `${o.yLabel} against ${o.xLabel}` });
  for (const t of niceTicks(0, y1, 4)) {
    g.append(svg('line', { x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: 'grid' }),
      svg('text', { x: L - 6, y: sy(t) + 4, 'text-anchor': 'end', class: 'tick' }, fmt(t)));
  }
  const xt = (o.xLog ? logTicks(x0, x1) : niceTicks(x0, x1, 6)).filter((t) => !o.xInt || Number.isInteger(t));
  for (const t of xt) {
    const X = o.xLog ? L + ((Math.log10(t) - x0) / (x1 - x0 || 1)) * (W - L - R) : sx(t);
    g.append(svg('text', { x: X, y: H - B + 16, 'text-anchor': 'middle', class: 'tick' }, tickLabel(t)));
  }
  g.append(svg('line', { x1: L, x2: W - R, y1: H - B, y2: H - B, class: 'axis' }),
    svg('text', { x: (L + W - R) / 2, y: H - 4, 'text-anchor': 'middle', class: 'label' }, o.xLabel),
    svg('text', { x: 12, y: T + (H - T - B) / 2, transform: `rotate(-90 12 ${T + (H - T - B) / 2})`,
      'text-anchor': 'middle', class: 'label' }, o.yLabel));
  for (const l of o.hlines ?? []) {
    g.append(svg('line', { x1: L, x2: W - R, y1: sy(l.y), y2: sy(l.y), class: 'hline' }),
      svg('text', { x: W - R - 4, y: sy(l.y) - 4, 'text-anchor': 'end', class: 'tick' }, l.label));
  }
  for (const s of series) {
    const d = s.x.map((x, i) => `${i ? 'L' : 'M'}${sx(x).toFixed(1)},${sy(s.y[i]).toFixed(1)}`).join('');
    g.append(svg('path', { d, fill: 'none', stroke: s.color, 'stroke-width': 2,
      'stroke-dasharray': s.dashed ? '5 4' : 'none', 'data-series': s.name }));
    if (s.points) for (let i = 0; i < s.x.length; i++) {
      g.append(svg('circle', { cx: sx(s.x[i]), cy: sy(s.y[i]), r: 3, fill: s.color },
        svg('title', {}, `${s.name}: ${tickLabel(s.x[i])} → ${fmt(s.y[i])}`)));
    }
  }
  return h('figure', { class: 'figure' }, g,
    series.length > 1 ? legend(series.map((s) => [s.name, s.color])) : null);
}

function logTicks(lo: number, hi: number): number[] {
  const out: number[] = [];
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (Math.log10(v) >= lo - 1e-9 && Math.log10(v) <= hi + 1e-9) out.push(v);
    }
  }
  return out;
}

export function legend(items: [string, string][]): HTMLElement {
  return h('figcaption', { class: 'legend' },
    items.map(([n, c]) => h('span', { class: 'legend-item' }, h('i', { style: { background: c } }), n)));
}
