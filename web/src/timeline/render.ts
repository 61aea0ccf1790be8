// Canvas drawing of timeline tracks. Cost is bounded by pixels, not by ops: sub-pixel
// ops of one tenant that touch are merged into one rectangle, and rectangles are filled
// per tenant in one path, so 200k ops in view cost a walk over typed arrays and a few
// thousand rect() calls.

import { tenantColor, tenantRgba } from '../palette';
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

let unrecPattern: CanvasPattern | null = null;
function unrecordedFill(ctx: CanvasRenderingContext2D): CanvasPattern | string {
  if (!unrecPattern) {
    const c = document.createElement('canvas');
    c.width = c.height = 10;
    const g = c.getContext('2d')!;
    g.fillStyle = '#e4e7ee';
    g.fillRect(0, 0, 10, 10);
    g.fillStyle = '#c9cfdb';
    g.fillRect(0, 0, 5, 5);
    g.fillRect(5, 5, 5, 5);
    unrecPattern = ctx.createPattern(c, 'repeat');
  }
  return unrecPattern ?? '#e4e7ee';
}

/** Covers the parts of a row outside `recorded` with the "not recorded" pattern. */
function unrecorded(ctx: CanvasRenderingContext2D, recorded: [number, number][], y: number, h: number, v: View,
  k: number, plotW: number): void {
  const spans = [...recorded].sort((a, b) => a[0] - b[0]);
  let t = v.from;
  ctx.fillStyle = unrecordedFill(ctx);
  const gap = (a: number, b: number) => {
    const x0 = GUTTER + Math.max(0, (a - v.from) * k), x1 = GUTTER + Math.min(plotW, (b - v.from) * k);
    if (x1 - x0 > 0.5) ctx.fillRect(x0, y, x1 - x0, h);
  };
  for (const [a, b] of spans) {
    if (b <= t) continue;
    if (a > t) gap(t, Math.min(a, v.to));
    t = Math.max(t, b);
    if (t >= v.to) return;
  }
  if (t < v.to) gap(t, v.to);
}

/** Whether [from, to] is wholly inside the recorded spans. */
export function covers(recorded: [number, number][], from: number, to: number): boolean {
  let t = from;
  for (const [a, b] of [...recorded].sort((x, y) => x[0] - y[0])) {
    if (a > t) return false;
    t = Math.max(t, b);
    if (t >= to) return true;
  }
  return t >= to;
}

export interface DrawStats { opsInView: number; rects: number; borrowedInView: number }

export function draw(ctx: CanvasRenderingContext2D, width: number, lay: Layout, tracks: Track[], v: View): DrawStats {
  const stats: DrawStats = { opsInView: 0, rects: 0, borrowedInView: 0 };
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, width, lay.height);
  const plotW = width - GUTTER;
  const k = plotW / (v.to - v.from);
  axisLabels(ctx, width, v, k);
  tracks.forEach((t, ti) => {
    const tl = lay.tracks[ti];
    ctx.fillStyle = '#222';
    ctx.font = '600 12px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    const status = t.error ? ` — ${t.error}` : t.loading ? ' — loading…' : t.data?.mode === 'buckets'
      ? ` — busy time in ${dur(t.data.bucketNs)} buckets (single operators inside recorded windows)`
      : t.data?.mode === 'ops' ? ' — every operator (recorded window)' : '';
    ctx.fillText(`${t.label}${status}`, 4, tl.y + TITLE_H / 2);
    for (const r of tl.rows) {
      ctx.fillStyle = '#444';
      ctx.font = '11px system-ui, sans-serif';
      ctx.fillText(`GPU ${r.gpu}`, 4, r.y + lay.rowH / 2);
      if (t.data?.mode !== 'ops') {
        ctx.fillStyle = idleFill(ctx);
        ctx.fillRect(GUTTER, r.y, plotW, lay.rowH);
      }
      if (!t.data) {
        unrecorded(ctx, [], r.y, lay.rowH, v, k, plotW);
        continue;
      }
      ctx.save();
      ctx.beginPath();
      ctx.rect(GUTTER, r.y, plotW, lay.rowH);
      ctx.clip();
      if (t.data.mode === 'ops') drawOpsRow(ctx, t.data, r.gpu, r.y, lay.rowH, v, k, plotW, t.tenants.length, stats);
      else drawBucketRow(ctx, t.data, r.gpu, r.y, lay.rowH, v, k, stats);
      // What the data does not cover is not idle: it is unknown (not recorded, after
      // the run's end, or not fetched yet) and drawn so.
      unrecorded(ctx, t.data.recorded, r.y, lay.rowH, v, k, plotW);
      ctx.restore();
    }
  });
  gridLines(ctx, width, lay.height, v, k);
  return stats;
}

