// Histograms and horizontal bars in SVG.

import { svg, h } from '../dom';
import { niceTicks, tickLabel } from './axis';
import { chartTools } from './tools';

export interface Bin { label: string; value: number; color?: string; title?: string }

export function histogram(bins: Bin[], o: { xLabel: string; yLabel: string; width?: number; height?: number; every?: number; name?: string }): HTMLElement {
  const W = o.width ?? 560, H = o.height ?? 200, L = 56, R = 8, T = 10, B = 40;
  const max = Math.max(1e-9, ...bins.map((b) => b.value));
  const bw = (W - L - R) / Math.max(1, bins.length);
  const sy = (v: number) => T + (1 - v / max) * (H - T - B);
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': `${o.yLabel} by ${o.xLabel}` });
  g.style.maxWidth = `${W}px`;
  for (const t of niceTicks(0, max, 4)) {
    g.append(svg('line', { x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: 'grid' }),
      svg('text', { x: L - 6, y: sy(t) + 4, 'text-anchor': 'end', class: 'tick' }, tickLabel(t)));
  }
  const every = o.every ?? Math.max(1, Math.ceil(bins.length / 8));
  bins.forEach((b, i) => {
    g.append(svg('rect', { x: L + i * bw + 1, y: sy(b.value), width: Math.max(1, bw - 2), height: H - B - sy(b.value),
      fill: b.color ?? '#4e79a7' }, svg('title', {}, b.title ?? `${b.label}: ${tickLabel(b.value)}`)));
    if (i % every === 0) {
      g.append(svg('text', { x: L + i * bw + bw / 2, y: H - B + 14, 'text-anchor': 'middle', class: 'tick' }, b.label));
    }
  });
  g.append(svg('line', { x1: L, x2: W - R, y1: H - B, y2: H - B, class: 'axis' }),
    svg('text', { x: (L + W - R) / 2, y: H - 4, 'text-anchor': 'middle', class: 'label' }, o.xLabel),
    svg('text', { x: 12, y: T + (H - T - B) / 2, transform: `rotate(-90 12 ${T + (H - T - B) / 2})`,
      'text-anchor': 'middle', class: 'label' }, o.yLabel));
  return h('figure', { class: 'figure' }, g, chartTools(g, o.name ?? `${o.yLabel} by ${o.xLabel}`, {
    head: [o.xLabel, o.yLabel],
    rows: bins.map((b) => [b.title ?? b.label, tickLabel(b.value)]),
    raw: bins.map((b) => [b.title ?? b.label, b.value]),
  }));
}

/** A horizontal 0..1 meter with a label, for busy fractions. */
export function meter(v: number, color = '#4e79a7'): HTMLElement {
  const pc = Math.max(0, Math.min(1, v)) * 100;
  return h('div', { class: 'meter', title: `${pc.toFixed(1)} %` },
    h('div', { class: 'meter-fill', style: { width: `${pc}%`, background: color } }),
    h('span', null, `${pc.toFixed(1)} %`));
}
