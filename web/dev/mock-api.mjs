// Development stand-in for `slicesched serve` while the real API is being built: the
// agreed shapes of /api/v1 over synthetic data, plus web/dist at /. The browser tests
// run against the real service (web/scripts/test.sh); this is only for UI work.
//   node dev/mock-api.mjs [port]
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const DIST = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist');
const PORT = Number(process.argv[2] ?? 8090);
const KEYS = { 'admin-token': { role: 'admin', name: 'admin', tenant_id: null },
  'analyst-key': { role: 'analyst', name: 'jane', tenant_id: null },
  'tenant-key': { role: 'tenant', name: 'chat-a', tenant_id: 't0' } };
const TENANTS = ['chat-a', 'code-b', 'summ-c', 'rag-d', 'chat-e', 'code-f', 'agent-g', 'batch-h'];
const GPUS = 8;
let seed = 7;
const rnd = () => ((seed = (seed * 1664525 + 1013904223) >>> 0) / 4294967296);

function summary(policy, k) {
  return { policy, scenario: 'bursty-8t', requests: 5000, completed: 4990, dropped: 10, violation_rate: 0.12 / k, duration_s: 60,
    prompt_tokens_per_s: 41000 * k, output_tokens_per_s: 3900 * k, ttft_p50_ms: 180 / k, ttft_p90_ms: 420 / k, ttft_p99_ms: 990 / k,
    tpot_p50_ms: 31, tpot_p90_ms: 44, tpot_p99_ms: 71, oom_events: 0, op_events: 2400000, gpu_busy_fraction: 0.41 * k,
    scheduling: { borrowed_ops: k > 1 ? 310000 : 0, transfers: 12000, transfer_gb: 3.1, decisions: 90000 },
    tenants: TENANTS.map((name, i) => ({ name, model: i % 2 ? 'llama-3-8b' : 'qwen2-7b', gpus: [i], requests: 625, completed: 623, dropped: 2,
      violation_rate: (0.05 + i * 0.02) / k, prompt_tokens_per_s: 5000, output_tokens_per_s: 480, ttft_p50_ms: 150 + i * 20, ttft_p90_ms: 380 + i * 30,
      ttft_p99_ms: 800 + i * 60, tpot_p50_ms: 28 + i, tpot_p90_ms: 40 + i, tpot_p99_ms: 60 + i * 2, sla_ttft_ms: 1000, sla_ttft_ms_per_1k: 100,
      sla_tpot_ms: 60, preemptions: 0 })),
    gpus: Array.from({ length: GPUS }, (_, g) => ({ gpu: g, sku: 'H100-80GB', busy_fraction: Math.min(0.95, (0.3 + g * 0.04) * k), busy_s: 20 + g,
      idle_gaps: 40000, idle_gap_p50_ms: 0.4, idle_gap_p90_ms: 3.2, idle_gap_p99_ms: 40, peak_memory_gb: 71, capacity_gb: 80, oom_events: 0,
      ops: 300000, guest_busy_s: k > 1 ? 4 + g : 0, gap_histogram: { count: Array.from({ length: 70 }, (_, b) => Math.round(4000 * Math.exp(-((b - 28) ** 2) / 60))),
        idle_ns: Array.from({ length: 70 }, (_, b) => Math.round(1e9 * Math.exp(-((b - 36) ** 2) / 80))) } })) };
}
const sweep = { scenario: 'bursty-8t', results: [], ratios: [], points: [] };
for (const [pi, p] of ['dedicated', 'timeslice', 'mps', 'pooled', 'slice'].entries()) {
  const knee = [1, 1.1, 1.05, 1.4, 1.9][pi];
  for (const s of [0.25, 0.5, 1, 1.5, 2, 3, 4]) {
    sweep.points.push({ policy: p, rate_scale: s, violation_rate: Math.min(1, 0.01 * Math.exp(2.2 * (s / knee - 0.5))), prompt_tokens_per_s: 30000 * s, output_tokens_per_s: 3000 * s, oom_events: 0 });
  }
  for (const t of [0.01, 0.09]) {
    const rs = knee * (t === 0.01 ? 0.5 : 1.45);
    sweep.results.push({ policy: p, target: t, rate_scale: rs, prompt_tokens_per_s: 30000 * rs, output_tokens_per_s: 3000 * rs, violation_rate: t * 0.9, oom_events: 0, status: 'found' });
    sweep.ratios.push({ policy: p, target: t, goodput_vs_dedicated: knee });
  }
}
const now = Date.now();
const iso = (ms) => new Date(ms).toISOString();
const runs = [
  { id: 'a1b2c3d4-0000-4000-8000-000000000001', kind: 'replay', scenario: 'bursty-8t', policies: ['dedicated'], status: 'succeeded', progress: 1, created_at: iso(now - 4e6), started_at: iso(now - 4e6), finished_at: iso(now - 3.9e6), error: null, summary: summary('dedicated', 1) },
  { id: 'a1b2c3d4-0000-4000-8000-000000000002', kind: 'replay', scenario: 'bursty-8t', policies: ['slice'], status: 'succeeded', progress: 1, created_at: iso(now - 3e6), started_at: iso(now - 3e6), finished_at: iso(now - 2.9e6), error: null, summary: summary('slice', 1.6) },
  { id: 'a1b2c3d4-0000-4000-8000-000000000003', kind: 'sweep', scenario: 'bursty-8t', policies: ['dedicated', 'timeslice', 'mps', 'pooled', 'slice'], status: 'succeeded', progress: 1, created_at: iso(now - 2e6), started_at: iso(now - 2e6), finished_at: iso(now - 1.5e6), error: null, summary: sweep },
  { id: 'a1b2c3d4-0000-4000-8000-000000000004', kind: 'replay', scenario: 'azure-code-4t', policies: ['pooled'], status: 'failed', progress: 0.4, created_at: iso(now - 1e6), started_at: iso(now - 1e6), finished_at: iso(now - 0.9e6), error: 'scenario trace data/traces/missing.csv: no such file', summary: null },
  { id: 'a1b2c3d4-0000-4000-8000-000000000005', kind: 'replay', scenario: 'uniform-4t', policies: ['slice'], status: 'running', progress: 0.1, created_at: iso(now - 1e5), started_at: iso(now - 1e5), finished_at: null, error: null, summary: null },
];
const running = runs[4];
setInterval(() => { if (running.status === 'running') { running.progress = Math.min(1, running.progress + 0.05); if (running.progress >= 1) { running.status = 'succeeded'; running.finished_at = iso(Date.now()); running.summary = summary('slice', 1.2); } } }, 1000);

