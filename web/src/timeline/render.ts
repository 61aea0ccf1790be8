// Canvas drawing of timeline tracks. Cost is bounded by pixels, not by ops: sub-pixel
// ops of one tenant that touch are merged into one rectangle, and rectangles are filled
// per tenant in one path, so 200k ops in view cost a walk over typed arrays and a few
// thousand rect() calls.

import { tenantColor } from '../palette';
import { dur } from '../format';
import { lowerBound, type OpsData, type WindowData } from './data';

export interface View { from: number; to: number }

export interface Track {
  label: string;
  tenants: string[];
  gpus: number[];
  data: WindowData | null;
  loading: boolean;
  error: string | null;
}

export const GUTTER = 84;
export const AXIS_H = 26;
export const TITLE_H = 22;
const ROW_GAP = 4;

export interface Layout { rowH: number; tracks: { y: number; rows: { gpu: number; y: number }[] }[]; height: number }

export function layout(tracks: Track[], rowH: number): Layout {
  let y = AXIS_H;
  const out: Layout['tracks'] = [];
  for (const t of tracks) {
    const ty = y;
    y += TITLE_H;
    const rows = t.gpus.map((gpu) => {
      const r = { gpu, y };
      y += rowH + ROW_GAP;
      return r;
    });
    out.push({ y: ty, rows });
    y += 6;
  }
  return { rowH, tracks: out, height: y };
}

let idlePattern: CanvasPattern | null = null;
function idleFill(ctx: CanvasRenderingContext2D): CanvasPattern | string {
  if (!idlePattern) {
    // Idle time is hatched so that an empty slice reads as waste, not as missing data.
    const c = document.createElement('canvas');
    c.width = c.height = 8;
    const g = c.getContext('2d')!;
    g.fillStyle = '#f3f3f1';
    g.fillRect(0, 0, 8, 8);
    g.strokeStyle = '#dcdcd6';
    g.beginPath();
    g.moveTo(0, 8); g.lineTo(8, 0);
    g.stroke();
    idlePattern = ctx.createPattern(c, 'repeat');
  }
  return idlePattern ?? '#f3f3f1';
}

export interface DrawStats { opsInView: number; rects: number }

export function draw(ctx: CanvasRenderingContext2D, width: number, lay: Layout, tracks: Track[], v: View): DrawStats {
  const stats: DrawStats = { opsInView: 0, rects: 0 };
  ctx.clearRect(0, 0, width, lay.height);
  const plotW = width - GUTTER;
  const k = plotW / (v.to - v.from);
  axis(ctx, width, lay.height, v, k);
  tracks.forEach((t, ti) => {
    const tl = lay.tracks[ti];
    ctx.fillStyle = '#222';
    ctx.font = '600 12px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    const status = t.error ? ` — ${t.error}` : t.loading ? ' — loading…' : t.data?.mode === 'buckets'
      ? ` — aggregated in ${dur(t.data.bucketNs)} buckets (zoom in for single operators)` : '';
    ctx.fillText(`${t.label}${status}`, 4, tl.y + TITLE_H / 2);
    for (const r of tl.rows) {
      ctx.fillStyle = '#444';
      ctx.font = '11px system-ui, sans-serif';
      ctx.fillText(`GPU ${r.gpu}`, 4, r.y + lay.rowH / 2);
      ctx.fillStyle = idleFill(ctx);
      ctx.fillRect(GUTTER, r.y, plotW, lay.rowH);
      if (!t.data) continue;
      ctx.save();
      ctx.beginPath();
      ctx.rect(GUTTER, r.y, plotW, lay.rowH);
      ctx.clip();
      if (t.data.mode === 'ops') drawOpsRow(ctx, t.data, r.gpu, r.y, lay.rowH, v, k, plotW, t.tenants.length, stats);
      else drawBucketRow(ctx, t.data, r.gpu, r.y, lay.rowH, v, k, stats);
      ctx.restore();
    }
  });
  return stats;
}

