// Shared pieces of pages: headings, cards, status badges, error and empty states.

import { ApiError } from './api';
import { h } from './dom';
import type { RunStatus } from './types';

/** `raw`: the unformatted number, for tests that hold the page to the API's figures. */
export function card(label: string, value: string, hint?: string, cls = '', raw?: number): HTMLElement {
  return h('div', { class: `card ${cls}`, 'data-card': label, 'data-value': raw },
    h('div', { class: 'card-label' }, label),
    h('div', { class: 'card-value' }, value),
    hint ? h('div', { class: 'card-hint' }, hint) : null);
}

export function badge(status: RunStatus | string): HTMLElement {
  return h('span', { class: `badge badge-${status}`, 'data-status': status }, status);
}

/** The replay job reports the simulation as 0–95 % and storing its results as 95–99 %
 *  (by statement of the store's transaction, so between two the bar can rest a while):
 *  that phase is said and animated as well as counted. */
export const STORING_FROM = 0.95;

export function progressBar(p: number, status: string, kind = 'replay'): HTMLElement {
  const pc = Math.round(Math.max(0, Math.min(1, p || 0)) * 100);
  const storing = status === 'running' && kind === 'replay' && p >= STORING_FROM;
  const text = storing ? `storing results… ${pc} %` : `${pc} %`;
  return h('div', { class: `progress progress-${status}${storing ? ' progress-storing' : ''}`, role: 'progressbar', 'aria-valuenow': pc,
    'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuetext': storing ? `${pc} %, storing results` : `${pc} %`, title: text,
    'data-phase': storing ? 'storing' : status },
  h('div', { class: 'progress-fill', style: { width: `${pc}%` } }),
  h('span', { class: 'progress-text' }, text));
}

/** A placeholder while something loads, announced to screen readers. */
export function loading(text = 'Loading…'): HTMLElement {
  return h('div', { class: 'state state-loading', role: 'status', 'aria-live': 'polite', 'data-loading': '' },
    h('span', { class: 'spinner', 'aria-hidden': 'true' }), text);
}

export function empty(title: string, text: string, ...actions: HTMLElement[]): HTMLElement {
  return h('div', { class: 'state state-empty' }, h('h3', null, title), h('p', null, text), ...actions);
}

export function errorBox(e: unknown, retry?: () => void): HTMLElement {
  const err = e instanceof ApiError ? e : new ApiError(-1, 'Unexpected error', String(e));
  let title = err.title;
  let text = err.detail;
  if (err.unreachable) {
    title = 'Server unreachable';
    text = 'The SliceScheduler service did not answer. Check that `slicesched serve` is running, then retry.';
  } else if (err.forbidden) {
    title = 'Not allowed';
    text = 'Your key’s role may not do this. Ask an admin for a key with the right role.';
  } else if (err.status === 404) {
    title = 'Not found';
    text = err.detail || 'It does not exist, or it is not visible to your key.';
  }
  return h('div', { class: 'state state-error', role: 'alert' },
    h('h3', null, title), h('p', null, text || ''),
    retry ? h('button', { class: 'btn', onclick: retry }, 'Retry') : null);
}

export function section(title: string, ...body: (Node | null)[]): HTMLElement {
  return h('section', { class: 'panel' }, h('h2', null, title), ...body);
}

export function table(head: string[], rows: (Node | string)[][], cls = ''): HTMLTableElement {
  return h('table', { class: `tbl ${cls}` },
    h('thead', null, h('tr', null, head.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', null, rows.map((r) => h('tr', null, r.map((c) => h('td', null, c))))));
}

export function link(href: string, text: string, attrs: Record<string, unknown> = {}): HTMLAnchorElement {
  return h('a', { href, ...attrs }, text);
}
