import { api, qs } from '../api';
import { h } from '../dom';
import { dur, shortId } from '../format';
import { tenantColor } from '../palette';
import { replaceQuery } from '../router';
import { fromApi } from '../timeline/data';
import type { Source } from '../timeline/view';
import { TimelineView } from '../timeline/view';
import type { Page as ApiPage, Run, TimelineMeta, TimelineWindow } from '../types';
import { empty } from '../ui';
import type { Page } from './page';

/** Ops per window the client asks for; beyond this the server answers buckets. */
export const MAX_OPS = 300_000;

/** "0-3,6" → [0, 1, 2, 3, 6]; null when empty or unreadable (then every GPU). */
export function parseGpus(s: string | null): number[] | null {
  if (!s?.trim()) return null;
  const out = new Set<number>();
  for (const part of s.split(',')) {
    const m = part.trim().match(/^(\d+)(?:-(\d+))?$/);
    if (!m) return null;
    const a = Number(m[1]), b = Number(m[2] ?? m[1]);
    for (let g = Math.min(a, b); g <= Math.max(a, b) && out.size < 4096; g++) out.add(g);
  }
  return [...out].sort((x, y) => x - y);
}

async function source(run: Run, only: number[] | null): Promise<Source & { ops: number }> {
  const meta = await api<TimelineMeta>(`/runs/${run.id}/timeline/meta`);
  const all = Array.isArray(meta.gpus) ? meta.gpus : Array.from({ length: meta.gpus }, (_, g) => g);
  const gpuCount = all.reduce((a, g) => Math.max(a, g + 1), 0);
  const gpus = only ? all.filter((g) => only.includes(g)) : all;
  const tenants = meta.tenants.map((t) => (typeof t === 'string' ? t : (t as { name: string }).name));
  return {
    label: `${shortId(run.id)} ${(run.policies ?? []).join(', ')} — ${run.scenario}`,
    from: meta.from_ns, to: Math.max(meta.to_ns, meta.from_ns + 1), gpus, tenants, ops: meta.ops,
    async fetch(from, to, signal) {
      const w = await api<TimelineWindow>(`/runs/${run.id}/timeline${qs({
        from_ns: Math.floor(from), to_ns: Math.ceil(to), max_ops: MAX_OPS,
        gpus: only ? gpus.join(',') : null })}`, { signal });
      return fromApi(w, from, to, gpuCount, tenants.length);
    },
  };
}

export const timelinePage: Page = async (main, ctx) => {
  const id = ctx.route.path[1];
  const withId = ctx.route.query.get('with');
  const run = await api<Run>(`/runs/${id}`);
  const other = withId ? await api<Run>(`/runs/${withId}`) : null;
  const head = h('div', { class: 'page-head' },
    h('div', null, h('h1', null, 'Timeline ', h('small', null, `${run.scenario}`)),
      h('p', { class: 'hint' }, 'Each bar is one operator, coloured by tenant. Hatched: idle. A dark base line marks an operator that ran in another tenant’s slice; a dark strip on top, the activation transfer before it.')),
    h('a', { class: 'btn', href: `#/runs/${id}` }, '← Run detail'));
  main.append(head);
  if (run.status !== 'succeeded') {
    main.append(empty('No timeline', `Run ${shortId(id)} is ${run.status}: only a finished replay has a timeline.`));
    return;
  }
  const only = parseGpus(ctx.route.query.get('gpus'));
  const sources = [await source(run, only)];
  if (other) sources.push(await source(other, only));
  if (sources.every((s) => !s.ops)) {
    main.append(empty('No operators recorded', 'This run stored no operator timeline (runs stored before the timeline was recorded have none). Start a new replay to get one.'));
    return;
  }

  // Pick a second run of the same scenario to stack below (e.g. dedicated vs slice).
  const peers = await api<ApiPage<Run>>(`/runs${qs({ kind: 'replay', scenario: run.scenario, status: 'succeeded', limit: 50 })}`)
    .then((p) => p.items.filter((r) => r.kind === 'replay' && String(r.id) !== String(id)))
    .catch(() => [] as Run[]);
  const pick = h('select', { id: 'compare-run', 'aria-label': 'Stack a second run', onchange: () => {
    const q = new URLSearchParams(ctx.route.query);
    if (pick.value) q.set('with', pick.value); else q.delete('with');
    location.hash = `#/runs/${id}/timeline?${q}`;
  } }, h('option', { value: '' }, peers.length ? 'none' : 'no other replay of this scenario'),
  peers.map((r) => h('option', { value: String(r.id), selected: String(r.id) === withId }, `${shortId(r.id)} ${(r.policies ?? []).join(', ')}`)));

  const q = ctx.route.query;
  const initial = q.get('from') && q.get('to') ? { from: Number(q.get('from')), to: Number(q.get('to')) } : null;
  const status = h('span', { class: 'hint', 'aria-live': 'polite' });
  const tl = new TimelineView(sources, initial, (v) => {
    status.textContent = `${dur(v.from)} – ${dur(v.to)} (${dur(v.to - v.from)} in view)`;
    const p = new URLSearchParams(ctx.route.query);
    p.set('from', String(Math.round(v.from)));
    p.set('to', String(Math.round(v.to)));
    replaceQuery(p);
  });
  ctx.onLeave(() => tl.destroy());
  const tenants = sources[0].tenants;
  main.append(
    h('div', { class: 'toolbar' },
      h('button', { class: 'btn', onclick: () => tl.zoom(0.5), 'aria-label': 'Zoom in' }, '+ Zoom in'),
      h('button', { class: 'btn', onclick: () => tl.zoom(2), 'aria-label': 'Zoom out' }, '− Zoom out'),
      h('button', { class: 'btn', onclick: () => tl.pan(-0.25), 'aria-label': 'Pan left' }, '←'),
      h('button', { class: 'btn', onclick: () => tl.pan(0.25), 'aria-label': 'Pan right' }, '→'),
      h('button', { class: 'btn', onclick: () => tl.reset() }, 'Whole run'),
      h('label', null, 'Stack below: ', pick),
      h('label', null, 'GPUs: ', h('input', { id: 'gpu-filter', size: 8, placeholder: 'all, or 0-3,6', value: ctx.route.query.get('gpus') ?? '',
        onchange: (e: Event) => {
          const q = new URLSearchParams(ctx.route.query);
          const v = (e.target as HTMLInputElement).value.trim();
          if (v && parseGpus(v)) q.set('gpus', v); else q.delete('gpus');
          location.hash = `#/runs/${id}/timeline?${q}`;
        } })), status),
    h('div', { class: 'legend' }, tenants.map((t, i) =>
      h('span', { class: 'legend-item' }, h('i', { style: { background: tenantColor(i) } }), t)),
    h('span', { class: 'legend-item' }, h('i', { class: 'idle-swatch' }), 'idle')),
    tl.el);
  tl.start();
};
