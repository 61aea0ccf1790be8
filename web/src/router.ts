// Hash routing: the service serves one index.html, so deep links must not need the
// server to know the UI's paths.

export interface Route { path: string[]; query: URLSearchParams }

export function current(): Route {
  const raw = location.hash.replace(/^#\/?/, '');
  const [p, q = ''] = raw.split('?');
  return { path: p.split('/').filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(q) };
}

export function go(path: string): void {
  location.hash = path.startsWith('#') ? path : `#${path}`;
}

/** Changes the query without a navigation (filters, zoom), so back/forward stay useful. */
export function replaceQuery(q: URLSearchParams): void {
  const p = location.hash.replace(/^#/, '').split('?')[0];
  const s = q.toString();
  history.replaceState(null, '', `#${p}${s ? `?${s}` : ''}`);
}
