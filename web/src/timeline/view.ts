// The interactive timeline: one canvas, several tracks on one time axis, zoom/pan by
// wheel, drag and keyboard, a hover tooltip, and windowed fetching with level of detail.

import { h } from '../dom';
import { dur } from '../format';
import { tenantColor } from '../palette';
import { lowerBound, type WindowData } from './data';
import { draw, GUTTER, hitOp, layout, type Layout, type Track, type View } from './render';

export interface Source {
  label: string;
  from: number; to: number;
  gpus: number[];
  tenants: string[];
  /** Spans recorded op by op (the server answers ops only inside one of them). */
  windows?: [number, number][];
  /** Loads [from, to]; the answer is ops or buckets, whichever the window allows. */
  fetch(from: number, to: number, signal: AbortSignal): Promise<WindowData>;
}

/** What the browser tests and the bench read: frame times and what was drawn. */
export interface PerfHook {
  frames: { draw_ms: number; at: number; ops: number }[];
  opsInView: number;
  /** Borrowed ops (ops mode) or buckets with borrowed time (buckets mode) in view. */
  borrowedInView: number;
  rects: number;
  fetches: number;
  view: View;
  modes: string[];
  ready: boolean;
  setView(from: number, to: number): void;
  reset(): void;
}

declare global { interface Window { __timeline?: PerfHook } }

const MIN_SPAN_NS = 2_000; // 2 µs: below one operator, nothing more to see

export class TimelineView {
  readonly el: HTMLElement;
  private canvas: HTMLCanvasElement;
  private ctx: CanvasRenderingContext2D;
  private tip: HTMLElement;
  private tracks: Track[];
  private lay!: Layout;
  private view: View;
  private full: View;
  private pending = 0;
  private fetchTimer = 0;
  private aborts: (AbortController | null)[];
  private width = 800;
  readonly perf: PerfHook;
  private onView: (v: View) => void;

  constructor(private sources: Source[], initial: View | null, onView: (v: View) => void) {
    this.onView = onView;
    this.full = { from: Math.min(...sources.map((s) => s.from)), to: Math.max(...sources.map((s) => s.to)) };
    this.view = initial ?? { ...this.full };
    this.tracks = sources.map((s) => ({ label: s.label, tenants: s.tenants, gpus: s.gpus, data: null, loading: true, error: null }));
    this.aborts = sources.map(() => null);
    this.canvas = h('canvas', { tabindex: 0, class: 'timeline-canvas', 'data-testid': 'timeline-canvas',
      'aria-label': 'GPU timeline. Arrow keys pan, plus and minus zoom, 0 resets; ] and [ step through operators, Page Down and Page Up change GPU, Enter shows the operator, Escape hides it. Wheel zooms, drag pans, a tap shows an operator.' });
    this.ctx = this.canvas.getContext('2d', { alpha: false })!;
    this.tip = h('div', { class: 'tooltip', role: 'status', 'aria-live': 'polite', hidden: true });
    this.el = h('div', { class: 'timeline' }, this.canvas, this.tip);
    const self = this;
    this.perf = {
      frames: [], opsInView: 0, borrowedInView: 0, rects: 0, fetches: 0, view: this.view, modes: [], ready: false,
      setView: (f, t) => self.setView({ from: f, to: t }),
      reset: () => self.setView({ ...self.full }),
    };
    window.__timeline = this.perf;
    this.bind();
  }

  /** Call once the element is in the document (needs its width). */
  start(): void {
    new ResizeObserver(() => this.resize()).observe(this.el);
    this.resize();
    this.refetch(true);
  }

  destroy(): void {
    this.aborts.forEach((a) => a?.abort());
    clearTimeout(this.fetchTimer);
    if (window.__timeline === this.perf) delete window.__timeline;
  }

  zoom(f: number, atX?: number): void {
    const v = this.view;
    const x = atX ?? GUTTER + (this.width - GUTTER) / 2;
    const t = v.from + ((x - GUTTER) / (this.width - GUTTER)) * (v.to - v.from);
    const span = Math.max(MIN_SPAN_NS, (v.to - v.from) * f);
    const a = (t - v.from) / (v.to - v.from);
    this.setView({ from: t - a * span, to: t - a * span + span });
  }

  pan(frac: number): void {
    const s = this.view.to - this.view.from;
    this.setView({ from: this.view.from + s * frac, to: this.view.to + s * frac });
  }

  reset(): void { this.setView({ ...this.full }); }

  /** The view now (for "record this window"). */
  current(): View { return { ...this.view }; }

  /** Fetches again (a window was recorded: the same view may now have every op). */
  refresh(): void { this.refetch(true); }

