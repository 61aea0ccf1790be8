// History that tells the truth (issue 15, points 1–3): whole-run timelines with op
// windows recorded on demand, runs that say how they ran (rate scale, fallback), and
// SLAs from the control plane moving a tenant's attainment. Against the real service
// and database, like ui.test.mjs (web/scripts/test.sh runs every *.test.mjs file).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { api, BASE, launch, newPage, shot, signIn } from './browser.mjs';
import { ADMIN, finished, waitRun } from './fixtures.mjs';

const SCENARIO = process.env.UI_TEST_SCENARIO ?? 'smoke';
let browser, close, analystKey;

before(async () => {
  ({ browser, close } = await launch());
  const k = await api('/keys', ADMIN, { method: 'POST', body: JSON.stringify({ name: `truth-analyst-${Date.now().toString(36)}`, role: 'analyst' }) });
  analystKey = k.api_key;
});
after(async () => { await close?.(); });

function noErrors(page) {
  const real = page.errors.filter((e) => !/status of 40[134]|Failed to load resource/.test(e));
  assert.deepEqual(real, [], 'no script errors');
}

async function replay(body) {
  const r = await api('/runs', ADMIN, { method: 'POST', body: JSON.stringify({ kind: 'replay', scenario: SCENARIO, ...body }) });
  const done = await waitRun(r.id);
  assert.equal(done.status, 'succeeded', `${JSON.stringify(body)}: ${done.error}`);
  return done;
}

const waitTimeline = (page, pred = 'true') =>
  page.waitForFunction(`window.__timeline?.ready && (${pred})`, null, { timeout: 60000 });