function axisStep(width: number, v: View): number {
  const raw = (v.to - v.from) / Math.max(2, Math.floor((width - GUTTER) / 110));
  const mag = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
}

function gridLines(ctx: CanvasRenderingContext2D, width: number, height: number, v: View, k: number): void {
  const step = axisStep(width, v);
  ctx.fillStyle = '#00000014';
  for (let t = Math.ceil(v.from / step) * step; t <= v.to; t += step) {
    ctx.fillRect(Math.round(GUTTER + (t - v.from) * k), AXIS_H, 1, height - AXIS_H);
  }
}

/** A tick's time in the unit of the view's extent, with just enough decimals to tell ticks apart. */
function tickLabel(t: number, step: number, end: number): string {
  const [unit, div] = end >= 1e9 ? ['s', 1e9] : end >= 1e6 ? ['ms', 1e6] : end >= 1e3 ? ['µs', 1e3] : ['ns', 1];
  const decimals = Math.max(0, -Math.floor(Math.log10(step / div) + 1e-9));
  return `${(t / div).toFixed(decimals)} ${unit}`;
}

function axisLabels(ctx: CanvasRenderingContext2D, width: number, v: View, k: number): void {
  const step = axisStep(width, v);
  ctx.font = '11px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  ctx.textAlign = 'center';
  ctx.fillStyle = '#555';
  for (let t = Math.ceil(v.from / step) * step; t <= v.to; t += step) ctx.fillText(tickLabel(t, step, v.to), GUTTER + (t - v.from) * k, AXIS_H / 2);
  ctx.textAlign = 'start';
}

// Per-column scratch of one row, reused across rows and frames.
let colTenant = new Int32Array(0), colBest = new Float32Array(0), colCover = new Float32Array(0);
let colMark = new Uint8Array(0);
const MARK_BORROWED = 1, MARK_TRANSFER = 2;

/**
 * Ops are rasterised per pixel column: each column takes the colour of the tenant that
 * covers most of it, blended with the idle hatch by how much of the column is busy. So
 * a zoomed-out view shows density (sparse = pale, idle = hatched) and the cost is one
 * pass over the ops in view plus one putImageData per row, whatever their number.
 */
