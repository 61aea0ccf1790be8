// The panels of a run's detail page, each from one part of the API's answer.

import { histogram, meter } from '../charts/bars';
import { busyHeat } from '../charts/heat';
import { lineChart } from '../charts/line';
import { h } from '../dom';
import { ms, num, pct, shortDur, tokPerS } from '../format';
import { tenantColor } from '../palette';
import type { LatencyHistogram, RunLatency, Series, Summary } from '../types';
import { table } from '../ui';

/** The run's per-second counters summed into at most ~300 windows (a long run has
 *  thousands of buckets): rates per second of the window, violations per completion. */
export function windows(s: Series, maxPoints = 300, fixedPer?: number) {
  const b = s.bucket_s || 1;
  const n = seriesLength(s);
  // Charts overlaid on one axis pass one window size for every run.
  const per = fixedPer ?? Math.max(1, Math.ceil(n / maxPoints));
  const m = Math.ceil(n / per);
  const sum = (v: number[] | undefined, w: number) => {
    let t = 0;
    for (let i = w * per; i < Math.min(n, (w + 1) * per); i++) t += v?.[i] ?? 0;
    return t;
  };
  // x is the window's middle, so a window's point sits over the time it describes.
  const span = (w: number) => (Math.min(n, (w + 1) * per) - w * per) * b;
  const x = Array.from({ length: m }, (_, w) => w * per * b + span(w) / 2);
  const rate = (v: number[] | undefined) => x.map((_, w) => sum(v, w) / span(w));
  const viol = x.map((_, w) => {
    const c = sum(s.completed, w);
    return c ? sum(s.violations, w) / c : NaN;
  });
  return { n, per, x, end: n * b, windowS: per * b, output: rate(s.output_tokens), prompt: rate(s.prompt_tokens), viol };
}

export function seriesLength(s: Series): number {
  return Math.max(s.output_tokens?.length ?? 0, s.prompt_tokens?.length ?? 0, s.completed?.length ?? 0);
}

/** Violation targets as dashed lines: the run's or sweep's own, else none (never a guess). */
export function targetLines(targets: number[] | null | undefined) {
  return (targets ?? []).map((t) => ({ y: t, label: `target ${pct(t, t < 0.1 ? 0 : 1)}` }));
}

/** The time axis of a run's series: a replay's is simulated, a live run's is the wall clock. */
export function timeAxisLabel(kinds: string[]): string {
  const live = kinds.filter((k) => k === 'live').length;
  if (!live) return 'simulated time (s)';
  return live === kinds.length ? 'time since the cluster started (s)' : 'time from each run’s start (s): simulated for replays, served for live runs';
}

export function seriesCharts(s: Series, o: { targets?: number[] | null; live?: boolean } = {}): HTMLElement[] {
  const w = windows(s);
  if (!w.n) return [h('p', { class: 'hint' }, 'This run stored no time series.')];
  const window = w.per > 1 ? ` (${w.windowS} s windows)` : '';
  // Every time chart on the page shares one axis: 0 to the end of the series.
  const axis = { xLabel: timeAxisLabel([o.live ? 'live' : 'replay']), xMin: 0, xMax: w.end };
  const vmax = Math.max(0.1, ...w.viol.filter(Number.isFinite), ...(o.targets ?? [])) * 1.05;
  const out: (HTMLDivElement | null)[] = [
    // Prompt tokens/s is often ten times output tokens/s: each gets its own scale.
    h('div', { class: 'span2', 'data-testid': 'chart-throughput' }, h('h3', null, `Output tokens/s${window}`), lineChart([
      { name: 'output tokens/s', color: '#e15759', x: w.x, y: w.output },
    ], { ...axis, yLabel: 'output tokens/s', name: 'output tokens per second', height: 180 })),
    h('div', { class: 'span2', 'data-testid': 'chart-prompt' }, h('h3', null, `Prompt tokens/s${window}`), lineChart([
      { name: 'prompt tokens/s', color: '#4e79a7', x: w.x, y: w.prompt },
    ], { ...axis, yLabel: 'prompt tokens/s', name: 'prompt tokens per second', height: 180 })),
    h('div', { class: 'span2', 'data-testid': 'chart-violations' }, h('h3', null, `SLA violation rate${window}`), lineChart([
      { name: 'violations / completions', color: '#b07aa1', x: w.x, y: w.viol },
    ], { ...axis, yLabel: 'violation rate', yMax: vmax, name: 'violation rate over time',
      yFormat: (v) => `${+(v * 100).toFixed(1)}%`, hlines: targetLines(o.targets) })),
    s.gpu_busy_ns?.length ? h('div', { class: 'span2', 'data-testid': 'chart-gpu-busy' }, h('h3', null, 'GPU busy over time'),
      busyHeat(s.gpu_busy_ns, s.bucket_s || 1, { xMax: w.end })) : null,
  ];
  return out.filter((x): x is HTMLDivElement => x !== null);
}