// Ops of a run: per GPU bursts with idle gaps; slice borrows into others' gaps.
const opsCache = new Map();
function ops(run) {
  if (opsCache.has(run.id)) return opsCache.get(run.id);
  seed = run.id.endsWith('2') ? 11 : 5;
  const borrow = run.policies[0] === 'slice';
  const cols = { gpu: [], start_ns: [], end_ns: [], tenant: [], kind: [], layer: [], predicted_ns: [], transfer_ns: [], borrowed: [], prefill_tokens: [], decodes: [] };
  const KINDS = ['qkv_proj', 'attention', 'o_proj', 'mlp_up', 'mlp_down'];
  for (let g = 0; g < GPUS; g++) {
    let t = 0;
    for (let j = 0; j < 25000; j++) {
      if (j % 40 === 0) t += 50000 + rnd() * (borrow ? 800000 : 4000000);
      const len = 8000 + rnd() * 50000;
      const b = borrow && rnd() < 0.25;
      cols.gpu.push(g); cols.start_ns.push(Math.round(t)); cols.end_ns.push(Math.round(t + len));
      cols.tenant.push(b ? (g + 1 + Math.floor(rnd() * 7)) % 8 : g); cols.kind.push(KINDS[j % 5]); cols.layer.push(Math.floor(j / 5) % 32);
      cols.predicted_ns.push(Math.round(len * (0.9 + rnd() * 0.2))); cols.transfer_ns.push(b ? 4000 : 0); cols.borrowed.push(b);
      cols.prefill_tokens.push(j % 80 < 5 ? 512 : 0); cols.decodes.push(8 + (j % 24));
      t += len + 300;
    }
  }
  opsCache.set(run.id, cols);
  return cols;
}

