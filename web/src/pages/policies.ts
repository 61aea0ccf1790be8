// The policies the service offers, from GET /plugins: what the new-run form lists
// (active ones: shipped, built in or uploaded and activated) and the runs filter offers.

import { api } from '../api';
import type { Page as ApiPage, Plugin } from '../types';

let cache: Promise<Plugin[]> | null = null;

export function plugins(fresh = false): Promise<Plugin[]> {
  if (fresh || !cache) {
    cache = api<Plugin[] | ApiPage<Plugin>>('/plugins').then((r) => (Array.isArray(r) ? r : r.items));
    cache.catch(() => { cache = null; });
  }
  return cache;
}

/** Policy names a run may use now, each once, in name order; `uploaded` says whether an
 *  active uploaded component (not the binary's own build) answers to it. */
export async function activePolicies(fresh = false): Promise<{ name: string; uploaded: boolean; version: string }[]> {
  const by = new Map<string, { name: string; uploaded: boolean; version: string }>();
  for (const p of await plugins(fresh)) {
    if (p.state !== 'active') continue;
    const had = by.get(p.name);
    if (!had || (!p.builtin && !had.uploaded)) by.set(p.name, { name: p.name, uploaded: !p.builtin, version: p.version });
  }
  return [...by.values()].sort((a, b) => a.name.localeCompare(b.name));
}

/** Every policy name ever registered (for filtering history, which keeps old ones). */
export async function allPolicyNames(): Promise<string[]> {
  return [...new Set((await plugins()).map((p) => p.name))].sort();
}
