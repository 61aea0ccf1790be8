// What every chart offers beside itself: its data as a table (for screen readers and
// anyone who wants the numbers), and saving it as PNG, SVG or CSV. Nothing leaves the
// page: files are made in the browser and handed to it as downloads.

import { h } from '../dom';

export interface ChartData {
  head: string[];
  /** Formatted cells, for the table. */
  rows: string[][];
  /** Unformatted values, for CSV (falls back to `rows`). */
  raw?: (number | string | null)[][];
}

export function chartTools(chart: SVGSVGElement | HTMLCanvasElement, name: string, data: ChartData | null): HTMLElement {
  const stem = fileStem(name);
  const msg = h('span', { class: 'hint', role: 'status' });
  const fail = (e: unknown) => { msg.textContent = `Could not save: ${e instanceof Error ? e.message : String(e)}`; };
  const buttons = [
    h('button', { type: 'button', class: 'btn btn-small', 'data-save': 'png', 'aria-label': `Save ${name} as PNG`,
      onclick: () => toPng(chart).then((b) => download(b, `${stem}.png`), fail) }, 'PNG'),
    chart instanceof SVGSVGElement ? h('button', { type: 'button', class: 'btn btn-small', 'data-save': 'svg',
      'aria-label': `Save ${name} as SVG`, onclick: () => download(svgBlob(chart), `${stem}.svg`) }, 'SVG') : null,
    data ? h('button', { type: 'button', class: 'btn btn-small', 'data-save': 'csv', 'aria-label': `Save the data of ${name} as CSV`,
      onclick: () => download(new Blob([toCsv(data.head, data.raw ?? data.rows)], { type: 'text/csv' }), `${stem}.csv`) }, 'CSV') : null,
  ];
  return h('div', { class: 'chart-tools' },
    h('span', { class: 'chart-save' }, h('span', { class: 'hint' }, 'Save: '), ...buttons, msg),
    data ? h('details', { class: 'chart-data' }, h('summary', null, `Data table (${data.rows.length} rows)`),
      h('div', { class: 'table-scroll' }, h('table', { class: 'tbl' },
        h('caption', { class: 'sr-only' }, name),
        h('thead', null, h('tr', null, data.head.map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', null, data.rows.map((r) => h('tr', null, r.map((c, i) => (i === 0 ? h('th', { scope: 'row' }, c) : h('td', null, c))))))))) : null);
}

export function fileStem(name: string): string {
  return name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '') || 'chart';
}

/** RFC 4180 CSV: fields with a comma, quote or line break are quoted, quotes doubled. */
export function toCsv(head: string[], rows: (number | string | null)[][]): string {
  const cell = (v: number | string | null) => {
    const s = v === null || v === undefined ? '' : String(v);
    return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return [head, ...rows].map((r) => r.map(cell).join(',')).join('\r\n') + '\r\n';
}

export function download(blob: Blob, filename: string): void {
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: filename, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 30_000);
}

/** A standalone copy: the page's stylesheet does not travel with a file, so the computed
 *  look of every element is written onto it as presentation attributes. */
function standalone(src: SVGSVGElement): SVGSVGElement {
  const copy = src.cloneNode(true) as SVGSVGElement;
  const from = [src, ...src.querySelectorAll('*')];
  const to = [copy, ...copy.querySelectorAll('*')];
  const props = ['fill', 'stroke', 'stroke-width', 'stroke-dasharray', 'font-size', 'font-family', 'font-weight', 'opacity'];
  from.forEach((el, i) => {
    const cs = getComputedStyle(el);
    for (const p of props) {
      const v = cs.getPropertyValue(p);
      if (v) to[i].setAttribute(p, v);
    }
    if (to[i].getAttribute('visibility') === 'hidden') to[i].remove();
  });
  const vb = src.viewBox.baseVal;
  copy.setAttribute('xmlns', 'http://www.w3.org/2000/svg');
  copy.setAttribute('width', String(vb.width));
  copy.setAttribute('height', String(vb.height));
  copy.removeAttribute('style');
  copy.removeAttribute('tabindex');
  const bg = document.createElementNS('http://www.w3.org/2000/svg', 'rect');
  for (const [k, v] of Object.entries({ x: 0, y: 0, width: vb.width, height: vb.height, fill: '#fff' })) bg.setAttribute(k, String(v));
  copy.insertBefore(bg, copy.firstChild);
  return copy;
}

export function svgBlob(el: SVGSVGElement): Blob {
  return new Blob([new XMLSerializer().serializeToString(standalone(el))], { type: 'image/svg+xml' });
}

/** PNG at twice the chart's size: a canvas is copied directly, an SVG drawn onto one. */
export async function toPng(el: SVGSVGElement | HTMLCanvasElement): Promise<Blob> {
  let canvas: HTMLCanvasElement;
  if (el instanceof HTMLCanvasElement) {
    canvas = el;
  } else {
    const vb = el.viewBox.baseVal;
    const url = URL.createObjectURL(svgBlob(el));
    try {
      const img = new Image();
      await new Promise<void>((ok, bad) => {
        img.onload = () => ok();
        img.onerror = () => bad(new Error('the browser refused to draw the chart'));
        img.src = url;
      });
      canvas = document.createElement('canvas');
      canvas.width = vb.width * 2;
      canvas.height = vb.height * 2;
      const ctx = canvas.getContext('2d')!;
      ctx.scale(2, 2);
      ctx.drawImage(img, 0, 0, vb.width, vb.height);
    } finally {
      URL.revokeObjectURL(url);
    }
  }
  return new Promise((ok, bad) => canvas.toBlob((b) => (b ? ok(b) : bad(new Error('no PNG encoder'))), 'image/png'));
}
