// Line charts in SVG: few points (per-second buckets, sweep points), so SVG stays cheap
// and its text stays crisp and selectable. Every chart has a hover (and keyboard)
// read-out of each series at the nearest x, its data as a table, and PNG/SVG/CSV saving.

import { svg, h } from '../dom';
import { niceTicks, tickLabel } from './axis';
import { chartTools, type ChartData } from './tools';

export interface LineSeries { name: string; color: string; x: number[]; y: number[]; dashed?: boolean; points?: boolean }

export interface LineOpts {
  xLabel: string; yLabel: string; width?: number; height?: number;
  yMax?: number; yFormat?: (v: number) => string; xLog?: boolean; xInt?: boolean;
  /** A fixed x domain, so charts stacked on one page share one time axis. */
  xMin?: number; xMax?: number;
  xFormat?: (v: number) => string;
  hlines?: { y: number; label: string }[];
  /** File name stem for saved images and data. */
  name?: string;
}

/** Margins every time chart shares, so stacked charts line up pixel for pixel. */
export const MARGIN = { L: 64, R: 14, T: 12, B: 38 };

export function lineChart(series: LineSeries[], o: LineOpts): HTMLElement {
  const W = o.width ?? 760, H = o.height ?? 220, { L, R, T, B } = MARGIN;
  const xs = series.flatMap((s) => s.x), ys = series.flatMap((s) => s.y).filter(Number.isFinite);
  const tx = (v: number) => (o.xLog ? Math.log10(Math.max(v, 1e-9)) : v);
  const x0 = o.xMin !== undefined ? tx(o.xMin) : Math.min(...xs.map(tx));
  const x1 = o.xMax !== undefined ? tx(o.xMax) : Math.max(...xs.map(tx));
  const y1 = o.yMax ?? Math.max(1e-9, ...ys, ...(o.hlines ?? []).map((l) => l.y)) * 1.05;
  const sx = (v: number) => L + ((tx(v) - x0) / (x1 - x0 || 1)) * (W - L - R);
  const sy = (v: number) => T + (1 - Math.min(v, y1) / y1) * (H - T - B);
  const fmt = o.yFormat ?? tickLabel;
  const xfmt = o.xFormat ?? tickLabel;
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', tabindex: 0,
    'aria-label': `${o.yLabel} against ${o.xLabel}. Arrow keys move the read-out; the data table follows the chart.` });
  g.style.maxWidth = `${W}px`;
  for (const t of niceTicks(0, y1, 4)) {
    g.append(svg('line', { x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: 'grid' }),
      svg('text', { x: L - 6, y: sy(t) + 4, 'text-anchor': 'end', class: 'tick' }, fmt(t)));
  }
  const xt = (o.xLog ? logTicks(x0, x1) : niceTicks(x0, x1, 6)).filter((t) => !o.xInt || Number.isInteger(t));
  for (const t of xt) {
    const X = o.xLog ? L + ((Math.log10(t) - x0) / (x1 - x0 || 1)) * (W - L - R) : sx(t);
    g.append(svg('text', { x: X, y: H - B + 16, 'text-anchor': 'middle', class: 'tick xtick' }, xfmt(t)));
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
    // A point without a value (a window with no completions) breaks the line: no value
    // is drawn as zero.
    let pen = 'M';
    const d = s.x.map((x, i) => {
      if (!Number.isFinite(s.y[i])) { pen = 'M'; return ''; }
      const seg = `${pen}${sx(x).toFixed(1)},${sy(s.y[i]).toFixed(1)}`;
      pen = 'L';
      return seg;
    }).join('');
    g.append(svg('path', { d, fill: 'none', stroke: s.color, 'stroke-width': 2,
      'stroke-dasharray': s.dashed ? '5 4' : 'none', 'data-series': s.name }));
    if (s.points) for (let i = 0; i < s.x.length; i++) {
      if (!Number.isFinite(s.y[i])) continue;
      g.append(svg('circle', { cx: sx(s.x[i]), cy: sy(s.y[i]), r: 3, fill: s.color },
        svg('title', {}, `${s.name}: ${xfmt(s.x[i])} → ${fmt(s.y[i])}`)));
    }
  }

  // The read-out: a cursor line and each series' value at the nearest x.
  const cursor = svg('line', { x1: 0, x2: 0, y1: T, y2: H - B, class: 'cursor', visibility: 'hidden' });
  const dots = series.map((s) => svg('circle', { r: 4, fill: s.color, stroke: '#fff', 'stroke-width': 1.5, visibility: 'hidden' }));
  g.append(cursor, ...dots);
  const tip = h('div', { class: 'readout', role: 'status', 'aria-live': 'polite', hidden: true, 'data-testid': 'readout' });
  const allX = [...new Set(xs)].sort((a, b) => a - b);
  let at = -1;
  const show = (i: number) => {
    if (!allX.length) return;
    at = Math.max(0, Math.min(allX.length - 1, i));
    const xv = allX[at];
    const X = sx(xv);
    cursor.setAttribute('x1', String(X));
    cursor.setAttribute('x2', String(X));
    cursor.setAttribute('visibility', 'visible');
    const lines = series.map((s, k) => {
      const j = nearest(s.x, xv);
      const ok = j >= 0 && Number.isFinite(s.y[j]);
      dots[k].setAttribute('visibility', ok ? 'visible' : 'hidden');
      if (ok) { dots[k].setAttribute('cx', String(sx(s.x[j]))); dots[k].setAttribute('cy', String(sy(s.y[j]))); }
      return h('div', null, h('i', { class: 'swatch', style: { background: s.color } }), ` ${s.name}: `, h('b', null, ok ? fmt(s.y[j]) : '–'));
    });
    tip.replaceChildren(h('div', { class: 'readout-x' }, `${o.xLabel}: ${xfmt(xv)}`), ...lines);
    tip.hidden = false;
    // Left or right of the cursor, whichever side has room (in the figure's own pixels).
    const box = g.getBoundingClientRect();
    const px = box.width ? (X / W) * box.width : X;
    const right = px < box.width / 2;
    tip.style.left = right ? `${px + 12}px` : '';
    tip.style.right = right ? '' : `${box.width - px + 12}px`;
  };
  const hide = () => {
    tip.hidden = true;
    cursor.setAttribute('visibility', 'hidden');
    dots.forEach((d) => d.setAttribute('visibility', 'hidden'));
  };
  g.addEventListener('pointermove', (e) => {
    const box = g.getBoundingClientRect();
    const X = ((e.clientX - box.left) / box.width) * W;
    if (X < L || X > W - R) return hide();
    const v = x0 + ((X - L) / (W - L - R)) * (x1 - x0);
    show(nearest(allX, o.xLog ? 10 ** v : v));
  });
  g.addEventListener('pointerleave', hide);
  g.addEventListener('blur', hide);
  g.addEventListener('keydown', (e) => {
    const step: Record<string, number> = { ArrowLeft: -1, ArrowRight: 1, PageUp: -10, PageDown: 10 };
    if (e.key === 'Escape') { hide(); return; }
    if (e.key === 'Home') { e.preventDefault(); show(0); return; }
    if (e.key === 'End') { e.preventDefault(); show(allX.length - 1); return; }
    if (step[e.key] !== undefined) { e.preventDefault(); show(at < 0 ? 0 : at + step[e.key]); }
  });

  const data: ChartData = {
    head: [o.xLabel, ...series.map((s) => s.name)],
    rows: allX.map((xv) => [xfmt(xv), ...series.map((s) => {
      const j = s.x.indexOf(xv);
      return j >= 0 && Number.isFinite(s.y[j]) ? fmt(s.y[j]) : '';
    })]),
    raw: allX.map((xv) => [xv, ...series.map((s) => {
      const j = s.x.indexOf(xv);
      return j >= 0 ? s.y[j] : null;
    })]),
  };
  return h('figure', { class: 'figure' }, h('div', { class: 'plot' }, g, tip),
    series.length > 1 ? legend(series.map((s) => [s.name, s.color, s.dashed])) : null,
    chartTools(g, o.name ?? o.yLabel, data));
}

/** Index of the value in sorted `a` nearest to `v` (-1 when empty). */
export function nearest(a: number[], v: number): number {
  if (!a.length) return -1;
  let lo = 0, hi = a.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (a[mid] < v) lo = mid + 1; else hi = mid;
  }
  return lo > 0 && Math.abs(a[lo - 1] - v) <= Math.abs(a[lo] - v) ? lo - 1 : lo;
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

export function legend(items: [string, string, boolean?][]): HTMLElement {
  return h('figcaption', { class: 'legend' },
    items.map(([n, c, dashed]) => h('span', { class: 'legend-item' },
      h('i', { class: dashed ? 'dashed' : '', style: { background: c } }), n)));
}
