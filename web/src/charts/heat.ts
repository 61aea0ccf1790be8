// GPU busy fraction over time as a heat strip per GPU, on canvas: a long replay has
// thousands of buckets per GPU, too many for SVG. Its plot area has the line charts'
// width and margins, so it lines up under them on the same time axis.

import { h } from '../dom';
import { MARGIN } from './line';
import { chartTools } from './tools';

export function busyHeat(busyNs: number[][], bucketS: number, o: { gpus?: number[]; xMax?: number } = {}): HTMLElement {
  const rows = busyNs.length;
  const n = Math.max(0, ...busyNs.map((r) => r.length));
  const W = 760, { L, R } = MARGIN, rowH = 14, T = 4, B = 30;
  const plotW = W - L - R;
  const total = o.xMax ?? n * bucketS;
  const c = h('canvas', { width: W, height: T + rows * rowH + B, class: 'heat', role: 'img', tabindex: 0,
    'aria-label': 'Busy fraction of each GPU over time; the data table follows.' });
  const ctx = c.getContext('2d');
  if (!ctx || !n) return h('p', { class: 'hint' }, 'No per-GPU series stored.');
  const name = (g: number) => `GPU ${o.gpus?.[g] ?? g}`;
  // Columns of the plot, each the mean busy fraction of the buckets under it.
  const cols = Math.min(n, plotW);
  const colS = total / cols;
  const bucketNs = bucketS * 1e9;
  const frac = (g: number, t0: number, t1: number) => {
    const a = Math.floor(t0 / bucketS), b = Math.max(a + 1, Math.floor(t1 / bucketS));
    let s = 0;
    for (let i = a; i < b; i++) s += busyNs[g][i] ?? 0;
    return Math.min(1, s / ((b - a) * bucketNs));
  };
  ctx.font = '11px system-ui, sans-serif';
  for (let g = 0; g < rows; g++) {
    ctx.fillStyle = '#444';
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'left';
    ctx.fillText(name(g), 4, T + g * rowH + rowH / 2);
    for (let x = 0; x < cols; x++) {
      const f = frac(g, x * colS, (x + 1) * colS);
      ctx.fillStyle = `hsl(212, 55%, ${Math.round(97 - f * 62)}%)`;
      ctx.fillRect(L + x * (plotW / cols), T + g * rowH, plotW / cols + 0.5, rowH - 2);
    }
  }
  ctx.fillStyle = '#555';
  for (let i = 0; i <= 5; i++) {
    ctx.textAlign = i === 0 ? 'left' : i === 5 ? 'right' : 'center';
    ctx.fillText(`${Math.round((total * i) / 5)} s`, L + (plotW * i) / 5, T + rows * rowH + 12);
  }
  const tip = h('div', { class: 'readout', role: 'status', 'aria-live': 'polite', hidden: true, 'data-testid': 'readout' });
  c.addEventListener('pointermove', (e) => {
    const r = c.getBoundingClientRect();
    const X = ((e.clientX - r.left) / r.width) * W, Y = ((e.clientY - r.top) / r.height) * c.height;
    const g = Math.floor((Y - T) / rowH);
    if (X < L || X > W - R || g < 0 || g >= rows) { tip.hidden = true; return; }
    const t = ((X - L) / plotW) * total;
    const b = Math.min(n - 1, Math.floor(t / bucketS));
    tip.replaceChildren(h('div', { class: 'readout-x' }, `${name(g)}, ${(b * bucketS).toFixed(0)}–${((b + 1) * bucketS).toFixed(0)} s`),
      h('div', null, 'busy ', h('b', null, `${(frac(g, b * bucketS, (b + 1) * bucketS) * 100).toFixed(1)} %`)));
    tip.hidden = false;
    tip.style.left = `${((X + 12) / W) * r.width}px`;
    tip.style.top = `${((Y + 8) / c.height) * r.height}px`;
  });
  c.addEventListener('pointerleave', () => { tip.hidden = true; });
  // The table: busy fraction per GPU in (at most) 20 equal windows.
  const win = Math.min(20, cols);
  const ws = total / win;
  const head = ['GPU', ...Array.from({ length: win }, (_, i) => `${Math.round(i * ws)}–${Math.round((i + 1) * ws)} s`)];
  const raw = busyNs.map((_, g) => [name(g), ...Array.from({ length: win }, (_, i) => +frac(g, i * ws, (i + 1) * ws).toFixed(4))]);
  return h('figure', { class: 'figure' }, h('div', { class: 'plot' }, c, tip),
    h('figcaption', { class: 'legend' }, h('span', { class: 'legend-item' }, h('i', { class: 'heat-idle' }), 'idle'),
      h('span', { class: 'legend-item' }, h('i', { class: 'heat-busy' }), 'busy the whole bucket')),
    chartTools(c, 'GPU busy over time', { head, rows: raw.map((r) => r.map((v, i) => (i ? `${((v as number) * 100).toFixed(1)} %` : String(v)))), raw }));
}
