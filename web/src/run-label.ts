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

/** "smoke · slice 0.3.0 (wasm) · 0.5×"; a trial: "smoke · mine 0.1.0 (wasm, trial) · 1×" */
export function runLabel(run: Run): string {
  const resolved = run.params?.policies ?? [];
  const policies = resolved.length
    ? resolved.map((p) => `${p.name} ${p.version} (${p.kind}${p.trial ? ', trial' : ''})`).join(', ')
    : (run.policies ?? []).join(', ');
  const parts = [run.scenario, policies, rateLabel(run)].filter(Boolean);
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