function drawOpsRow(ctx: CanvasRenderingContext2D, d: OpsData, gpu: number, y: number, h: number, v: View, k: number,
  plotW: number, _tenants: number, stats: DrawStats): void {
  if (gpu >= d.gpuCount) return;
  const dpr = ctx.getTransform().a || 1;
  const W = Math.max(1, Math.round(plotW * dpr));
  const kd = k * dpr;
  if (colTenant.length < W) {
    colTenant = new Int32Array(W); colBest = new Float32Array(W); colCover = new Float32Array(W); colMark = new Uint8Array(W);
  }
  colTenant.fill(-1, 0, W); colBest.fill(0, 0, W); colCover.fill(0, 0, W); colMark.fill(0, 0, W);
  const lo = d.rowOff[gpu], hi = d.rowOff[gpu + 1];
  let i = lowerBound(d.start, v.from - d.maxDur[gpu], lo, hi);
  const wide: number[] = [];
  for (; i < hi; i++) {
    const s = d.start[i];
    if (s > v.to) break;
    const e = d.end[i];
    if (e < v.from) continue;
    stats.opsInView++;
    const x0 = (s - v.from) * kd, x1 = (e - v.from) * kd;
    if ((x1 - x0) / dpr >= 6) wide.push(i);
    const c0 = Math.max(0, Math.floor(x0)), c1 = Math.min(W - 1, Math.ceil(x1) - 1);
    const t = d.tenant[i];
    const mark = d.borrowed[i] ? MARK_BORROWED : 0;
    if (mark) stats.borrowedInView++;
    for (let c = c0; c <= c1; c++) {
      const ov = Math.min(x1, c + 1) - Math.max(x0, c);
      if (ov <= 0) continue;
      colCover[c] += ov;
      if (ov > colBest[c]) { colBest[c] = ov; colTenant[c] = t; }
      colMark[c] |= mark;
    }
    if (d.transfer[i] > 0) {
      const t0 = Math.max(0, Math.floor((s - d.transfer[i] - v.from) * kd)), t1 = Math.min(W - 1, Math.floor(x0));
      for (let c = t0; c <= t1; c++) colMark[c] |= MARK_TRANSFER;
    }
  }
  const H = Math.max(1, Math.round(h * dpr));
  const img = ctx.createImageData(W, H);
  const px = new Uint32Array(img.data.buffer);
  const pad = Math.round(3 * dpr), strip = Math.max(1, Math.round(2 * dpr));
  const y0 = Math.round(y * dpr);
  for (let c = 0; c < W; c++) {
    const t = colTenant[c];
    // Even a sliver of work stays visible: coverage maps to 35..100 % opacity.
    const a = t < 0 ? 0 : Math.min(1, 0.35 + 0.65 * Math.min(1, colCover[c]));
    const rgb = t < 0 ? 0 : tenantRgb(t);
    const m = colMark[c];
    for (let r = 0; r < H; r++) {
      const hatch = (c + r + y0) % 8 === 0;
      let col = hatch ? IDLE_DARK : IDLE_LIGHT;
      if (a > 0 && r >= pad && r < H - pad) col = blend(col, rgb, a);
      if (m & MARK_TRANSFER && r >= 1 && r < 1 + strip) col = TRANSFER;
      if (m & MARK_BORROWED && r >= H - pad && r < H - pad + strip) col = BORROWED;
      px[r * W + c] = col;
    }
  }
  stats.rects += W;
  ctx.putImageData(img, Math.round(GUTTER * dpr), y0);
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

// Packed little-endian ABGR pixels for ImageData.
const abgr = (r: number, g: number, b: number) => ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
const IDLE_LIGHT = abgr(0xf3, 0xf3, 0xf1), IDLE_DARK = abgr(0xd6, 0xd6, 0xd0);
const TRANSFER = abgr(0x1b, 0x1b, 0x1b), BORROWED = abgr(0x10, 0x10, 0x10);
const rgbCache: number[] = [];
function tenantRgb(t: number): number {
  return (rgbCache[t] ??= tenantRgba(t) >>> 0);
}
function blend(bg: number, fg: number, a: number): number {
  const r = (bg & 255) * (1 - a) + (fg & 255) * a;
  const g = ((bg >>> 8) & 255) * (1 - a) + ((fg >>> 8) & 255) * a;
  const b = ((bg >>> 16) & 255) * (1 - a) + ((fg >>> 16) & 255) * a;
  return abgr(r | 0, g | 0, b | 0);
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
  // Borrowed busy time: the dark base line ops mode draws under borrowed ops.
  ctx.fillStyle = '#101010';
  ctx.beginPath();
  let borrowed = false;
  for (let j = 0; j < n; j++) {
    const i = first + j;
    if (!d.borrowed[i]) continue;
    ctx.rect(GUTTER + (d.t0[i] - v.from) * k, y + h - 3, w, 2);
    stats.borrowedInView++;
    borrowed = true;
  }
  if (borrowed) ctx.fill();
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
