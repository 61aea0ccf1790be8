// Runs picked in the runs list for Compare: kept while the user pages, filters and the
// list polls, and turned into a link (#/compare?runs=a,b,c) that can be shared.

import { h } from '../dom';
import { shortId } from '../format';
import type { Run } from '../types';

/** Selected run id → its scenario and label; module-level so a reload of the list keeps it. */
const picked = new Map<string, { scenario: string; label: string }>();

export function compareHref(ids: string[]): string {
  return `#/compare?runs=${ids.map(encodeURIComponent).join(',')}`;
}

/** Only finished replays can be compared (a sweep compares its own policies). */
export function selectBox(r: Run, changed: () => void): HTMLElement | null {
  if (r.kind !== 'replay' || r.status !== 'succeeded') return null;
  const id = String(r.id);
  return h('input', { type: 'checkbox', class: 'pick', checked: picked.has(id), 'data-pick': id,
    'aria-label': `Select run ${shortId(r.id)} (${r.scenario}, ${(r.policies ?? []).join(', ')}) to compare`,
    onchange: (e: Event) => {
      if ((e.target as HTMLInputElement).checked) picked.set(id, { scenario: r.scenario, label: `${shortId(r.id)} ${(r.policies ?? []).join(', ')}` });
      else picked.delete(id);
      changed();
    } });
}

export function selectionBar(): { el: HTMLElement; changed: () => void } {
  const el = h('div', { class: 'selection-bar', 'data-testid': 'selection-bar', role: 'region', 'aria-label': 'Selected runs' });
  const changed = () => {
    const ids = [...picked.keys()];
    const scenarios = new Set([...picked.values()].map((p) => p.scenario));
    const ok = ids.length >= 2 && scenarios.size === 1;
    const why = ids.length < 2 ? 'Select two or more finished replays of one scenario to compare them.'
      : scenarios.size > 1 ? `Runs of different scenarios (${[...scenarios].join(', ')}) are not comparable: keep one scenario.`
        : `${ids.length} replays of ${[...scenarios][0]}.`;
    el.replaceChildren(...[
      ok ? h('a', { class: 'btn btn-primary', href: compareHref(ids), 'data-testid': 'compare-selected' }, `Compare ${ids.length} runs`)
        : h('button', { type: 'button', class: 'btn', disabled: true, 'data-testid': 'compare-selected' }, 'Compare'),
      h('span', { class: 'hint', 'aria-live': 'polite' }, why),
      ids.length ? h('button', { type: 'button', class: 'btn btn-small', onclick: () => {
        picked.clear();
        document.querySelectorAll<HTMLInputElement>('input.pick').forEach((b) => { b.checked = false; });
        changed();
      } }, 'Clear selection') : null].filter((x): x is HTMLElement => !!x));
  };
  changed();
  return { el, changed };
}