/** The whole run's latency histograms (every request, binned in SQL by the service). */
export function distributions(l: RunLatency): HTMLElement[] {
  const pcts = (x: LatencyHistogram) => `p50 ${ms(x.p50_ms)}, p90 ${ms(x.p90_ms)}, p99 ${ms(x.p99_ms)}`;
  const note = h('p', { class: 'hint', 'data-testid': 'latency-note' },
    `Every one of the run’s ${num(l.requests)} requests (a one-token answer has no TPOT; dropped requests have neither). `,
    `TTFT ${pcts(l.ttft_ms)}; TPOT ${pcts(l.tpot_ms)}; end to end ${pcts(l.e2e_ms)}.`);
  return [
    h('div', { 'data-testid': 'chart-ttft', 'data-count': l.ttft_ms.count },
      h('h3', null, 'Time to first token'), logHistogram(l.ttft_ms, 'TTFT', '#4e79a7', l.bins_per_decade)),
    h('div', { 'data-testid': 'chart-tpot', 'data-count': l.tpot_ms.count },
      h('h3', null, 'Time per output token'), logHistogram(l.tpot_ms, 'TPOT', '#f28e2b', l.bins_per_decade)),
    h('div', { class: 'span2' }, note),
  ];
}

/** Latencies span decades, so the service bins them log-spaced; p50/p90/p99 marked. */
function logHistogram(x: LatencyHistogram, name: string, color: string, perDecade: number): HTMLElement {
  if (!x.count || !x.counts.length) return h('p', { class: 'hint' }, `No completed requests with a ${name}.`);
  const every = Math.max(1, Math.ceil(x.counts.length / 8));
  const marks = [x.p50_ms, x.p90_ms, x.p99_ms];
  return histogram(x.counts.map((c, i) => {
    const lo = x.edges_ms[i], hi = x.edges_ms[i + 1];
    const holds = marks.map((m, k) => (m !== null && m >= lo && m < hi ? ['p50', 'p90', 'p99'][k] : '')).filter(Boolean);
    return { label: shortDur(lo * 1e6), value: c, color: holds.length ? '#59a14f' : color,
      title: `${ms(lo)}–${ms(hi)}: ${num(c)} requests${holds.length ? ` (${holds.join(', ')})` : ''}` };
  }), { xLabel: `${name} (ms, ${perDecade} log bins per decade; green: p50/p90/p99 bins)`, yLabel: 'requests', every });
}

/** 'over' above the loosest target, 'ok' under the strictest; uncoloured without targets. */
export function targetClass(v: number, targets: number[] | null | undefined): string {
  if (!targets?.length) return '';
  return v > Math.max(...targets) ? 'over' : v <= Math.min(...targets) ? 'ok' : '';
}