function axis(ctx: CanvasRenderingContext2D, width: number, height: number, v: View, k: number): void {
  const span = v.to - v.from;
  const raw = span / Math.max(2, Math.floor((width - GUTTER) / 110));
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  ctx.font = '11px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  ctx.textAlign = 'center';
  for (let t = Math.ceil(v.from / step) * step; t <= v.to; t += step) {
    const x = GUTTER + (t - v.from) * k;
    ctx.fillStyle = '#555';
    ctx.fillText(dur(t), x, AXIS_H / 2);
    ctx.fillStyle = '#0000000f';
    ctx.fillRect(Math.round(x), AXIS_H, 1, height - AXIS_H);
  }
  ctx.textAlign = 'start';
}

// Scratch buffers reused across frames: one rect list per tenant (x, w pairs).
let scratch: Float64Array[] = [];
let counts: Int32Array = new Int32Array(0);

function drawOpsRow(ctx: CanvasRenderingContext2D, d: OpsData, gpu: number, y: number, h: number, v: View, k: number,
  plotW: number, tenants: number, stats: DrawStats): void {
  if (gpu >= d.gpuCount) return;
  const lo = d.rowOff[gpu], hi = d.rowOff[gpu + 1];
  let i = lowerBound(d.start, v.from - d.maxDur[gpu], lo, hi);
  const nT = Math.max(tenants, 1);
  if (scratch.length < nT) scratch = Array.from({ length: nT }, () => new Float64Array(4096));
  if (counts.length < nT) counts = new Int32Array(nT);
  counts.fill(0);
  // Per tenant, the rect being grown: merged while the next op starts within half a pixel.
  const curX0 = new Float64Array(nT).fill(NaN), curX1 = new Float64Array(nT);
  const wide: number[] = [];
  const transfers: number[] = [];
  const borrowed: number[] = [];
  const push = (t: number, x0: number, x1: number) => {
    let buf = scratch[t];
    const c = counts[t];
    if (c + 2 > buf.length) {
      const nb = new Float64Array(buf.length * 2);
      nb.set(buf);
      scratch[t] = buf = nb;
    }
    buf[c] = x0;
    buf[c + 1] = x1 - x0;
    counts[t] = c + 2;
  };
  for (; i < hi; i++) {
    const s = d.start[i];
    if (s > v.to) break;
    const e = d.end[i];
    if (e < v.from) continue;
    stats.opsInView++;
    const t = d.tenant[i] % nT;
    const x0 = Math.max(-2, (s - v.from) * k), x1 = Math.min(plotW + 2, (e - v.from) * k);
    if (x1 - x0 >= 6) wide.push(i);
    if (d.borrowed[i]) borrowed.push(x0, x1);
    if (d.transfer[i] > 0) transfers.push(Math.max(-2, (s - d.transfer[i] - v.from) * k), x0);
    if (!Number.isNaN(curX0[t]) && x0 <= curX1[t] + 0.5) {
      if (x1 > curX1[t]) curX1[t] = x1;
    } else {
      if (!Number.isNaN(curX0[t])) push(t, curX0[t], curX1[t]);
      curX0[t] = x0;
      curX1[t] = x1;
    }
  }
  for (let t = 0; t < nT; t++) if (!Number.isNaN(curX0[t])) push(t, curX0[t], curX1[t]);
  for (let t = 0; t < nT; t++) {
    const c = counts[t];
    if (!c) continue;
    const buf = scratch[t];
    ctx.fillStyle = tenantColor(t);
    ctx.beginPath();
    for (let j = 0; j < c; j += 2) ctx.rect(GUTTER + buf[j], y + 3, Math.max(buf[j + 1], 0.75), h - 6);
    ctx.fill();
    stats.rects += c / 2;
  }
  // Borrowed ops (another tenant's operator in this GPU's idle slice) get a dark base line.
  if (borrowed.length) {
    ctx.fillStyle = '#111';
    ctx.beginPath();
    for (let j = 0; j < borrowed.length; j += 2) ctx.rect(GUTTER + borrowed[j], y + h - 3, Math.max(borrowed[j + 1] - borrowed[j], 0.75), 3);
    ctx.fill();
  }
  // Activation transfers before an op: a thin striped strip on top of the row.
  if (transfers.length) {
    ctx.fillStyle = '#1b1b1b';
    ctx.beginPath();
    for (let j = 0; j < transfers.length; j += 2) ctx.rect(GUTTER + transfers[j], y, Math.max(transfers[j + 1] - transfers[j], 0.75), 3);
    ctx.fill();
  }
  // Wide ops get borders and, when there is room, a label: the view is down to single operators.
  if (wide.length && wide.length < 4000) {
    ctx.strokeStyle = '#ffffffcc';
    ctx.lineWidth = 1;
    ctx.font = '10px system-ui, sans-serif';
    for (const j of wide) {
      const x0 = GUTTER + (d.start[j] - v.from) * k, x1 = GUTTER + (d.end[j] - v.from) * k;
      ctx.strokeRect(x0 + 0.5, y + 3.5, x1 - x0 - 1, h - 7);
      if (x1 - x0 > 44 && h >= 14) {
        ctx.fillStyle = '#fff';
        const label = `${d.kinds[d.kind[j]] ?? d.kind[j]}${d.layer[j] >= 0 ? ` L${d.layer[j]}` : ''}`;
        ctx.fillText(label, Math.max(x0, GUTTER) + 3, y + h / 2, x1 - Math.max(x0, GUTTER) - 6);
      }
    }
  }
}