  setView(v: View): void {
    const span = Math.min(this.full.to - this.full.from, Math.max(MIN_SPAN_NS, v.to - v.from));
    let from = v.from;
    from = Math.max(this.full.from, Math.min(from, this.full.to - span));
    this.view = { from, to: from + span };
    this.perf.view = this.view;
    this.schedule();
    this.onView(this.view);
    clearTimeout(this.fetchTimer);
    this.fetchTimer = window.setTimeout(() => this.refetch(false), 120);
  }

  private resize(): void {
    const w = Math.max(320, this.el.clientWidth);
    const rows = this.tracks.reduce((a, t) => a + t.gpus.length, 0);
    const rowH = Math.max(14, Math.min(30, Math.floor(520 / Math.max(1, rows))));
    this.lay = layout(this.tracks, rowH);
    const dpr = window.devicePixelRatio || 1;
    this.width = w;
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(this.lay.height * dpr);
    this.canvas.style.width = `${w}px`;
    this.canvas.style.height = `${this.lay.height}px`;
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.schedule();
  }

  private schedule(): void {
    if (this.pending) return;
    this.pending = requestAnimationFrame(() => {
      this.pending = 0;
      const t0 = performance.now();
      this.ctx.fillStyle = '#fff';
      this.ctx.fillRect(0, 0, this.width, this.lay.height);
      const st = draw(this.ctx, this.width, this.lay, this.tracks, this.view);
      const t1 = performance.now();
      this.perf.frames.push({ draw_ms: t1 - t0, at: t0, ops: st.opsInView });
      if (this.perf.frames.length > 2000) this.perf.frames.splice(0, 1000);
      this.perf.opsInView = st.opsInView;
      this.perf.borrowedInView = st.borrowedInView;
      this.perf.rects = st.rects;
    });
  }

  /** Fetches each track's window when the view left it or needs finer detail. */
  private refetch(force: boolean): void {
    const v = this.view;
    const span = v.to - v.from;
    const nsPerPx = span / Math.max(1, this.width - GUTTER);
    this.sources.forEach((src, i) => {
      const d = this.tracks[i].data;
      const covered = d && d.from <= v.from && d.to >= v.to;
      const coarse = d?.mode === 'buckets' && d.bucketNs > nsPerPx * 3;
      // Inside a recorded window every op is there to fetch.
      const win = (src.windows ?? []).find((w) => w[0] <= v.from && v.to <= w[1]);
      const opsToGet = !!win && d?.mode !== 'ops';
      if (!force && covered && !coarse && !opsToGet) return;
      this.aborts[i]?.abort();
      const ac = new AbortController();
      this.aborts[i] = ac;
      // A quarter of a view either side: small pans need no fetch, and the window stays
      // within the server's op budget when the view itself holds 200k ops.
      let from = Math.max(src.from, v.from - span / 4), to = Math.min(src.to, v.to + span / 4);
      if (win) { from = Math.max(from, win[0]); to = Math.min(to, win[1]); }
      this.tracks[i].loading = true;
      this.perf.ready = false;
      this.perf.fetches++;
      src.fetch(from, to, ac.signal).then((data) => {
        if (ac.signal.aborted) return;
        this.tracks[i] = { ...this.tracks[i], data, loading: false, error: null };
        this.perf.modes[i] = data.mode;
        this.perf.ready = this.tracks.every((t) => t.data && !t.loading);
        this.schedule();
      }).catch((e) => {
        if (ac.signal.aborted) return;
        this.tracks[i] = { ...this.tracks[i], loading: false, error: e instanceof Error ? e.message : String(e) };
        this.schedule();
      });
    });
    this.schedule();
  }