export function tenantTable(s: Summary, targets?: number[] | null): HTMLElement {
  // Red where a percentile exceeds the target; a TTFT target that grows with the prompt
  // has no single value to hold a percentile to, so those stay uncoloured.
  const over = (v: number, target: number, fixed = true) =>
    h('span', { class: !fixed ? '' : target > 0 && v > target ? 'over' : 'ok', title: target > 0 ? `target ${ms(target)}` : '' }, ms(v));
  return table(
    ['Tenant', 'Model', 'GPUs', 'Requests', 'Violations', 'TTFT p50 / p99', 'TTFT target', 'TPOT p50 / p99', 'TPOT target', 'Output'],
    s.tenants.map((t, i) => [
      h('span', { class: 'swatch-name' }, h('i', { class: 'swatch', style: { background: tenantColor(i) } }), t.name),
      t.model, (t.gpus ?? []).join(', '), `${num(t.completed)} / ${num(t.requests)}`,
      h('span', { class: targetClass(t.violation_rate, targets) }, pct(t.violation_rate)),
      h('span', null, over(t.ttft_p50_ms, t.sla_ttft_ms, !t.sla_ttft_ms_per_1k), ' / ', over(t.ttft_p99_ms, t.sla_ttft_ms, !t.sla_ttft_ms_per_1k)),
      t.sla_ttft_ms_per_1k ? `${ms(t.sla_ttft_ms)} + ${ms(t.sla_ttft_ms_per_1k)}/1k prompt` : ms(t.sla_ttft_ms),
      h('span', null, over(t.tpot_p50_ms, t.sla_tpot_ms), ' / ', over(t.tpot_p99_ms, t.sla_tpot_ms)),
      ms(t.sla_tpot_ms), tokPerS(t.output_tokens_per_s),
    ]), 'tenants');
}

/** Upper edge of idle-gap bucket b in ns (metrics.rs: 1 µs × 10^(b/10)). */
const gapEdgeNs = (b: number) => 1000 * 10 ** (b / 10);

export function gpuPanel(s: Summary): HTMLElement {
  const hist = h('div', { 'data-testid': 'gap-histogram' });
  const choose = h('select', { id: 'gap-gpu', 'aria-label': 'GPU for the idle-gap histogram',
    onchange: () => draw(Number(choose.value)) }, s.gpus.map((g) => h('option', { value: g.gpu }, `GPU ${g.gpu}`)));
  const draw = (gpu: number) => {
    const g = s.gpus.find((x) => x.gpu === gpu);
    hist.replaceChildren();
    if (!g?.gap_histogram) return;
    const idle = g.gap_histogram.idle_ns;
    // Trim empty decades on both ends so the bars that matter are wide enough to read.
    let a = idle.findIndex((v) => v > 0), b = idle.length - 1;
    while (b > a && !idle[b]) b--;
    if (a < 0) { hist.append(h('p', { class: 'hint' }, 'No idle gaps on this GPU.')); return; }
    a = Math.max(0, a - 1);
    hist.append(histogram(idle.slice(a, b + 1).map((v, i) => ({
      label: (a + i) % 10 === 0 ? shortDur(gapEdgeNs(a + i)) : '', value: v / 1e6, color: '#9c755f',
      title: `gaps ≤ ${ms(gapEdgeNs(a + i) / 1e6, 3)}: ${g.gap_histogram.count[a + i]} gaps, ${ms(v / 1e6)} idle`,
    })), { xLabel: 'idle gap length (upper edge, 10 bins per decade)', yLabel: 'idle time (ms)', every: 1, width: 760 }));
  };
  const rows = s.gpus.map((g) => [
    `GPU ${g.gpu}`, g.sku, meter(g.busy_fraction), `${num(g.busy_s)} s`,
    g.busy_s ? pct(g.guest_busy_s / g.busy_s) : '–', num(g.idle_gaps),
    `${ms(g.idle_gap_p50_ms, 3)} / ${ms(g.idle_gap_p90_ms, 3)}`, `${num(g.peak_memory_gb)} / ${num(g.capacity_gb)} GB`,
    String(g.oom_events),
  ]);
  const wrap = h('div', null,
    table(['GPU', 'SKU', 'Busy', 'Busy time', 'Borrowed share', 'Idle gaps', 'Gap p50 / p90', 'Peak memory', 'OOM'], rows, 'gpus'),
    h('div', { class: 'gap-box' }, h('h3', null, 'Idle time by gap length on ', choose), hist));
  if (s.gpus.length) draw(s.gpus[0].gpu);
  return wrap;
}
