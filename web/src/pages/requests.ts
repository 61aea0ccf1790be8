// Per-request records, paginated by the server (runs can hold a million of them).

import { api, qs, newestOnly } from '../api';
import { clear, h } from '../dom';
import { ms, num, pct } from '../format';
import type { Run, Summary } from '../types';
import { errorBox } from '../ui';

export function requestsTable(run: Run, s: Summary): HTMLElement {
  const f = { tenant: '', violated: '' };
  const cursors: (string | null)[] = [null];
  const body = h('div');
  const pager = h('div', { class: 'pager' });
  const tenantSel = h('select', { 'aria-label': 'Tenant', onchange: () => { f.tenant = tenantSel.value; reset(); } },
    h('option', { value: '' }, 'all tenants'), s.tenants.map((t) => h('option', { value: t.name }, t.name)));
  const violSel = h('select', { 'aria-label': 'Violated', onchange: () => { f.violated = violSel.value; reset(); } },
    h('option', { value: '' }, 'all requests'), h('option', { value: 'true' }, 'violated SLA'), h('option', { value: 'false' }, 'within SLA'));
  const reset = () => { cursors.length = 1; void load(); };

  const begin = newestOnly();
  async function load(): Promise<void> {
    const stale = begin();
    let page: { items: Record<string, unknown>[]; next_cursor: string | null };
    try {
      page = await api(`/runs/${run.id}/requests${qs({ ...f, limit: 25, cursor: cursors[cursors.length - 1] })}`);
    } catch (e) {
      if (stale()) return;
      clear(body);
      body.append(errorBox(e, () => void load()));
      return;
    }
    if (stale()) return;
    clear(body);
    const col = (r: Record<string, unknown>, k: string) => r[k] as number | null | undefined;
    body.append(h('table', { class: 'tbl requests', 'data-testid': 'requests-table' },
      h('thead', null, h('tr', null, ['Request', 'Tenant', 'Arrival', 'Prompt tok', 'Output tok', 'TTFT', 'TPOT', 'SLA']
        .map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, page.items.map((r) => {
        const t = r.tenant;
        const name = typeof t === 'number' ? s.tenants[t]?.name ?? String(t) : String(t ?? r.tenant_name ?? '');
        const arr = col(r, 'arrival_ns');
        const ttft = col(r, 'ttft_ms') ?? (col(r, 'first_token_ns') != null && arr != null ? (col(r, 'first_token_ns')! - arr) / 1e6 : null);
        const violated = r.violated === true;
        return h('tr', null, h('td', null, String(r.id ?? r.request_id ?? '')), h('td', null, name),
          h('td', { class: 'num' }, arr != null ? `${(arr / 1e9).toFixed(3)} s` : '–'),
          h('td', { class: 'num' }, num(col(r, 'prompt_tokens'))), h('td', { class: 'num' }, num(col(r, 'output_tokens'))),
          h('td', { class: 'num' }, ms(ttft)), h('td', { class: 'num' }, ms(col(r, 'tpot_ms'))),
          h('td', null, r.dropped ? h('span', { class: 'over' }, `dropped: ${r.dropped}`)
            : h('span', { class: violated ? 'over' : 'ok' }, violated ? 'violated' : 'met')));
      }))));
    clear(pager);
    pager.append(
      h('button', { class: 'btn', disabled: cursors.length === 1, onclick: () => { cursors.pop(); void load(); } }, '← Previous'),
      h('span', { class: 'hint' }, `page ${cursors.length} · 25 per page`),
      h('button', { class: 'btn', disabled: !page.next_cursor, onclick: () => { cursors.push(page.next_cursor); void load(); } }, 'Next →'));
  }
  void load();
  return h('div', null, h('div', { class: 'filters' }, tenantSel, violSel), body, pager);
}

/** The scheduler's figures from the summary, and its sampled decisions (paginated). */
/** Which of the planner's candidate plans the run ran on, and the what-if that chose it:
 * two runs of one scenario may differ in plan, not only in policy. */
function planNote(s: Summary): HTMLElement {
  const p = s.plan;
  if (!p) return h('p', { 'data-testid': 'plan-note' }, 'Plan: the planner’s only candidate for this policy (no what-if needed).');
  const tried = p.candidates.map((c) => `${c.order} ${c.stopped_early ? 'over ' : ''}${pct(c.violation_rate)}`).join(', ');
  return h('p', { 'data-testid': 'plan-note', 'data-plan': p.chosen },
    `Plan: ${p.chosen}, kept by a what-if that replayed each candidate plan on ${num(p.window_s)} s of the load `
    + `(from ${num(p.window_start_s)} s, ${num(p.window_requests)} requests): ${tried} of requests violating.`);
}

export function schedulingPanel(run: Run, s: Summary): HTMLElement {
  const sc = s.scheduling;
  const body = h('div');
  const cursors: (string | null)[] = [null];
  const pager = h('div', { class: 'pager' });
  async function load(): Promise<void> {
    let page: { items: { seq: number; at_ns: number; ready_ops: number; borrowed: number; rejected: number }[]; next_cursor: string | null };
    try {
      page = await api(`/runs/${run.id}/decisions${qs({ limit: 10, cursor: cursors[cursors.length - 1] })}`);
    } catch (e) {
      body.replaceChildren(errorBox(e, () => void load()));
      return;
    }
    body.replaceChildren(page.items.length ? h('table', { class: 'tbl decisions' },
      h('thead', null, h('tr', null, ['Decision', 'At', 'Ready ops', 'Borrowed', 'Rejected'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, page.items.map((d) => h('tr', null, h('td', null, String(d.seq)), h('td', { class: 'num' }, `${(d.at_ns / 1e9).toFixed(4)} s`),
        h('td', { class: 'num' }, num(d.ready_ops)), h('td', { class: 'num' }, num(d.borrowed)), h('td', { class: 'num' }, num(d.rejected))))))
      : h('p', { class: 'hint' }, 'No sampled decisions stored for this run.'));
    pager.replaceChildren(
      h('button', { class: 'btn', disabled: cursors.length === 1, onclick: () => { cursors.pop(); void load(); } }, '← Previous'),
      h('span', { class: 'hint' }, `page ${cursors.length}`),
      h('button', { class: 'btn', disabled: !page.next_cursor, onclick: () => { cursors.push(page.next_cursor); void load(); } }, 'Next →'));
  }
  const details = h('details', { ontoggle: () => { if (details.open && !body.firstChild) void load(); } },
    h('summary', null, 'Sampled decisions'), body, pager);
  return h('div', null,
    planNote(s),
    sc ? h('p', null, `${num(sc.decisions)} policy calls, ${num(s.op_events)} operator events; `,
      `${num(sc.borrowed_ops)} operators ran in another tenant's idle slice, with ${num(sc.transfers)} activation transfers (${num(sc.transfer_gb)} GB)`,
      sc.recalled_ops ? `; ${num(sc.recalled_ops)} more were placed there but sent back home before they started, when that GPU's owner came back.` : '.') : null,
    details);
}
