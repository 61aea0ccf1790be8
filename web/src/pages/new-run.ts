// Admins start a replay (one policy) or a sweep (several policies, goodput per target).
// The policies offered are the service's active ones (GET /plugins): shipped, built in,
// and uploaded components an admin activated.

import { api, ApiError } from '../api';
import { h } from '../dom';
import type { Run, Scenario } from '../types';
import { activePolicies } from './policies';

export function newRunForm(started: (r: Run) => void): HTMLElement {
  const details = h('details', { class: 'new-run' });
  const scenario = h('select', { name: 'scenario', required: true });
  const kind = h('select', { name: 'kind' }, h('option', { value: 'replay' }, 'replay'), h('option', { value: 'sweep' }, 'sweep'));
  let boxes: HTMLInputElement[] = [];
  const policyBox = h('fieldset', { 'data-testid': 'policy-choices' }, h('legend', null, 'Policies'), h('span', { class: 'hint' }, 'Loading policies…'));
  const rate = h('input', { type: 'number', name: 'rate_scale', min: '0.05', max: '64', step: '0.05', placeholder: '1' });
  const targets = h('input', { name: 'violation_targets', placeholder: '0.01,0.09' });
  // At a 1% target a few bursts decide one draw's answer; several draws judge a point on
  // all their requests together, at as many times the replays.
  const draws = h('input', { type: 'number', name: 'seeds', min: '1', max: '8', step: '1', placeholder: '1' });
  // One of those draws alone, by its index (its seed is past what a JS number holds).
  const draw = h('input', { type: 'number', name: 'draw', min: '0', max: '1000000', step: '1', placeholder: '0' });
  // The core's modes (README: "KV that moves", "Copies that come and go"); the defaults
  // are sent as nothing, so the run records the service's defaults.
  const option = (v: string, label: string) => h('option', { value: v }, label);
  const kvMigration = h('select', { name: 'kv_migration' }, option('off', 'off (default)'),
    option('memory', 'memory: when a queue waits for KV'), option('load', 'load: also to shed an instance behind'));
  const replan = h('select', { name: 'replan' }, option('static', 'static (default)'),
    option('online', 'online: copies come and go with the load'));
  const plan = h('select', { name: 'plan' }, option('whatif', 'whatif (default): the candidate a replay finds best'),
    option('tier-first', 'tier-first'), option('serving-first', 'serving-first'), option('serving-only', 'serving-only: pooled’s plan'));
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
    if (kvMigration.value !== 'off') body.kv_migration = kvMigration.value;
    if (replan.value !== 'static') body.replan = replan.value;
    if (plan.value !== 'whatif') body.plan = plan.value;
    if (kind.value === 'sweep' && targets.value.trim()) {
      body.violation_targets = targets.value.split(',').map((t) => Number(t.trim()));
    }
    if (kind.value === 'sweep' && draws.value) body.seeds = Number(draws.value);
    if (kind.value === 'replay' && draw.value && Number(draw.value) !== 0) body.draw = Number(draw.value);
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
  policyBox,
  h('label', null, 'Rate scale', rate),
  h('label', null, 'Violation targets (sweep)', targets),
  h('label', { title: 'Draws of the scenario replayed at every rate scale: the file’s seed and more; a point counts all their requests' },
    'Draws per point (sweep)', draws),
  h('label', { title: 'Which draw of the scenario: 0 is its own seed, k the draw a sweep of more than k draws replays as its (k+1)-th' },
    'Draw (replay)', draw),
  h('label', null, 'KV migration', kvMigration),
  h('label', null, 'Copies', replan),
  h('label', null, 'Plan', plan),
  msg,
  h('button', { class: 'btn btn-primary', type: 'submit' }, 'Start'));
  details.append(h('summary', { class: 'btn btn-primary' }, 'New run'), form);
  // Escape closes the form, as any popover, and gives focus back to its button.
  details.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && details.open) { details.open = false; details.querySelector('summary')?.focus(); }
  });
  details.addEventListener('toggle', async () => {
    if (!details.open) return;
    // Fresh each time: an admin may have activated a plugin since.
    void activePolicies(true).then((ps) => {
      const was = new Set(boxes.filter((b) => b.checked).map((b) => b.value));
      boxes = ps.map((p) => h('input', { type: 'checkbox', name: 'policy', value: p.name,
        checked: was.size ? was.has(p.name) : p.name === 'slice' }));
      policyBox.replaceChildren(h('legend', null, 'Policies'), ...(ps.length ? ps.map((p, i) => h('label', { class: 'check', title: p.uploaded ? `uploaded component ${p.version}` : 'shipped with the service' },
        boxes[i], p.name, p.uploaded ? h('span', { class: 'badge badge-uploaded' }, `uploaded ${p.version}`) : null))
        : [h('span', { class: 'form-error' }, 'No active policy: activate one on the Plugins page.')]));
    }).catch((err) => {
      policyBox.replaceChildren(h('legend', null, 'Policies'), h('span', { class: 'form-error' },
        `Could not list policies: ${err instanceof ApiError ? err.title : err}`));
    });
    if (scenario.options.length) return;
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