describe('whole-run timeline', () => {
  test('shows borrowed work late in a long run, and records a late window op by op on demand', async () => {
    // A little above the recorded rate: at 1× the homes have room enough (with the
    // engine's stall-free batching) that slice borrows only in the opening burst, which
    // the run's own op-level start covers; at 1.25× it borrows through the run.
    const run = await replay({ policy: 'slice', rate_scale: 1.25 });
    const meta = await api(`/runs/${run.id}/timeline/meta`, ADMIN);
    assert.equal(meta.whole_run, true, 'the run stored whole-run busy buckets');
    const end = meta.to_ns;
    const start = meta.windows.find((w) => w.reason === 'start');
    assert.ok(start.recorded_to_ns < end / 2, 'op-level detail from the run itself covers only its start');
    // The part of the run past its recorded start: where, in the whole-run buckets,
    // borrowed work ran (when slice borrows depends on the load, so no fixed fraction).
    const from = start.recorded_to_ns + 100e6;
    const late = await api(`/runs/${run.id}/timeline?from_ns=${Math.floor(from)}&to_ns=${end}`, ADMIN);
    assert.equal(late.mode, 'buckets');
    const b = late.buckets;
    const i = b.borrowed_ns.reduce((best, v, j) => (v > (b.borrowed_ns[best] ?? 0) ? j : best), 0);
    assert.ok(b.borrowed_ns[i] > 0, `slice borrowed slices past the recorded start (${run.summary.scheduling.borrowed_ops} borrowed ops in all)`);
    const t0 = b.t0_ns[i];

    const page = await newPage(browser);
    await signIn(page, ADMIN);
    await page.goto(`${BASE}/#/runs/${run.id}/timeline`);
    await waitTimeline(page);
    const cov = await page.textContent('[data-testid=timeline-coverage]');
    assert.match(cov, /whole run/);
    assert.match(await page.textContent('.toolbar'), /Whole run/);
    let t = await page.evaluate(() => ({ ...window.__timeline }));
    assert.equal(t.view.to, end, 'the whole run is in view, not only its recorded start');
    assert.equal(t.modes[0], 'buckets');
    await shot(page, '50-timeline-whole-run');
    // Zoom to the late stretch with borrowed work: still drawn, as buckets.
    await page.evaluate(([a, z]) => window.__timeline.setView(a, z), [t0 - 50e6, t0 + 50e6]);
    await page.waitForTimeout(300);
    await waitTimeline(page, 'window.__timeline.borrowedInView > 0');
    t = await page.evaluate(() => ({ ...window.__timeline }));
    assert.equal(t.modes[0], 'buckets');
    // Record this view op by op: a job replays the run up to here, with progress shown.
    await page.click('button[data-action=record-window]');
    await page.waitForSelector(`[data-testid="windows-${run.id}"] li[data-status=recorded]:has-text("requested")`, { timeout: 300000 });
    await waitTimeline(page, "window.__timeline.modes[0] === 'ops' && window.__timeline.borrowedInView > 0");
    t = await page.evaluate(() => ({ ...window.__timeline }));
    assert.ok(t.opsInView > 0 && t.borrowedInView > 0, `ops ${t.opsInView}, borrowed ${t.borrowedInView}`);
    const ws = (await api(`/runs/${run.id}/timeline/windows`, ADMIN)).items;
    const mine = ws.find((w) => w.reason === 'requested');
    assert.ok(mine.from_ns > start.recorded_to_ns && mine.status === 'recorded' && mine.ops > 0, JSON.stringify(mine));
    await shot(page, '51-timeline-late-window-ops');
    noErrors(page);
  });

  test('never draws unrecorded time as idle: a run stacked on a shorter one says where it has no data', async () => {
    const long = await finished('replay', ['slice']);
    const short = await replay({ policy: 'dedicated', rate_scale: 4 });
    const page = await newPage(browser);
    await signIn(page, analystKey);
    await page.goto(`${BASE}/#/runs/${long.id}/timeline?with=${short.id}`);
    await waitTimeline(page);
    const m = await api(`/runs/${short.id}/timeline/meta`, analystKey);
    const lm = await api(`/runs/${long.id}/timeline/meta`, analystKey);
    assert.ok(m.to_ns < lm.to_ns, 'the 4× replay ends earlier');
    // Hover the second track past its run's end: "not recorded", not idle.
    const box = await page.locator('[data-testid=timeline-canvas]').boundingBox();
    const v = await page.evaluate(() => window.__timeline.view);
    const at = (m.to_ns + lm.to_ns) / 2;
    const x = box.x + 84 + ((at - v.from) / (v.to - v.from)) * (box.width - 84);
    let tip = '';
    for (let y = box.y + box.height - 10; y > box.y + box.height / 2 && !/not recorded/.test(tip); y -= 6) {
      await page.mouse.move(x, y);
      if (await page.isVisible('.tooltip')) tip = await page.textContent('.tooltip');
    }
    assert.match(tip, /not recorded/);
    assert.match(await page.textContent('.legend'), /not recorded/);
    await shot(page, '52-timeline-stacked-unrecorded');
    noErrors(page);
  });
});