function timeline(run, q) {
  const c = ops(run);
  const from = Number(q.get('from_ns') ?? 0), to = Number(q.get('to_ns') ?? 1e18), max = Number(q.get('max_ops') ?? 100000);
  const idx = [];
  for (let i = 0; i < c.gpu.length; i++) if (c.end_ns[i] >= from && c.start_ns[i] <= to) idx.push(i);
  if (idx.length <= max) {
    const out = {};
    for (const k of Object.keys(c)) out[k] = idx.map((i) => c[k][i]);
    return { mode: 'ops', ops: out };
  }
  const bucket_ns = Math.ceil((to - from) / 1000);
  const map = new Map();
  for (const i of idx) {
    const b = Math.floor((c.start_ns[i] - from) / bucket_ns), key = c.gpu[i] * 100000 + b;
    let e = map.get(key);
    if (!e) map.set(key, (e = { gpu: c.gpu[i], t0: from + b * bucket_ns, busy: 0, tb: new Array(8).fill(0) }));
    const d = c.end_ns[i] - c.start_ns[i];
    e.busy += d; e.tb[c.tenant[i]] += d;
  }
  const v = [...map.values()];
  return { mode: 'buckets', bucket_ns, buckets: { gpu: v.map((e) => e.gpu), t0_ns: v.map((e) => e.t0), busy_ns: v.map((e) => e.busy), tenant_busy_ns: v.map((e) => e.tb) } };
}

const tenants = TENANTS.map((name, i) => ({ id: `t${i}`, name, created_at: iso(now - 9e6) }));
const withSla = () => tenants.map((t) => ({ ...t, sla: slas[t.id].at(-1) }));
const slas = Object.fromEntries(tenants.map((t) => [t.id, [{ version: 1, ttft_ms: 1200, ttft_ms_per_1k: 100, tpot_ms: 70, changed_by: 'admin:admin', changed_at: iso(now - 8e6) },
  { version: 2, ttft_ms: 1000, ttft_ms_per_1k: 100, tpot_ms: 60, changed_by: 'admin:admin', changed_at: iso(now - 5e6) }]]));
const plugins = ['dedicated', 'timeslice', 'mps', 'pooled', 'slice'].map((n, i) => ({ id: `p${i}`, name: n, version: '1.0.0', state: 'active', interface_version: '0.1.0', sha256_hex: '', size_bytes: 0, builtin: true, uploaded_by: 'builtin', created_at: iso(now - 9e6) }));

function requests(run, q) {
  seed = 3;
  const all = [];
  for (let i = 0; i < 5000; i++) {
    const tenant = TENANTS[i % 8], ttft = 50 + rnd() ** 3 * 2000, tpot = 20 + rnd() ** 2 * 60;
    all.push({ request_id: i, tenant, arrival_ns: i * 12e6, prompt_tokens: 200 + (i * 37) % 3000, output_tokens: 50 + (i * 13) % 400, ttft_ms: ttft, tpot_ms: tpot, violated: ttft > 1000 || tpot > 60, dropped: null });
  }
  let rows = all.filter((r) => (!q.get('tenant') || r.tenant === q.get('tenant')) && (!q.get('violated') || String(r.violated) === q.get('violated')));
  const cur = Number(q.get('cursor') ?? -1), lim = Number(q.get('limit') ?? 50);
  rows = rows.filter((r) => r.request_id > cur);
  const page = rows.slice(0, lim);
  return { items: page, next_cursor: rows.length > lim ? String(page[page.length - 1].request_id) : null };
}

