// #/bench?ops=400000&view=0.5&gpus=8&tenants=10: the timeline on a synthetic run, with
// the first half of it (200k ops) in view at the start. The browser test drives zoom and pan here and reads the frame
// times from window.__timeline; it needs no server data, so it measures drawing alone.

import { h } from '../dom';
import { tenantColor } from '../palette';
import { syntheticOps } from '../timeline/synthetic';
import { TimelineView } from '../timeline/view';
import type { Page } from './page';

export const benchPage: Page = (main, ctx) => {
  const q = ctx.route.query;
  const n = Number(q.get('ops') ?? 200_000), gpus = Number(q.get('gpus') ?? 8), tenants = Number(q.get('tenants') ?? 10);
  const t0 = performance.now();
  const data = syntheticOps(n, gpus, tenants);
  const genMs = performance.now() - t0;
  const names = Array.from({ length: tenants }, (_, i) => `tenant-${i}`);
  const tl = new TimelineView([{
    label: `synthetic: ${n.toLocaleString('en')} operators, ${gpus} GPUs, ${tenants} tenants`,
    from: 0, to: data.to, gpus: Array.from({ length: gpus }, (_, g) => g), tenants: names,
    fetch: async () => data,
  }], { from: 0, to: data.to * Number(q.get('view') ?? 1) }, () => undefined);
  ctx.onLeave(() => tl.destroy());
  main.append(h('h1', null, 'Timeline benchmark'),
    h('p', { class: 'hint' }, `Generated in ${genMs.toFixed(0)} ms. Wheel zooms, drag pans; window.__timeline holds the frame times.`),
    h('div', { class: 'legend' }, names.map((t, i) => h('span', { class: 'legend-item' }, h('i', { style: { background: tenantColor(i) } }), t))),
    tl.el);
  tl.start();
};