describe('runs say how they ran', () => {
  test('a 0.5× replay is labelled 0.5× in the list and on its page, with every parameter', async () => {
    const run = await replay({ policy: 'dedicated', rate_scale: 0.5 });
    const page = await newPage(browser);
    await signIn(page, analystKey);
    await page.goto(`${BASE}/#/runs?scenario=${SCENARIO}`);
    await page.waitForSelector(`tr[data-run="${run.id}"]`);
    assert.equal(await page.textContent(`tr[data-run="${run.id}"] [data-rate]`), '0.5×');
    await page.goto(`${BASE}/#/runs/${run.id}`);
    await page.waitForSelector('[data-testid=run-params]');
    assert.match(await page.textContent('[data-testid=run-label]'), /0\.5×/);
    const params = await page.textContent('[data-testid=run-params]');
    assert.match(params, /Rate scale\s*0\.5×/);
    assert.ok(params.includes(run.params.scenario_sha256), 'the scenario hash is shown');
    assert.ok(params.includes(run.params.policies[0].sha256.slice(0, 16)), 'the policy as resolved');
    await shot(page, '53-run-half-rate');
    noErrors(page);
  });

  test('a run whose plugin was quarantined is labelled as fallback wherever it is listed', async () => {
    const wasm = process.env.HOSTILE_WASM;
    assert.ok(wasm && fs.existsSync(wasm), `the hostile plugin (HOSTILE_WASM=${wasm}; web/scripts/test.sh builds it)`);
    const bytes = fs.readFileSync(wasm);
    const res = await fetch(`${BASE}/api/v1/plugins`, { method: 'POST', headers: { Authorization: `Bearer ${ADMIN}`, 'Content-Type': 'application/wasm' }, body: bytes });
    assert.ok(res.status === 201 || res.status === 409, `upload: ${res.status} ${await res.text()}`);
    const plugins = (await api('/plugins', ADMIN)).items;
    const row = plugins.find((p) => p.name === 'hostile');
    if (row.state !== 'active') await api(`/plugins/${row.id}/activate`, ADMIN, { method: 'POST', body: '{}' });
    const run = await replay({ policy: 'hostile' });
    assert.ok(run.fallback?.quarantined && run.fallback.decisions > 0, JSON.stringify(run.fallback));
    const page = await newPage(browser);
    await signIn(page, analystKey);
    await page.goto(`${BASE}/#/runs?scenario=${SCENARIO}`);
    const cell = page.locator(`tr[data-run="${run.id}"] [data-status=succeeded_with_fallback]`);
    await cell.waitFor();
    assert.match(await page.textContent(`tr[data-run="${run.id}"]`), new RegExp(`took ${run.fallback.decisions.toLocaleString('en-US')}`));
    await page.goto(`${BASE}/#/runs/${run.id}`);
    await page.waitForSelector('[data-testid=fallback-note]');
    const note = await page.textContent('[data-testid=fallback-note]');
    assert.match(note, /quarantined/);
    assert.match(note, /dedicated took/);
    assert.match(await page.textContent('.page-head'), /succeeded with fallback/);
    await shot(page, '54-run-fallback');
    noErrors(page);
  });
});

describe('SLAs from the control plane', () => {
  test('a tenant’s SLA change moves its attainment, with the SLA versions marked', async () => {
    // A registered tenant named in the run request for the scenario's first tenant.
    const scn = (await api(`/runs/${(await finished('replay', ['dedicated'])).id}`, ADMIN)).summary.tenants[0].name;
    const t = await api('/tenants', ADMIN, { method: 'POST', body: JSON.stringify({
      name: `truth-${Date.now().toString(36)}`, sla: { ttft_ms: 5000, ttft_ms_per_1k: 500, tpot_ms: 500 } }) });
    const id = t.tenant.id;
    const loose = await replay({ policy: 'dedicated', tenants: { [scn]: id } });
    await api(`/tenants/${id}/sla`, ADMIN, { method: 'PUT', body: JSON.stringify({ ttft_ms: 50, ttft_ms_per_1k: 0, tpot_ms: 5 }) });
    const tight = await replay({ policy: 'dedicated', tenants: { [scn]: id } });
    const page = await newPage(browser);
    await signIn(page, t.api_key);
    await page.goto(`${BASE}/#/tenants/${id}`);
    await page.waitForSelector('[data-testid=attainment-chart] circle');
    const pts = await page.locator('[data-testid=attainment-chart] circle').evaluateAll((cs) =>
      cs.map((c) => ({ v: Number(c.getAttribute('data-sla-version')), a: Number(c.getAttribute('data-attainment')) })));
    assert.equal(pts.length, 2, 'only the two runs attributed to the tenant');
    const v1 = pts.find((p) => p.v === 1), v2 = pts.find((p) => p.v === 2);
    assert.ok(v1 && v2, JSON.stringify(pts));
    assert.ok(v2.a < v1.a, `the tighter SLA lowers attainment: ${v1.a} → ${v2.a}`);
    assert.equal(await page.locator('[data-testid=attainment-chart] [data-version-mark]').count(), 2);
    const stats = await api(`/tenants/${id}/stats`, t.api_key);
    const byRun = Object.fromEntries(stats.runs.map((r) => [r.run_id, r]));
    assert.equal(byRun[loose.id].sla_version, 1);
    assert.equal(byRun[tight.id].sla_version, 2);
    const rows = await page.locator('table.tenant-runs tbody tr').allTextContents();
    assert.ok(rows[0].includes('v2') && rows[1].includes('v1'), rows.join(' | '));
    await shot(page, '55-tenant-attainment');
    noErrors(page);
  });
});