function route(req, q, body) {
  const auth = (req.headers.authorization ?? '').replace(/^Bearer /, '');
  const who = KEYS[auth];
  if (!who) return [401, { type: 'unauthorized', title: 'Unauthorized', status: 401, detail: 'missing or invalid bearer token' }];
  const p = new URL(req.url, 'http://x').pathname.replace(/^\/api\/v1/, '');
  const reader = who.role !== 'tenant', admin = who.role === 'admin';
  const forbid = [403, { title: 'Forbidden', status: 403, detail: 'this role may not do that' }];
  let m;
  if (p === '/me') return [200, who];
  if (p === '/runs' && req.method === 'GET') {
    if (!reader) return forbid;
    let rs = runs.filter((r) => (!q.get('status') || r.status === q.get('status')) && (!q.get('scenario') || r.scenario === q.get('scenario')) && (!q.get('policy') || r.policies.includes(q.get('policy'))));
    rs = [...rs].reverse();
    return [200, { items: rs, next_cursor: null }];
  }
  if (p === '/runs' && req.method === 'POST') {
    if (!admin) return forbid;
    const b = JSON.parse(body || '{}');
    const r = { id: `a1b2c3d4-0000-4000-8000-${String(runs.length + 1).padStart(12, '0')}`, kind: b.kind, scenario: b.scenario, policies: b.policies ?? [b.policy], status: 'queued', progress: 0, created_at: iso(Date.now()), started_at: null, finished_at: null, error: null, summary: null };
    runs.push(r);
    // Queued → running → succeeded over a few seconds; azure-code-4t stays running (long).
    setTimeout(() => { if (r.status === 'queued') { r.status = 'running'; r.started_at = iso(Date.now()); } }, 500);
    if (b.scenario !== 'azure-code-4t') setTimeout(() => { if (r.status !== 'running') return; r.status = 'succeeded'; r.progress = 1; r.finished_at = iso(Date.now());
      r.summary = r.kind === 'sweep' ? { ...sweep, scenario: b.scenario } : summary(r.policies[0], r.policies[0] === 'slice' ? 1.6 : 1); }, 2500);
    return [201, r];
  }
  if ((m = p.match(/^\/runs\/([^/]+)(\/.*)?$/))) {
    if (!reader) return forbid;
    const run = runs.find((r) => r.id === m[1]);
    if (!run) return [404, { title: 'Not Found', status: 404, detail: 'not found' }];
    const sub = m[2] ?? '';
    if (sub === '') return [200, run];
    if (sub === '/cancel') { run.status = 'cancelled'; run.finished_at = iso(Date.now()); return [200, run]; }
    if (sub === '/series') {
      seed = 9;
      const n = 60;
      return [200, { bucket_s: 1, prompt_tokens: Array.from({ length: n }, () => Math.round(30000 + rnd() * 20000)), output_tokens: Array.from({ length: n }, () => Math.round(3000 + rnd() * 2000)), completed: Array.from({ length: n }, () => 80), violations: Array.from({ length: n }, (_, i) => Math.round(5 + 10 * Math.sin(i / 6) ** 2)), gpu_busy_ns: Array.from({ length: GPUS }, (_, g) => Array.from({ length: n }, (_, i) => Math.round(1e9 * Math.min(1, Math.max(0, 0.3 + 0.5 * Math.sin(i / 7 + g)))))) }];
    }
    if (sub === '/decisions') {
      const c = Number(q.get('cursor') ?? 0);
      return [200, { items: Array.from({ length: 10 }, (_, i) => ({ seq: c + i, at_ns: (c + i) * 1.7e7, ready_ops: 40 + i, borrowed: i % 4, rejected: i % 3 === 0 ? 1 : 0 })), next_cursor: String(c + 10) }];
    }
    if (sub === '/requests') return [200, requests(run, q)];
    if (sub === '/timeline/meta') return [200, { from_ns: 0, to_ns: ops(run).end_ns.reduce((a, b) => Math.max(a, b), 0), ops: ops(run).gpu.length, gpus: Array.from({ length: GPUS }, (_, g) => g), tenants: TENANTS }];
    if (sub === '/timeline') return [200, timeline(run, q)];
  }
  if (p === '/scenarios') return [200, { items: ['azure-code-4t', 'bursty-8t', 'smoke', 'uniform-4t'] }];
  if (p === '/tenants' && req.method === 'GET') return [200, { items: reader ? withSla() : withSla().filter((t) => t.id === who.tenant_id) }];
  if (p === '/tenants' && req.method === 'POST') {
    if (!admin) return forbid;
    const b = JSON.parse(body || '{}');
    const t = { id: `t${tenants.length}`, name: b.name, created_at: iso(Date.now()) };
    tenants.push(t);
    slas[t.id] = [{ version: 1, ttft_ms: b.sla?.ttft_ms ?? 1000, ttft_ms_per_1k: 0, tpot_ms: b.sla?.tpot_ms ?? 60, changed_by: 'admin:admin', changed_at: iso(Date.now()) }];
    const key = `ssk_tenant_${t.id}`;
    KEYS[key] = { role: 'tenant', name: t.name, tenant_id: t.id };
    return [201, { tenant: t, api_key: key }];
  }
  if ((m = p.match(/^\/tenants\/([^/]+)(\/.*)?$/))) {
    const t = tenants.find((x) => x.id === m[1]);
    if (!t || (who.role === 'tenant' && who.tenant_id !== t.id)) return [404, { title: 'Not Found', status: 404, detail: 'not found' }];
    const sub = m[2] ?? '';
    if (sub === '') return [200, { ...t, sla: slas[t.id].at(-1) }];
    if (sub === '/sla' && req.method === 'GET') return [200, slas[t.id].at(-1)];
    if (sub === '/sla' && req.method === 'PUT') {
      if (who.role !== 'tenant') return forbid;
      const b = JSON.parse(body);
      if (!(b.ttft_ms > 0) || !(b.tpot_ms > 0)) return [422, { title: 'Invalid', status: 422, detail: 'must be positive', field: 'ttft_ms' }];
      slas[t.id].push({ ...slas[t.id].at(-1), ...b, version: slas[t.id].length + 1, changed_by: `tenant:${who.name}`, changed_at: iso(Date.now()) });
      return [200, slas[t.id].at(-1)];
    }
    if (sub === '/sla/history') return [200, { items: slas[t.id] }];
    if (sub === '/stats') return [200, { tenant_id: t.id, name: t.name, runs: runs.filter((r) => r.kind === 'replay' && r.summary).map((r) => ({ run_id: r.id, scenario: r.scenario, policies: r.policies, finished_at: r.finished_at, stats: r.summary.tenants[0] })) }];
  }
  if (p === '/plugins' && req.method === 'GET') return reader ? [200, { items: plugins }] : forbid;
  if (p === '/plugins' && req.method === 'POST') {
    if (!admin) return forbid;
    if (!body.startsWith('\0asm') || body.includes('garbage')) return [422, { title: 'Invalid plugin', status: 422, detail: 'not a Wasm component: bad magic', field: 'body' }];
    const pl = { id: `p${plugins.length}`, name: 'uploaded', version: '0.1.0', state: 'active', interface_version: '0.1.0', sha256_hex: 'abcdef0123456789', size_bytes: body.length, builtin: false, uploaded_by: 'admin:admin', created_at: iso(Date.now()) };
    plugins.push(pl);
    return [201, pl];
  }
  if ((m = p.match(/^\/plugins\/([^/]+)\/(activate|disable)$/))) {
    if (!admin) return forbid;
    const pl = plugins.find((x) => x.id === m[1]);
    pl.state = m[2] === 'activate' ? 'active' : 'disabled';
    return [200, pl];
  }
  if (p === '/keys') return admin ? [201, { key: { role: 'analyst' }, api_key: 'analyst-key' }] : forbid;
  return [404, { title: 'Not Found', status: 404, detail: 'no such route' }];
}

http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (url.pathname.startsWith('/api/')) {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const [status, body] = route(req, url.searchParams, Buffer.concat(chunks).toString('latin1'));
      res.writeHead(status, { 'Content-Type': status >= 400 ? 'application/problem+json' : 'application/json' });
      res.end(JSON.stringify(body));
    });
    return;
  }
  let f = path.join(DIST, url.pathname);
  if (!f.startsWith(DIST) || !fs.existsSync(f) || fs.statSync(f).isDirectory()) f = path.join(DIST, 'index.html');
  const type = { '.js': 'text/javascript', '.css': 'text/css', '.html': 'text/html', '.png': 'image/png' }[path.extname(f)] ?? 'application/octet-stream';
  res.writeHead(200, { 'Content-Type': type });
  fs.createReadStream(f).pipe(res);
}).listen(PORT, '127.0.0.1', () => console.log(`mock api on http://127.0.0.1:${PORT}`));
