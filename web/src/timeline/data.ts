// Timeline windows in typed arrays, ops sorted by (GPU, start) so that drawing a view
// is a binary search per row plus a linear walk over the ops in view.

import type { TimelineWindow } from '../types';

export interface OpsData {
  mode: 'ops';
  n: number;
  from: number; to: number;
  gpuCount: number;
  /** Ops of GPU g are indices rowOff[g] .. rowOff[g+1]. */
  rowOff: Uint32Array;
  /** Longest op per GPU: how far before a view's start a visible op may begin. */
  maxDur: Float64Array;
  start: Float64Array; end: Float64Array; tenant: Uint16Array; kind: Uint16Array;
  layer: Int32Array; predicted: Float64Array; transfer: Float64Array; borrowed: Uint8Array;
  prefill: Int32Array; decodes: Int32Array;
  kinds: string[];
  /** Spans this data covers; elsewhere nothing is known (drawn as not recorded, never idle). */
  recorded: [number, number][];
}

export interface BucketData {
  mode: 'buckets';
  from: number; to: number;
  gpuCount: number;
  bucketNs: number;
  rowOff: Uint32Array;
  t0: Float64Array; busy: Float64Array;
  /** tenantBusy[i * tenants + t]: busy ns of tenant t in bucket i. */
  tenantBusy: Float64Array;
  tenants: number;
  /** Of busy, ns of ops that ran in another tenant's slice (borrowed). */
  borrowed: Float64Array;
  recorded: [number, number][];
}

export type WindowData = OpsData | BucketData;

/** Turns the API's columnar answer into sorted typed arrays. */
export function fromApi(w: TimelineWindow, from: number, to: number, gpuCount: number, tenants: number): WindowData {
  if (w.mode === 'buckets') {
    const b = w.buckets;
    const n = b.gpu.length;
    const order = sortedOrder(n, b.gpu, b.t0_ns);
    const t0 = new Float64Array(n), busy = new Float64Array(n), tb = new Float64Array(n * tenants);
    const borrowed = new Float64Array(n);
    const gpu = new Uint16Array(n);
    order.forEach((j, i) => {
      gpu[i] = b.gpu[j]; t0[i] = b.t0_ns[j]; busy[i] = b.busy_ns[j]; borrowed[i] = b.borrowed_ns?.[j] ?? 0;
      const row = b.tenant_busy_ns?.[j] ?? [];
      for (let t = 0; t < tenants; t++) tb[i * tenants + t] = row[t] ?? 0;
    });
    return { mode: 'buckets', from, to, gpuCount, bucketNs: w.bucket_ns, rowOff: offsets(gpu, gpuCount), t0, busy,
      tenantBusy: tb, tenants, borrowed, recorded: w.recorded ?? [[from, to]] };
  }
  const o = w.ops;
  const n = o.gpu.length;
  const kinds: string[] = o.kinds ? [...o.kinds] : [];
  const kindIx = new Map(kinds.map((k, i) => [k, i]));
  const order = sortedOrder(n, o.gpu, o.start_ns);
  const d = allocOps(n, gpuCount, from, to, kinds);
  const gpu = new Uint16Array(n);
  for (let i = 0; i < n; i++) {
    const j = order[i];
    gpu[i] = o.gpu[j];
    d.start[i] = o.start_ns[j]; d.end[i] = o.end_ns[j]; d.tenant[i] = o.tenant[j];
    const k = o.kind[j];
    if (typeof k === 'number') d.kind[i] = k;
    else {
      let ix = kindIx.get(k);
      if (ix === undefined) { ix = kinds.length; kinds.push(k); kindIx.set(k, ix); }
      d.kind[i] = ix;
    }
    d.layer[i] = o.layer?.[j] ?? -1; d.predicted[i] = o.predicted_ns?.[j] ?? 0; d.transfer[i] = o.transfer_ns?.[j] ?? 0;
    d.borrowed[i] = o.borrowed?.[j] ? 1 : 0; d.prefill[i] = o.prefill_tokens?.[j] ?? 0; d.decodes[i] = o.decodes?.[j] ?? 0;
  }
  finishOps(d, gpu);
  d.recorded = w.recorded ?? [[from, to]];
  return d;
}

export function allocOps(n: number, gpuCount: number, from: number, to: number, kinds: string[]): OpsData {
  return { mode: 'ops', n, from, to, gpuCount, rowOff: new Uint32Array(gpuCount + 1), maxDur: new Float64Array(gpuCount),
    start: new Float64Array(n), end: new Float64Array(n), tenant: new Uint16Array(n), kind: new Uint16Array(n),
    layer: new Int32Array(n), predicted: new Float64Array(n), transfer: new Float64Array(n), borrowed: new Uint8Array(n),
    prefill: new Int32Array(n), decodes: new Int32Array(n), kinds, recorded: [[from, to]] };
}

/** Fills the per-GPU offsets and longest op; `gpu` is sorted. */
export function finishOps(d: OpsData, gpu: Uint16Array): void {
  d.rowOff = offsets(gpu, d.gpuCount);
  for (let i = 0; i < d.n; i++) {
    const g = gpu[i];
    const len = d.end[i] - d.start[i];
    if (len > d.maxDur[g]) d.maxDur[g] = len;
  }
}

function sortedOrder(n: number, gpu: ArrayLike<number>, t: ArrayLike<number>): Uint32Array {
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  // Servers usually answer sorted already; skip the sort when they did.
  let sorted = true;
  for (let i = 1; i < n && sorted; i++) {
    if (gpu[i] < gpu[i - 1] || (gpu[i] === gpu[i - 1] && t[i] < t[i - 1])) sorted = false;
  }
  if (!sorted) order.sort((a, b) => gpu[a] - gpu[b] || t[a] - t[b]);
  return order;
}

function offsets(gpu: Uint16Array, gpuCount: number): Uint32Array {
  const off = new Uint32Array(gpuCount + 1);
  for (let i = 0; i < gpu.length; i++) off[gpu[i] + 1]++;
  for (let g = 0; g < gpuCount; g++) off[g + 1] += off[g];
  return off;
}

/** First index in [lo, hi) whose value in `a` is ≥ x. */
export function lowerBound(a: Float64Array, x: number, lo: number, hi: number): number {
  while (lo < hi) {
    const m = (lo + hi) >>> 1;
    if (a[m] < x) lo = m + 1;
    else hi = m;
  }
  return lo;
}
