// How a run ran, in words every page uses the same way: its scenario, policy as
// resolved (version, Wasm or native), rate scale and, when its plugin failed, that the
// fallback decided part of it.

import type { Run, Summary } from './types';

/** "1×", "0.5×" — a replay's arrival-rate multiplier (null: 1×). */
export function rateLabel(run: Run): string | null {
  if (run.kind !== 'replay') return null;
  const s = run.params?.rate_scale ?? run.rate_scale ?? 1;
  return `${+s.toPrecision(4)}×`;
}

/** "draw 2": a replay of another draw than the scenario's own; "3 draws": a sweep whose
 * every point pooled that many. Two runs alike in all else differ here. */
export function drawLabel(run: Run): string | null {
  const p = run.params;
  if (run.kind === 'replay' && p?.draw) return `draw ${p.draw}`;
  if (run.kind === 'sweep' && p?.seeds && p.seeds > 1) return `${p.seeds} draws`;
  return null;
}

/** "smoke · slice 0.3.0 (wasm) · 0.5×"; a trial: "smoke · mine 0.1.0 (wasm, trial) · 1×";
 * another draw: "smoke · slice 0.3.0 (wasm) · 1× · draw 2" */
export function runLabel(run: Run): string {
  const resolved = run.params?.policies ?? [];
  const policies = resolved.length
    ? resolved.map((p) => `${p.name} ${p.version} (${p.kind}${p.trial ? ', trial' : ''})`).join(', ')
    : (run.policies ?? []).join(', ');
  const parts = [run.scenario, policies, rateLabel(run), drawLabel(run)].filter(Boolean);
  return parts.join(' · ') + (run.fallback ? ' · fallback' : '');
}

/** "succeeded with fallback: dedicated took 1,234 of 5,678 decisions (quarantined)". */
export function fallbackText(run: Run): string | null {
  const f = run.fallback;
  if (!f) return null;
  const why = f.quarantined ? `quarantined after ${f.failures} failures` : `${f.failures} failed calls`;
  const total = run.kind === 'replay' ? (run.summary as Summary | null)?.scheduling?.decisions : undefined;
  const of = total ? ` of ${total.toLocaleString('en-US')}` : '';
  return `${f.plugin} ${f.version} ${why}: ${f.policy} took ${f.decisions.toLocaleString('en-US')}${of} decisions`;
}