function drawBucketRow(ctx: CanvasRenderingContext2D, d: BucketDataT, gpu: number, y: number, h: number, v: View,
  k: number, stats: DrawStats): void {
  if (gpu >= d.gpuCount) return;
  const lo = d.rowOff[gpu], hi = d.rowOff[gpu + 1];
  const first = lowerBound(d.t0, v.from - d.bucketNs, lo, hi);
  const last = lowerBound(d.t0, v.to, first, hi);
  const n = last - first;
  if (n <= 0) return;
  const inner = h - 4;
  const w = Math.max(d.bucketNs * k, 0.75);
  // Stacked per tenant (one path per tenant): the filled height is the bucket's busy
  // fraction, what stays hatched is idle.
  const base = new Float64Array(n).fill(y + h - 2);
  for (let t = 0; t < d.tenants; t++) {
    ctx.fillStyle = tenantColor(t);
    ctx.beginPath();
    let any = false;
    for (let j = 0; j < n; j++) {
      const i = first + j;
      const b = d.tenantBusy[i * d.tenants + t];
      if (!b) continue;
      const hh = Math.min(1, b / d.bucketNs) * inner;
      base[j] -= hh;
      ctx.rect(GUTTER + (d.t0[i] - v.from) * k, base[j], w, hh);
      stats.rects++;
      any = true;
    }
    if (any) ctx.fill();
  }
  stats.opsInView += n;
}

type BucketDataT = Extract<WindowData, { mode: 'buckets' }>;

/** The op under (x, y) in a track's ops data, if any. */
export function hitOp(d: OpsData, gpu: number, px: number, v: View, k: number): number {
  if (gpu >= d.gpuCount) return -1;
  const t = v.from + (px - GUTTER) / k;
  const tol = 2 / k;
  const lo = d.rowOff[gpu], hi = d.rowOff[gpu + 1];
  let best = -1, bestDist = Infinity;
  let i = lowerBound(d.start, t - d.maxDur[gpu] - tol, lo, hi);
  for (; i < hi && d.start[i] <= t + tol; i++) {
    if (d.end[i] + tol < t) continue;
    const mid = (d.start[i] + d.end[i]) / 2;
    const dist = t >= d.start[i] && t <= d.end[i] ? 0 : Math.abs(t - mid);
    if (dist < bestDist) { best = i; bestDist = dist; }
  }
  return best;
}
