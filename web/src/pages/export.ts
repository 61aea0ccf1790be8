// Export buttons: a run's results as CSV or JSON files, streamed by the API
// (GET /runs/{id}/export/{part}?format=csv|json) and saved by the browser.

import { ApiError, apiFile } from '../api';
import { download } from '../charts/tools';
import { h } from '../dom';
import { bytes } from '../format';
import type { Run } from '../types';

const PARTS: Record<string, [string, string][]> = {
  replay: [['summary', 'Summary (run and tenants)'], ['requests', 'Requests (every record)'], ['series', 'Series (per second)']],
  sweep: [['summary', 'Goodput results'], ['points', 'Points (every replay)']],
};

export function exportPanel(run: Run): HTMLElement {
  const msg = h('p', { class: 'hint', role: 'status', 'data-testid': 'export-status' });
  const button = (part: string, fmt: 'csv' | 'json') =>
    h('button', { type: 'button', class: 'btn btn-small', 'data-export': `${part}.${fmt}`,
      'aria-label': `Export ${part} as ${fmt.toUpperCase()}`, onclick: async (e: Event) => {
        const b = e.currentTarget as HTMLButtonElement;
        b.disabled = true;
        msg.textContent = `Exporting ${part} as ${fmt.toUpperCase()}…`;
        try {
          const f = await apiFile(`/runs/${run.id}/export/${part}?format=${fmt}`);
          download(f.blob, f.filename);
          msg.textContent = `Saved ${f.filename} (${bytes(f.blob.size)}).`;
        } catch (err) {
          msg.textContent = `Export failed: ${err instanceof ApiError ? `${err.title}${err.detail ? ` — ${err.detail}` : ''}` : String(err)}`;
        } finally {
          b.disabled = false;
        }
      } }, fmt.toUpperCase());
  return h('div', { class: 'export', 'data-testid': 'export-panel' },
    h('table', { class: 'tbl export-table' }, h('tbody', null, (PARTS[run.kind] ?? []).map(([part, label]) =>
      h('tr', null, h('th', { scope: 'row' }, label), h('td', null, button(part, 'csv'), ' ', button(part, 'json')))))),
    h('p', { class: 'hint' }, 'Files are streamed by the API, any size. Charts have their own PNG, SVG and CSV buttons.'),
    msg);
}