  private bind(): void {
    const c = this.canvas;
    c.addEventListener('wheel', (e) => {
      e.preventDefault();
      const r = c.getBoundingClientRect();
      if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
        this.pan((e.shiftKey ? e.deltaY : e.deltaX) / (this.width - GUTTER));
      } else {
        this.zoom(Math.exp(e.deltaY * 0.0015), e.clientX - r.left);
      }
    }, { passive: false });
    let drag: { x: number; y: number; v: View } | null = null;
    c.addEventListener('pointerdown', (e) => {
      drag = { x: e.clientX, y: e.clientY, v: { ...this.view } };
      c.setPointerCapture(e.pointerId);
      c.classList.add('dragging');
    });
    c.addEventListener('pointermove', (e) => {
      if (drag) {
        const dt = ((e.clientX - drag.x) / (this.width - GUTTER)) * (drag.v.to - drag.v.from);
        this.setView({ from: drag.v.from - dt, to: drag.v.to - dt });
        this.tip.hidden = true;
      } else if (e.pointerType === 'mouse') {
        this.pinned = false;
        this.hover(e);
      }
    });
    const end = () => { drag = null; c.classList.remove('dragging'); };
    // A tap (or click) that did not drag pins the op's details: touch has no hover.
    c.addEventListener('pointerup', (e) => {
      const tap = drag && Math.hypot(e.clientX - drag.x, e.clientY - drag.y) < 6;
      end();
      if (tap) { this.hover(e); this.pinned = !this.tip.hidden; }
    });
    c.addEventListener('pointercancel', end);
    c.addEventListener('pointerleave', () => { if (!this.pinned) this.tip.hidden = true; });
    c.addEventListener('dblclick', (e) => this.zoom(0.5, e.clientX - c.getBoundingClientRect().left));
    c.addEventListener('keydown', (e) => {
      const keys: Record<string, () => void> = {
        ArrowLeft: () => this.pan(-0.1), ArrowRight: () => this.pan(0.1),
        '+': () => this.zoom(0.7), '=': () => this.zoom(0.7), '-': () => this.zoom(1 / 0.7),
        ArrowUp: () => this.zoom(0.7), ArrowDown: () => this.zoom(1 / 0.7), '0': () => this.reset(), Home: () => this.reset(),
        // Op details without a pointer: ] and [ step through a GPU's ops, PageDown and
        // PageUp change GPU, Enter shows the selected op, Escape hides it.
        ']': () => this.stepOp(1), '[': () => this.stepOp(-1), Enter: () => this.stepOp(0), ' ': () => this.stepOp(0),
        PageDown: () => this.stepRow(1), PageUp: () => this.stepRow(-1),
        Escape: () => { this.tip.hidden = true; this.pinned = false; },
      };
      const f = keys[e.key];
      if (f) { e.preventDefault(); f(); }
    });
  }

  /** The op chosen from the keyboard: a row (track, row index) and an op index in it. */
  private cursor: { track: number; row: number; op: number } | null = null;
  private pinned = false;

  private stepRow(d: number): void {
    const rows = this.lay.tracks.flatMap((t, ti) => t.rows.map((_, ri) => [ti, ri] as const));
    if (!rows.length) return;
    const at = this.cursor ? rows.findIndex(([t, r]) => t === this.cursor!.track && r === this.cursor!.row) : -1;
    const [track, row] = rows[Math.max(0, Math.min(rows.length - 1, at + d))];
    this.cursor = { track, row, op: -1 };
    this.stepOp(0);
  }

  private stepOp(d: number): void {
    if (!this.cursor) { this.cursor = { track: 0, row: 0, op: -1 }; }
    const c = this.cursor;
    const t = this.tracks[c.track], row = this.lay.tracks[c.track]?.rows[c.row];
    if (!t || !row) return;
    const data = t.data;
    const at = (x: number, content: HTMLElement) => { this.showTip(x, row.y + this.lay.rowH, content); this.pinned = true; };
    if (data?.mode !== 'ops') {
      at(GUTTER + 8, h('div', null, h('b', null, `${t.label}, GPU ${row.gpu}`),
        h('div', null, data?.mode === 'buckets' ? 'Aggregated view: zoom in (+) to step through single operators.' : 'Loading…')));
      return;
    }
    const lo = data.rowOff[row.gpu] ?? 0, hi = data.rowOff[row.gpu + 1] ?? lo;
    if (row.gpu >= data.gpuCount || hi <= lo) {
      at(GUTTER + 8, h('div', null, h('b', null, `GPU ${row.gpu}`), h('div', null, 'No recorded operator in this window.')));
      return;
    }
    const v = this.view;
    let i = c.op;
    if (i < lo || i >= hi) {
      // Start at the op nearest the middle of the view.
      const mid = (v.from + v.to) / 2;
      i = Math.min(hi - 1, Math.max(lo, lowerBound(data.start, mid, lo, hi)));
    } else {
      i = Math.min(hi - 1, Math.max(lo, i + d));
    }
    c.op = i;
    // Keep the op in view: pan to it when it is outside.
    const span = v.to - v.from;
    if (data.start[i] < v.from || data.end[i] > v.to) this.setView({ from: data.start[i] - span / 2, to: data.start[i] + span / 2 });
    const k = (this.width - GUTTER) / (this.view.to - this.view.from);
    at(GUTTER + (data.start[i] - this.view.from) * k, opTip(t, data, i, row.gpu));
  }

  private hover(e: PointerEvent): void {
    const r = this.canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    const k = (this.width - GUTTER) / (this.view.to - this.view.from);
    for (let ti = 0; ti < this.tracks.length; ti++) {
      for (const row of this.lay.tracks[ti].rows) {
        if (y < row.y || y > row.y + this.lay.rowH || x < GUTTER) continue;
        const t = this.tracks[ti];
        const d = t.data;
        const at = this.view.from + (x - GUTTER) / k;
        if (d && !d.recorded.some(([a, b]) => a <= at && at < b)) {
          this.showTip(x, y, h('div', null, h('b', null, `GPU ${row.gpu}: not recorded`), h('div', null,
            `${dur(at)}: this part of the run has no recorded data (it is not idle).`)));
          return;
        }
        if (d?.mode === 'buckets') {
          this.showTip(x, y, bucketTip(t, d, row.gpu, at));
          return;
        }
        if (d?.mode !== 'ops') {
          this.showTip(x, y, h('div', null, h('b', null, t.label), h('div', null, 'Loading…')));
          return;
        }
        const i = hitOp(d, row.gpu, x, this.view, k);
        if (i < 0) {
          this.showTip(x, y, h('div', null, h('b', null, `GPU ${row.gpu}: idle`), h('div', null, dur(this.view.from + (x - GUTTER) / k))));
          return;
        }
        this.showTip(x, y, opTip(t, d, i, row.gpu));
        return;
      }
    }
    this.tip.hidden = true;
  }

  private showTip(x: number, y: number, content: HTMLElement): void {
    this.tip.replaceChildren(content);
    this.tip.hidden = false;
    const w = this.tip.offsetWidth;
    this.tip.style.left = `${Math.min(x + 14, this.width - w - 4)}px`;
    this.tip.style.top = `${y + 14}px`;
  }
}

