// The only way the UI talks to the service: the public REST API with a Bearer key.

import type { Me } from './types';

const KEY = 'slicesched.key';

export class ApiError extends Error {
  constructor(
    public status: number,
    public title: string,
    public detail: string,
    public field?: string,
  ) {
    super(detail ? `${title}: ${detail}` : title);
  }
  get unauthorized(): boolean { return this.status === 401; }
  get forbidden(): boolean { return this.status === 403; }
  /** Network failure: status 0. */
  get unreachable(): boolean { return this.status === 0; }
}

export function getKey(): string | null { return sessionStorage.getItem(KEY); }
export function setKey(k: string | null): void {
  if (k) sessionStorage.setItem(KEY, k);
  else sessionStorage.removeItem(KEY);
}

/** Listeners told when a request comes back 401 (an expired or revoked key). */
const onUnauthorized: (() => void)[] = [];
export function whenUnauthorized(f: () => void): void { onUnauthorized.push(f); }

export async function api<T>(path: string, init: RequestInit & { key?: string } = {}): Promise<T> {
  const key = init.key ?? getKey();
  const headers = new Headers(init.headers);
  if (key) headers.set('Authorization', `Bearer ${key}`);
  if (init.body && typeof init.body === 'string' && !headers.has('Content-Type')) {
    headers.set('Content-Type', 'application/json');
  }
  let res: Response;
  try {
    res = await fetch(`/api/v1${path}`, { ...init, headers });
  } catch {
    throw new ApiError(0, 'Server unreachable', 'The SliceScheduler service did not answer. Is `slicesched serve` running?');
  }
  if (!res.ok) {
    const err = await problem(res);
    if (err.unauthorized && !init.key) onUnauthorized.forEach((f) => f());
    throw err;
  }
  if (res.status === 204) return undefined as T;
  const ct = res.headers.get('Content-Type') ?? '';
  return (ct.includes('json') ? res.json() : res.text()) as Promise<T>;
}

/** A file the API streams (exports): the whole body as a Blob and the name the server
 *  gave it. Errors are the same ApiErrors as for JSON calls. */
export async function apiFile(path: string): Promise<{ blob: Blob; filename: string }> {
  const key = getKey();
  let res: Response;
  try {
    res = await fetch(`/api/v1${path}`, { headers: key ? { Authorization: `Bearer ${key}` } : {} });
  } catch {
    throw new ApiError(0, 'Server unreachable', 'The SliceScheduler service did not answer.');
  }
  if (!res.ok) {
    const err = await problem(res);
    if (err.unauthorized) onUnauthorized.forEach((f) => f());
    throw err;
  }
  const cd = res.headers.get('Content-Disposition') ?? '';
  const filename = /filename="([^"]+)"/.exec(cd)?.[1] ?? path.split('/').pop() ?? 'export';
  return { blob: await res.blob(), filename };
}

async function problem(res: Response): Promise<ApiError> {
  let title = res.statusText || `HTTP ${res.status}`;
  let detail = '';
  let field: string | undefined;
  try {
    const body = await res.json();
    title = body.title ?? title;
    detail = body.detail ?? body.message ?? '';
    field = body.field ?? body.errors?.[0]?.field;
  } catch {
    // Not problem+json (a proxy's error page, say): the status line is all we have.
  }
  if (res.status >= 502 && res.status <= 504) {
    return new ApiError(0, 'Server unreachable', detail || `The gateway answered ${res.status}.`);
  }
  return new ApiError(res.status, title, detail, field);
}

export function qs(params: Record<string, string | number | boolean | null | undefined>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') p.set(k, String(v));
  }
  const s = p.toString();
  return s ? `?${s}` : '';
}

export const me = (key?: string) => api<Me>('/me', { key });

/** For a list that reloads whenever a filter changes: a late answer to an earlier request
 *  must not draw over the newer one. `const begin = newestOnly();` once, then per load
 *  `const stale = begin();` before the request and `if (stale()) return;` after it. */
export function newestOnly(): () => () => boolean {
  let n = 0;
  return () => {
    const mine = ++n;
    return () => mine !== n;
  };
}
