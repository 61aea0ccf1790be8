// Admins start a replay (one policy) or a sweep (several policies, goodput per target).

import { api, ApiError } from '../api';
import { h } from '../dom';
import type { Run, Scenario } from '../types';
import { POLICIES } from './runs';

export function newRunForm(started: (r: Run) => void): HTMLElement {
  const details = h('details', { class: 'new-run' });
  const scenario = h('select', { name: 'scenario', required: true });
  const kind = h('select', { name: 'kind' }, h('option', { value: 'replay' }, 'replay'), h('option', { value: 'sweep' }, 'sweep'));
  const boxes = POLICIES.map((p) => h('input', { type: 'checkbox', name: 'policy', value: p, checked: p === 'slice' }));
  const rate = h('input', { type: 'number', name: 'rate_scale', min: '0.05', max: '64', step: '0.05', placeholder: '1' });
  const targets = h('input', { name: 'violation_targets', placeholder: '0.01,0.09' });
  const msg = h('p', { class: 'form-error', role: 'alert' });
  const form = h('form', { onsubmit: async (e: Event) => {
    e.preventDefault();
    const policies = boxes.filter((b) => b.checked).map((b) => b.value);
    if (!policies.length) { msg.textContent = 'Pick at least one policy.'; return; }
    if (kind.value === 'replay' && policies.length !== 1) { msg.textContent = 'A replay runs exactly one policy.'; return; }
    const body: Record<string, unknown> = { kind: kind.value, scenario: scenario.value };
    if (kind.value === 'replay') body.policy = policies[0];
    else body.policies = policies;
    if (rate.value) body.rate_scale = Number(rate.value);
    if (kind.value === 'sweep' && targets.value.trim()) {
      body.violation_targets = targets.value.split(',').map((t) => Number(t.trim()));
    }
    try {
      const run = await api<Run>('/runs', { method: 'POST', body: JSON.stringify(body) });
      msg.textContent = '';
      details.open = false;
      started(run);
    } catch (err) {
      msg.textContent = err instanceof ApiError ? `${err.title}${err.field ? ` (${err.field})` : ''}: ${err.detail}` : String(err);
    }
  } },
  h('label', null, 'Kind', kind),
  h('label', null, 'Scenario', scenario),
  h('fieldset', null, h('legend', null, 'Policies'), boxes.map((b) => h('label', { class: 'check' }, b, b.value))),
  h('label', null, 'Rate scale', rate),
  h('label', null, 'Violation targets (sweep)', targets),
  msg,
  h('button', { class: 'btn btn-primary', type: 'submit' }, 'Start'));
  details.append(h('summary', { class: 'btn btn-primary' }, 'New run'), form);
  details.addEventListener('toggle', async () => {
    if (!details.open || scenario.options.length) return;
    try {
      const list = await api<Scenario[] | { items: Scenario[] }>('/scenarios');
      const items = Array.isArray(list) ? list : list.items;
      for (const s of items) {
        const name = typeof s === 'string' ? s : s.name;
        scenario.append(h('option', { value: name }, name));
      }
    } catch (err) {
      msg.textContent = `Could not list scenarios: ${err instanceof ApiError ? err.title : err}`;
    }
  });
  return details;
}