function bucketTip(t: Track, d: Extract<WindowData, { mode: 'buckets' }>, gpu: number, at: number): HTMLElement {
  const lo = d.rowOff[gpu] ?? 0, hi = d.rowOff[gpu + 1] ?? 0;
  let i = -1;
  for (let j = lo; j < hi; j++) if (d.t0[j] <= at && at < d.t0[j] + d.bucketNs) { i = j; break; }
  const row = (k: string, v: string) => h('tr', null, h('th', null, k), h('td', null, v));
  const head = h('b', null, `GPU ${gpu}, ${dur(Math.floor(at / d.bucketNs) * d.bucketNs)} + ${dur(d.bucketNs)}`);
  if (i < 0) return h('div', null, head, h('div', null, 'idle for the whole bucket'));
  const busy: HTMLElement[] = [];
  for (let k = 0; k < d.tenants; k++) {
    const b = d.tenantBusy[i * d.tenants + k];
    if (b > 0) busy.push(row(t.tenants[k] ?? `tenant ${k}`, `${dur(b)} (${((b / d.bucketNs) * 100).toFixed(0)} %)`));
  }
  return h('div', { 'data-testid': 'bucket-tooltip' }, head, h('table', null, ...busy,
    row('borrowed', d.borrowed[i] > 0 ? dur(d.borrowed[i]) : 'none'),
    row('idle', dur(Math.max(0, d.bucketNs - d.busy[i])))),
  h('div', { class: 'hint' }, 'Zoom into a recorded window for single operators.'));
}

function opTip(t: Track, d: Extract<WindowData, { mode: 'ops' }>, i: number, gpu: number): HTMLElement {
  const actual = d.end[i] - d.start[i];
  const pred = d.predicted[i];
  const tenant = t.tenants[d.tenant[i]] ?? `tenant ${d.tenant[i]}`;
  const err = pred > 0 ? ((actual - pred) / pred) * 100 : null;
  const row = (k: string, v: string) => h('tr', null, h('th', null, k), h('td', null, v));
  return h('div', { 'data-testid': 'op-tooltip' },
    h('div', { class: 'tip-head' }, h('i', { class: 'swatch', style: { background: tenantColor(d.tenant[i]) } }), h('b', null, tenant),
      d.borrowed[i] ? h('span', { class: 'tag' }, 'borrowed slice') : null),
    h('table', null,
      row('kind', `${d.kinds[d.kind[i]] ?? d.kind[i]}${d.layer[i] >= 0 ? `, layer ${d.layer[i]}` : ''}`),
      row('shape', `${d.prefill[i] + d.decodes[i]} tokens (${d.prefill[i]} prefill + ${d.decodes[i]} decode)`),
      row('GPU', String(gpu)),
      row('start', dur(d.start[i])),
      row('actual', dur(actual)),
      row('predicted', pred > 0 ? `${dur(pred)}${err !== null ? ` (${err >= 0 ? '+' : ''}${err.toFixed(1)} %)` : ''}` : '–'),
      row('transfer in', d.transfer[i] > 0 ? dur(d.transfer[i]) : 'none')));
}
