// GPU busy fraction over time as a heat strip per GPU, on canvas: a long replay has
// thousands of buckets per GPU, too many for SVG.

import { h } from '../dom';

export function busyHeat(busyNs: number[][], bucketS: number): HTMLElement {
  const rows = busyNs.length;
  const n = Math.max(0, ...busyNs.map((r) => r.length));
  const W = 720, L = 56, rowH = 14, T = 4, B = 30;
  const cols = Math.min(n, W - L - 8);
  const c = h('canvas', { width: W, height: T + rows * rowH + B, class: 'heat', role: 'img',
    'aria-label': 'Busy fraction of each GPU over time' });
  const ctx = c.getContext('2d');
  if (!ctx || !n) return h('p', { class: 'hint' }, 'No per-GPU series stored.');
  const per = n / cols;
  const bucketNs = bucketS * 1e9;
  for (let g = 0; g < rows; g++) {
    ctx.fillStyle = '#444';
    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    ctx.fillText(`GPU ${g}`, 4, T + g * rowH + rowH / 2);
    for (let x = 0; x < cols; x++) {
      // Mean busy fraction of the buckets this column covers.
      const a = Math.floor(x * per), b = Math.max(a + 1, Math.floor((x + 1) * per));
      let s = 0;
      for (let i = a; i < b; i++) s += busyNs[g][i] ?? 0;
      const f = Math.min(1, s / ((b - a) * bucketNs));
      ctx.fillStyle = `hsl(212, 55%, ${Math.round(97 - f * 62)}%)`;
      ctx.fillRect(L + x * ((W - L - 8) / cols), T + g * rowH, (W - L - 8) / cols + 0.5, rowH - 2);
    }
  }
  ctx.fillStyle = '#555';
  ctx.textAlign = 'center';
  const total = n * bucketS;
  for (let i = 0; i <= 5; i++) {
    ctx.textAlign = i === 0 ? 'left' : i === 5 ? 'right' : 'center';
    ctx.fillText(`${Math.round((total * i) / 5)} s`, L + ((W - L - 8) * i) / 5, T + rows * rowH + 12);
  }
  return h('figure', { class: 'figure' }, c,
    h('figcaption', { class: 'legend' }, h('span', { class: 'legend-item' }, h('i', { style: { background: 'hsl(212,55%,97%)', border: '1px solid #ddd' } }), 'idle'),
      h('span', { class: 'legend-item' }, h('i', { style: { background: 'hsl(212,55%,35%)' } }), 'busy the whole bucket')));
}
