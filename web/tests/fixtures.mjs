// What the browser tests need from the real service, made through its public API with
// the admin token: an analyst key, a tenant with its key, two finished replays of one
// scenario (dedicated and slice), a sweep, and a cancelled run.
import fs from 'node:fs';
import path from 'node:path';
import { api } from './browser.mjs';

export const ADMIN = process.env.SLICESCHED_ADMIN_TOKEN ?? '';
const SCENARIO = process.env.UI_TEST_SCENARIO ?? 'smoke';
const WAIT_S = Number(process.env.UI_TEST_RUN_WAIT_S ?? 600);

export async function waitRun(id) {
  const t0 = Date.now();
  for (;;) {
    const r = await api(`/runs/${id}`, ADMIN);
    if (!['queued', 'running'].includes(r.status)) return r;
    if (Date.now() - t0 > WAIT_S * 1000) throw new Error(`run ${id} still ${r.status} after ${WAIT_S} s`);
    await new Promise((res) => setTimeout(res, 1000));
  }
}

/** A finished run of this kind, scenario and policies, started if there is none. */
export async function finished(kind, policies) {
  const page = await api(`/runs?scenario=${SCENARIO}&status=succeeded&limit=100`, ADMIN);
  // Only a run at the recorded rate: a 0.5× replay plans fewer copies (the planner
  // sizes them from the load), so it is not the run a test asks for.
  const atRate1 = (r) => (r.params?.rate_scale ?? r.rate_scale ?? 1) === 1;
  const hit = page.items.find((r) => r.kind === kind && atRate1(r) && r.policies.join(',') === policies.join(','));
  if (hit) return hit;
  const body = kind === 'replay' ? { kind, scenario: SCENARIO, policy: policies[0] } : { kind, scenario: SCENARIO, policies };
  const r = await api('/runs', ADMIN, { method: 'POST', body: JSON.stringify(body) });
  const done = await waitRun(r.id);
  if (done.status !== 'succeeded') throw new Error(`${kind} ${policies} ended ${done.status}: ${done.error}`);
  return done;
}

export async function setup() {
  if (!ADMIN) throw new Error('set SLICESCHED_ADMIN_TOKEN to the service admin token');
  const suffix = Date.now().toString(36);
  const analyst = await api('/keys', ADMIN, { method: 'POST', body: JSON.stringify({ name: `ui-analyst-${suffix}`, role: 'analyst' }) });
  const tenant = await api('/tenants', ADMIN, { method: 'POST', body: JSON.stringify({
    name: `ui-tenant-${suffix}`, sla: { ttft_ms: 800, ttft_ms_per_1k: 100, tpot_ms: 70 } }) });
  // Start all runs first so they overlap, then wait.
  const [dedicated, slice, sweep] = await Promise.all([
    finished('replay', ['dedicated']), finished('replay', ['slice']), finished('sweep', ['dedicated', 'slice'])]);
  return {
    analystKey: analyst.api_key, tenantKey: tenant.api_key, tenant: tenant.tenant ?? tenant,
    dedicated, slice, sweep,
  };
}

/** A real policy component to upload, when one was built (else the valid-upload step is skipped). */
export function pluginWasm() {
  if (process.env.PLUGIN_WASM) return process.env.PLUGIN_WASM;
  // `slicesched plugin build plugins/template` writes target/plugins/template.wasm; the
  // template's name is not one of the built-in policies, so its upload cannot conflict.
  const dir = path.resolve(import.meta.dirname, '..', '..', 'target', 'plugins');
  if (!fs.existsSync(dir)) return null;
  const names = fs.readdirSync(dir).filter((n) => n.endsWith('.wasm'));
  const pick = names.find((n) => n === 'template.wasm') ?? names.find((n) => !/^(dedicated|timeslice|mps|pooled|slice|hostile)/.test(n));
  return pick ? path.join(dir, pick) : null;
}
