import { api, ApiError, qs } from '../api';
import { h } from '../dom';
import { dur, num, shortId } from '../format';
import { runLabel } from '../run-label';
import { UNRECORDED_SWATCH } from '../truth-style';
import { can } from '../session';
import { tenantColor } from '../palette';
import { replaceQuery } from '../router';
import { fromApi } from '../timeline/data';
import type { Source } from '../timeline/view';
import { TimelineView } from '../timeline/view';
import type { Page as ApiPage, Run, TimelineMeta, TimelineWindow, TimelineWindowInfo } from '../types';
import { empty, progressBar } from '../ui';
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

type Src = Source & { ops: number; meta: TimelineMeta; run: Run; windows: [number, number][] };

/** Recorded spans of a meta's windows. */
function spans(meta: TimelineMeta): [number, number][] {
  const w = meta.windows ?? [];
  if (!w.length && meta.ops) return [[meta.from_ns, meta.to_ns]];
  return w.filter((x) => x.status === 'recorded' && x.recorded_to_ns !== null).map((x) => [x.from_ns, x.recorded_to_ns as number]);
}

async function source(run: Run, only: number[] | null): Promise<Src> {
  const meta = await api<TimelineMeta>(`/runs/${run.id}/timeline/meta`);
  const all = Array.isArray(meta.gpus) ? meta.gpus : Array.from({ length: meta.gpus }, (_, g) => g);
  const gpuCount = all.reduce((a, g) => Math.max(a, g + 1), 0);
  const gpus = only ? all.filter((g) => only.includes(g)) : all;
  const tenants = meta.tenants.map((t) => (typeof t === 'string' ? t : (t as { name: string }).name));
  const src: Src = {
    label: `${shortId(run.id)} ${runLabel(run)}`,
    from: meta.from_ns, to: Math.max(meta.to_ns, meta.from_ns + 1), gpus, tenants, ops: meta.ops, meta, run,
    windows: spans(meta),
    async fetch(from, to, signal) {
      // `v`: the meta's version, so a finished run's answers are cacheable for good.
      const w = await api<TimelineWindow>(`/runs/${run.id}/timeline${qs({
        from_ns: Math.floor(from), to_ns: Math.ceil(to), max_ops: MAX_OPS,
        gpus: only ? gpus.join(',') : null, v: src.meta.version ?? null })}`, { signal });
      return fromApi(w, from, to, gpuCount, tenants.length);
    },
  };
  return src;
}

/** What a track's data is: said above the canvas, not left to be guessed. */
function coverage(s: Src): string {
  const m = s.meta;
  const end = m.run_end_ns || m.to_ns;
  const win = spans(m);
  // A long-served live run has a sample every few seconds: name the first few.
  const listed = win.slice(0, 6).map(([a, b]) => `${dur(a)}–${dur(b)}`).join(', ') + (win.length > 6 ? `, … ${win.length - 6} more` : '');
  const detail = win.length
    ? `every operator in ${win.length} recorded window${win.length > 1 ? 's' : ''} (${listed})`
    : 'no operator recorded one by one';
  if (m.whole_run) {
    return `${shortId(s.run.id)}: whole run (${dur(end)}) as busy time per GPU and tenant in ${dur(m.bucket_ns ?? 0)} buckets; ${detail}.`;
  }
  if (s.run.kind === 'live') {
    return `${shortId(s.run.id)}: a live run, its operators sampled while it served (predicted against measured time); ${detail}. The rest is drawn as not recorded.`;
  }
  return `${shortId(s.run.id)}: only ${dur(m.to_ns - m.from_ns)} of ${end ? dur(end) : 'the run'} recorded (stored before whole-run timelines); ${detail}. The rest is drawn as not recorded.`;
}

const REASONS: Record<string, string> = { start: 'start of the run', busiest: 'busiest second', violations: 'worst violation spike', requested: 'requested', sampled: 'sampled while serving' };

/** Recorded windows (click to view) and recording the window in view (admins). */
function windowsPanel(s: Src, tl: TimelineView, refresh: () => Promise<void>): HTMLElement {
  const list = (s.meta.windows ?? []);
  const box = h('div', { class: 'windows', 'data-testid': `windows-${s.run.id}` });
  const rows = list.map((w: TimelineWindowInfo) => h('li', { 'data-window': w.id, 'data-status': w.status },
    h('button', { class: 'btn btn-small', disabled: w.status !== 'recorded', onclick: () => tl.setView({ from: w.from_ns, to: w.recorded_to_ns ?? w.to_ns }) }, 'Show'),
    ` ${REASONS[w.reason] ?? w.reason}: ${dur(w.from_ns)}–${dur(w.recorded_to_ns ?? w.to_ns)} `,
    w.status === 'recorded' ? h('span', { class: 'hint' }, `${num(w.ops)} operator records`)
      : w.status === 'queued' || w.status === 'running' ? progressBar(w.progress, w.status)
        : h('span', { class: 'cell-error' }, `${w.status}${w.error ? `: ${w.error}` : ''}`)));
  const msg = h('span', { class: 'hint', role: 'status' });
  const record = can('runs.start') && s.run.kind === 'replay' && s.meta.whole_run
    ? h('button', { class: 'btn', 'data-action': 'record-window', onclick: async () => {
      const v = tl.current();
      try {
        await api(`/runs/${s.run.id}/timeline/windows`, { method: 'POST', body: JSON.stringify({ from_ns: Math.floor(v.from), to_ns: Math.ceil(v.to) }) });
        msg.textContent = 'Recording: the run is replayed up to this window’s end.';
        await refresh();
      } catch (e) {
        msg.textContent = e instanceof ApiError ? `${e.title}: ${e.detail}` : String(e);
      }
    } }, 'Record every operator in this view') : null;
  box.append(h('h3', null, `Op-level windows of ${shortId(s.run.id)}`), h('ul', { class: 'plain' }, rows), ...(record ? [record] : []), msg);
  return box;
}

export const timelinePage: Page = async (main, ctx) => {
  const id = ctx.route.path[1];
  const withId = ctx.route.query.get('with');
  const run = await api<Run>(`/runs/${id}`);
  const other = withId ? await api<Run>(`/runs/${withId}`) : null;
  const head = h('div', { class: 'page-head' },
    h('div', null, h('h1', null, 'Timeline ', h('small', null, runLabel(run))),
      h('p', { class: 'hint' }, 'Each bar is one operator, coloured by tenant (outside recorded windows: busy time per bucket). Hatched: idle. Chequered: not recorded (never idle). A dark base line marks work that ran in another tenant’s slice; a dark strip on top, the activation transfer before it.')),
    h('a', { class: 'btn', href: `#/runs/${id}` }, '← Run detail'));
  main.append(head);
  if (run.status !== 'succeeded') {
    main.append(empty('No timeline', `Run ${shortId(id)} is ${run.status}: only a finished replay has a timeline.`));
    return;
  }
  const only = parseGpus(ctx.route.query.get('gpus'));
  const sources = [await source(run, only)];
  if (other) sources.push(await source(other, only));
  if (sources.every((s) => !s.ops && !s.meta.whole_run)) {
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
  peers.map((r) => h('option', { value: String(r.id), selected: String(r.id) === withId }, `${shortId(r.id)} ${runLabel(r)}`)));

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
  const winBox = h('div', { class: 'windows-box' });
  const tenants = sources[0].tenants;
  main.append(
    h('div', { class: 'toolbar' },
      h('button', { class: 'btn', onclick: () => tl.zoom(0.5), 'aria-label': 'Zoom in' }, '+ Zoom in'),
      h('button', { class: 'btn', onclick: () => tl.zoom(2), 'aria-label': 'Zoom out' }, '− Zoom out'),
      h('button', { class: 'btn', onclick: () => tl.pan(-0.25), 'aria-label': 'Pan left' }, '←'),
      h('button', { class: 'btn', onclick: () => tl.pan(0.25), 'aria-label': 'Pan right' }, '→'),
      h('button', { class: 'btn', onclick: () => tl.reset() }, sources.every((s) => s.meta.whole_run) ? 'Whole run' : 'Everything recorded'),
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
    h('span', { class: 'legend-item' }, h('i', { class: 'idle-swatch' }), 'idle'),
    h('span', { class: 'legend-item' }, h('i', { class: 'unrecorded-swatch', style: UNRECORDED_SWATCH }), 'not recorded')),
    h('div', { class: 'coverage', 'data-testid': 'timeline-coverage' }, sources.map((s) => h('p', { class: 'hint' }, coverage(s)))),
    tl.el, winBox);
  tl.start();
  // Windows being recorded: poll their progress, then fetch the view again (it may
  // now hold every operator).
  let poll = 0;
  ctx.onLeave(() => clearTimeout(poll));
  async function refreshWindows(): Promise<void> {
    clearTimeout(poll);
    for (const s of sources) {
      const before = s.meta.version;
      s.meta = await api<TimelineMeta>(`/runs/${s.run.id}/timeline/meta`);
      s.windows = spans(s.meta);
      if (s.meta.version !== before) tl.refresh();
    }
    winBox.replaceChildren(...sources.map((s) => windowsPanel(s, tl, refreshWindows)));
    if (sources.some((s) => (s.meta.windows ?? []).some((w) => w.status === 'queued' || w.status === 'running'))) {
      poll = window.setTimeout(() => void refreshWindows().catch(() => undefined), 1000);
    }
  }
  void refreshWindows().catch(() => undefined);
};
