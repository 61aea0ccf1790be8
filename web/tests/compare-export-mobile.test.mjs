// Browser tests of issue 15, points 4–8, against the real service and database: replays
// compared side by side from the runs list, an uploaded plugin tried, activated and run
// from the new-run form, exports that parse, readable charts (read-outs, data tables,
// targets, goodput named), deep links across sign-in and tabs, and the 390 px layout
// with touch and keyboard use of the timeline.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { api, BASE, launch, newPage, shot, signIn } from './browser.mjs';
import { ADMIN, setup } from './fixtures.mjs';

let fx, browser, close;

/** A finished replay of smoke at this rate scale (started when missing). */
async function scaled(policy, rate) {
  const page = await api(`/runs?scenario=smoke&status=succeeded&kind=replay&limit=100`, ADMIN);
  // Older APIs do not return a run's rate scale: then a new one is started.
  const hit = page.items.find((r) => r.scenario === 'smoke' && r.policies.join() === policy && r.rate_scale === rate);
  if (hit) return hit;
  const r = await api('/runs', ADMIN, { method: 'POST', body: JSON.stringify({ kind: 'replay', scenario: 'smoke', policy, rate_scale: rate }) });
  return waitRun(r.id);
}

async function waitRun(id, s = 600) {
  const t0 = Date.now();
  for (;;) {
    const r = await api(`/runs/${id}`, ADMIN);
    if (!['queued', 'running'].includes(r.status)) {
      if (r.status !== 'succeeded') throw new Error(`run ${id} ended ${r.status}: ${r.error}`);
      return r;
    }
    if (Date.now() - t0 > s * 1000) throw new Error(`run ${id} still ${r.status}`);
    await new Promise((res) => setTimeout(res, 1000));
  }
}

before(async () => {
  fx = await setup();
  fx.half = await scaled('slice', 0.5);
  ({ browser, close } = await launch());
});
after(async () => { await close?.(); });

function noErrors(page) {
  const real = page.errors.filter((e) => !/status of 40[1349]|Failed to load resource/.test(e));
  assert.deepEqual(real, [], 'no script errors');
}

/** RFC 4180 CSV into rows of strings (quoted fields, doubled quotes, CRLF or LF). */
function parseCsv(text) {
  const rows = [];
  let row = [], cell = '', q = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (q) {
      if (c === '"' && text[i + 1] === '"') { cell += '"'; i++; } else if (c === '"') q = false; else cell += c;
    } else if (c === '"') q = true;
    else if (c === ',') { row.push(cell); cell = ''; }
    else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(cell); rows.push(row); row = []; cell = '';
    } else cell += c;
  }
  if (cell || row.length) { row.push(cell); rows.push(row); }
  return rows;
}

/** Clicks `selector` and returns the downloaded file's name and bytes. */
async function download(page, selector) {
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 60000 }), page.click(selector)]);
  const file = await dl.path();
  return { name: dl.suggestedFilename(), bytes: fs.readFileSync(file) };
}

describe('compare replays', () => {
  test('two replays and a 0.5× one, selected in the runs list, side by side with ratios, overlaid charts and tenant tables', async () => {
    const page = await newPage(browser);
    await signIn(page, fx.analystKey);
    await page.fill('input[name=scenario]', 'smo'); // part of the name is enough
    await page.waitForSelector(`tr[data-run="${fx.dedicated.id}"]`);
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid=runs-table] tbody tr')]
      .every((r) => r.textContent.includes('smoke')));
    assert.equal(await page.isDisabled('[data-testid=compare-selected]'), true, 'nothing selected yet');
    for (const r of [fx.dedicated, fx.slice, fx.half]) await page.check(`input[data-pick="${r.id}"]`);
    await page.click('a[data-testid=compare-selected]');
    await page.waitForSelector('[data-testid=compare-summary]');
    const url = new URL(page.url());
    assert.match(url.hash, new RegExp(`runs=${fx.dedicated.id},${fx.slice.id},${fx.half.id}`));
    // The summary's figures are the API's, each with its ratio to the baseline (the first run).
    const out = (id) => page.getAttribute(`tr[data-metric="Output tokens/s"] td[data-run="${id}"]`, 'data-value').then(Number);
    assert.equal(await out(fx.slice.id), fx.slice.summary.output_tokens_per_s);
    assert.equal(await out(fx.half.id), fx.half.summary.output_tokens_per_s);
    const r = Number(await page.getAttribute(`tr[data-metric="Output tokens/s"] td[data-run="${fx.slice.id}"]`, 'data-ratio'));
    assert.ok(Math.abs(r - fx.slice.summary.output_tokens_per_s / fx.dedicated.summary.output_tokens_per_s) < 1e-9);
    const v = await page.getAttribute(`tr[data-metric="SLA violation rate"] td[data-run="${fx.half.id}"]`, 'data-value');
    assert.equal(Number(v), fx.half.summary.violation_rate);
    // One line per run on each over-time chart, on one time axis.
    for (const id of ['compare-output', 'compare-prompt', 'compare-violations']) {
      await page.waitForSelector(`[data-testid=${id}] svg path[data-series]`);
      assert.equal(await page.locator(`[data-testid=${id}] svg path[data-series]`).count(), 3, id);
    }
    const axes = await page.$$eval('[data-testid^=compare-] svg', (svgs) => svgs.map((s) => [...s.querySelectorAll('text.xtick')]
      .map((t) => `${t.getAttribute('x')}:${t.textContent}`).join('|')));
    assert.equal(axes.length, 3);
    assert.equal(new Set(axes).size, 1, `the over-time charts share one time axis: ${axes}`);
    // Hover read-out names every run's value at that time.
    const box = await page.locator('[data-testid=compare-output] svg').boundingBox();
    await page.mouse.move(box.x + box.width * 0.4, box.y + box.height / 2);
    const tip = await page.textContent('[data-testid=compare-output] [data-testid=readout]');
    assert.match(tip, /simulated time/);
    for (const run of [fx.dedicated, fx.slice]) assert.ok(tip.includes(run.id.slice(0, 8)), tip);
    // Per tenant: each run's violation rate as the API has it.
    for (const t of fx.slice.summary.tenants) {
      const cell = await page.textContent(`[data-testid=compare-tenants] tr[data-tenant="${t.name}"] td[data-run="${fx.slice.id}"]`);
      assert.equal(cell, `${(t.violation_rate * 100).toFixed(1)} %`);
    }
    await shot(page, '50-compare-runs');
    // The baseline can change; the URL says so and the ratios follow.
    await page.selectOption('#compare-base', String(fx.slice.id));
    await page.waitForFunction((id) => location.hash.includes(`base=${id}`), fx.slice.id);
    await page.waitForSelector(`tr[data-metric="Output tokens/s"] td[data-run="${fx.dedicated.id}"][data-ratio]:not([data-ratio=""])`);
    // A deep link opened in a new tab of the same browser works without signing in again.
    const tab = await page.context().newPage();
    await tab.goto(page.url());
    await tab.waitForSelector('[data-testid=compare-summary]');
    assert.match(await tab.title(), /Compare 3 runs/);
    // Runs of another scenario are refused, saying why.
    const other = await api('/runs?kind=replay&limit=100', ADMIN);
    const foreign = other.items.find((x) => x.scenario !== 'smoke');
    if (foreign) {
      await page.goto(`${BASE}/#/compare?runs=${fx.dedicated.id},${foreign.id}`);
      await page.waitForSelector('[data-testid=compare-refused]');
    }
    noErrors(page);
  });
});

describe('plugins from the UI', () => {
  test('an uploaded plugin is stored inactive, tried, activated by an admin and run from the new-run form', async () => {
    const wasm = path.resolve(import.meta.dirname, '..', '..', 'target', 'plugins', 'earliest.wasm');
    if (!fs.existsSync(wasm)) {
      test.diagnostic?.('target/plugins/earliest.wasm not built: plugin flow not exercised');
      return;
    }
    const page = await newPage(browser);
    await signIn(page, ADMIN);
    // Before: the form offers exactly the API's active policies, and not this one.
    await page.click('summary:has-text("New run")');
    await page.waitForSelector('[data-testid=policy-choices] input');
    const offered = await page.$$eval('[data-testid=policy-choices] input', (xs) => xs.map((x) => x.value));
    const active = [...new Set((await api('/plugins', ADMIN)).items.filter((p) => p.state === 'active').map((p) => p.name))].sort();
    assert.deepEqual(offered, active);
    assert.ok(!offered.includes('earliest'));
    await page.keyboard.press('Escape');
    assert.equal(await page.isVisible('details.new-run form'), false, 'Escape closes the form');

    await page.click('nav a:has-text("Plugins")');
    await page.setInputFiles('#plugin-file', wasm);
    await page.click('button:has-text("Upload and validate")');
    await page.waitForSelector('[data-outcome]', { timeout: 60000 });
    let plugin = (await api('/plugins', ADMIN)).items.find((p) => p.name === 'earliest' && !p.builtin);
    assert.ok(plugin, 'stored');
    if (await page.isVisible('[data-outcome=accepted]')) assert.equal(plugin.state, 'inactive', 'an upload waits for an admin');
    await page.goto(`${BASE}/#/plugins/${plugin.id}`);
    await page.waitForSelector('[data-testid=trial-form]');
    assert.match(await page.title(), /Plugin/);
    if (plugin.state !== 'active') {
      await page.click('[data-testid=trial-form] button[type=submit]');
      await page.waitForSelector('[data-testid=trial-runs] [data-status]');
      const trial = (await api(`/runs?policy=plugin:${plugin.id}`, ADMIN)).items[0];
      assert.deepEqual(trial.policies, [`plugin:${plugin.id}`]);
      await waitRun(trial.id);
      await page.waitForSelector('[data-testid=trial-runs] [data-status=succeeded]', { timeout: 60000 });
      assert.equal((await api(`/plugins/${plugin.id}`, ADMIN)).state, 'inactive', 'a trial activates nothing');
      await shot(page, '51-plugin-trial');
      await page.click('button[data-action=activate]');
      await page.waitForSelector('[data-state=active]');
    }
    plugin = await api(`/plugins/${plugin.id}`, ADMIN);
    assert.equal(plugin.state, 'active');

    // Now the form offers it, and a replay started there runs it.
    await page.click('nav a:has-text("Runs")');
    await page.click('summary:has-text("New run")');
    await page.waitForSelector('[data-testid=policy-choices] input[value=earliest]');
    await page.selectOption('select[name=kind]', 'replay');
    await page.waitForSelector('select[name=scenario] option[value=smoke]', { state: 'attached' });
    await page.selectOption('select[name=scenario]', 'smoke');
    for (const b of await page.$$('[data-testid=policy-choices] input:checked')) await b.uncheck();
    await page.check('[data-testid=policy-choices] input[value=earliest]');
    await page.selectOption('select[name=replan]', 'online');
    await page.selectOption('select[name=plan]', 'serving-first');
    await page.click('details.new-run button[type=submit]');
    let run = null;
    for (let k = 0; k < 100 && !run; k++) {
      run = (await api('/runs?policy=earliest&limit=1', ADMIN)).items[0] ?? null;
      if (!run) await page.waitForTimeout(100);
    }
    assert.ok(run, 'the form started a run of the uploaded policy');
    await page.waitForSelector(`tr[data-run="${run.id}"]`);
    const done = await waitRun(run.id);
    assert.equal(done.summary.policy, 'earliest');
    // The form's modes reach the run: recorded with its parameters, replayed with them.
    assert.equal(done.params.core.replan, 'online');
    assert.equal(done.params.core.kv_migration, 'off');
    assert.equal(done.params.core.plan, 'serving-first');
    noErrors(page);
  });
});

/** Starts a run of `dedicated` on smoke from the new-run form, with these inputs filled; the new run. */
async function startFromForm(page, kind, fields) {
  await page.click('nav a:has-text("Runs")');
  await page.click('summary:has-text("New run")');
  await page.waitForSelector('[data-testid=policy-choices] input[value=dedicated]');
  await page.selectOption('select[name=kind]', kind);
  await page.waitForSelector('select[name=scenario] option[value=smoke]', { state: 'attached' });
  await page.selectOption('select[name=scenario]', 'smoke');
  for (const b of await page.$$('[data-testid=policy-choices] input:checked')) await b.uncheck();
  await page.check('[data-testid=policy-choices] input[value=dedicated]');
  for (const [name, value] of Object.entries(fields)) await page.fill(`input[name=${name}]`, value);
  const list = `/runs?kind=${kind}&limit=100`;
  const before = new Set((await api(list, ADMIN)).items.map((r) => r.id));
  await page.click('details.new-run button[type=submit]');
  for (let k = 0; k < 100; k++) {
    const run = (await api(list, ADMIN)).items.find((r) => !before.has(r.id));
    if (run) return waitRun(run.id);
    await page.waitForTimeout(100);
  }
  throw new Error(`the form started no ${kind}`);
}

describe('sweeps of several draws', () => {
  test('a sweep of two draws started from the form replays both and its page says so; one draw replays alone', async () => {
    const page = await newPage(browser);
    await signIn(page, ADMIN);
    const done = await startFromForm(page, 'sweep', { violation_targets: '0.09', seeds: '2' });
    assert.equal(done.params.seeds, 2);
    assert.equal(done.summary.seeds.length, 2, 'the summary lists both draws');
    await page.goto(`${BASE}/#/runs/${done.id}`);
    // A finished sweep opens on its results: each dot says it is two replays, and the
    // parameters say how they were drawn.
    await page.waitForSelector('[data-testid=sweep-dots]');
    assert.match(await page.textContent('[data-testid=sweep-dots]'), /Each dot is 2 full replays, one per draw/);
    await page.waitForSelector('[data-testid=run-params]');
    assert.match(await page.textContent('[data-testid=run-params]'), /Draws per point\s*2: seed 7,/);

    // The second draw alone, as a replay from the same form.
    const drawn = await startFromForm(page, 'replay', { draw: '1' });
    assert.equal(drawn.params.draw, 1);
    await page.goto(`${BASE}/#/runs/${drawn.id}`);
    await page.waitForSelector('[data-testid=run-params]');
    assert.match(await page.textContent('[data-testid=run-params]'), /Seed\s*7, draw 1 \(/);
    assert.match(await page.textContent('[data-testid=run-label]'), / · 1× · draw 1$/, 'its label tells it from the file\'s draw');
    await page.click('nav a:has-text("Runs")');
    await page.waitForSelector(`tr[data-run="${drawn.id}"] [data-draw="draw 1"]`);
    await page.waitForSelector(`tr[data-run="${done.id}"] [data-draw="2 draws"]`);
    noErrors(page);
  });
});

describe('export and readability', () => {
  test('a run exports its summary, requests and series as files that parse; charts save as PNG and SVG and read out', async () => {
    const page = await newPage(browser);
    await signIn(page, fx.analystKey);
    await page.goto(`${BASE}/#/runs/${fx.slice.id}`);
    await page.waitForSelector('[data-testid=export-panel]');
    assert.match(await page.title(), new RegExp(`Run #${fx.slice.id.slice(0, 8)}`));
    await page.waitForFunction(() => document.activeElement?.tagName === 'H1', null, { timeout: 5000 }); // focus moved to the page
    const s = fx.slice.summary;
    const req = await download(page, 'button[data-export="requests.csv"]');
    assert.equal(req.name, `run-${fx.slice.id}-requests.csv`);
    const rows = parseCsv(req.bytes.toString('utf8'));
    assert.equal(rows[0][0], 'id');
    assert.equal(rows.length - 1, s.requests);
    const viol = rows[0].indexOf('violated');
    assert.equal(rows.slice(1).filter((r) => r[viol] === 'true').length, Math.round(s.violation_rate * s.requests));
    const series = JSON.parse((await download(page, 'button[data-export="series.json"]')).bytes.toString('utf8'));
    const apiSeries = await api(`/runs/${fx.slice.id}/series`, fx.analystKey);
    assert.equal(series.length, apiSeries.output_tokens.length);
    assert.equal(series.reduce((a, r) => a + r.output_tokens, 0), apiSeries.output_tokens.reduce((a, b) => a + b, 0));
    const sum = parseCsv((await download(page, 'button[data-export="summary.csv"]')).bytes.toString('utf8'));
    assert.equal(sum.length - 1, 1 + s.tenants.length);
    assert.equal(Number(sum[1][sum[0].indexOf('output_tokens_per_s')]), s.output_tokens_per_s);
    assert.deepEqual(JSON.parse((await download(page, 'button[data-export="summary.json"]')).bytes), s);

    // Output and prompt tokens/s each on their own chart; one time axis for all of them.
    await page.waitForSelector('[data-testid=chart-throughput] svg path[data-series]');
    await page.waitForSelector('[data-testid=chart-prompt] svg path[data-series]');
    const png = await download(page, '[data-testid=chart-throughput] button[data-save=png]');
    assert.deepEqual([...png.bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'a PNG');
    assert.ok(png.bytes.length > 2000);
    const svgFile = (await download(page, '[data-testid=chart-throughput] button[data-save=svg]')).bytes.toString('utf8');
    assert.match(svgFile, /^<svg[^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    assert.match(svgFile, /output tokens\/s/);
    const csv = parseCsv((await download(page, '[data-testid=chart-throughput] button[data-save=csv]')).bytes.toString('utf8'));
    assert.deepEqual(csv[0], ['simulated time (s)', 'output tokens/s']);
    // The data as a table for screen readers, and a read-out by keyboard.
    assert.ok(await page.locator('[data-testid=chart-throughput] details.chart-data table tbody tr').count() > 1);
    await page.focus('[data-testid=chart-throughput] svg');
    await page.keyboard.press('ArrowRight');
    assert.match(await page.textContent('[data-testid=chart-throughput] [data-testid=readout]'), /output tokens\/s: \S+/);
    await page.keyboard.press('Escape');
    assert.equal(await page.isVisible('[data-testid=chart-throughput] [data-testid=readout]'), false);
    // A replay has no violation target of its own: no dashed 9 % invented for it.
    assert.equal(await page.locator('[data-testid=chart-violations] line.hline').count(), 0);
    assert.match(await page.textContent('[data-card="Goodput"]'), /requests within SLA per second/);
    // Times in UTC or local, labelled.
    assert.match(await page.textContent('.meta'), /UTC/);
    await page.click('[data-testid=zone-toggle]');
    await page.waitForSelector('.meta:has-text("local, UTC")');
    await page.click('[data-testid=zone-toggle]');
    await shot(page, '52-run-exports');

    // A sweep: points as CSV, its targets drawn from the sweep itself.
    await page.goto(`${BASE}/#/compare?run=${fx.sweep.id}`);
    await page.waitForSelector('[data-testid=export-panel]');
    const pts = parseCsv((await download(page, 'button[data-export="points.csv"]')).bytes.toString('utf8'));
    assert.equal(pts.length - 1, fx.sweep.summary.points.length);
    const targets = [...new Set(fx.sweep.summary.results.map((r) => r.target))];
    assert.equal(await page.locator('[data-testid=sweep-chart] line.hline').count(), targets.length);
    noErrors(page);
  });

  test('a deep link survives sign-in', async () => {
    const page = await newPage(browser);
    await page.goto(`${BASE}/#/runs/${fx.dedicated.id}`);
    await page.waitForSelector('#api-key');
    assert.match(page.url(), /signin\?next=/);
    await page.fill('#api-key', fx.analystKey);
    await page.click('button[type=submit]');
    await page.waitForSelector('[data-testid=summary-cards]');
    assert.match(page.url(), new RegExp(`#/runs/${fx.dedicated.id}$`));
    noErrors(page);
  });
});

describe('any screen, any input', () => {
  async function phone() {
    const ctx = await browser.newContext({ viewport: { width: 390, height: 844 }, hasTouch: true, isMobile: true, deviceScaleFactor: 2, bypassCSP: true });
    const page = await ctx.newPage();
    page.errors = [];
    page.on('pageerror', (e) => page.errors.push(String(e)));
    return page;
  }
  const width = (page) => page.evaluate(() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth));

  test('at 390 px no page is wider than the screen, the menu folds, tables scroll in their panels', async () => {
    const page = await phone();
    await signIn(page, ADMIN);
    const pages = [
      ['runs', '#/runs', '[data-testid=runs-table]'],
      ['run', `#/runs/${fx.slice.id}`, '[data-testid=chart-throughput] svg'],
      ['compare-runs', `#/compare?runs=${fx.dedicated.id},${fx.slice.id}`, '[data-testid=compare-output] svg'],
      ['compare-sweep', `#/compare?run=${fx.sweep.id}`, '[data-testid=sweep-chart] svg'],
      ['tenants', '#/tenants', 'table.tenant-list'],
      ['plugins', '#/plugins', 'table.plugins'],
      ['keys', '#/keys', 'table'],
      ['audit', '#/audit', '[data-testid=audit-table]'],
      ['timeline', `#/runs/${fx.slice.id}/timeline`, '[data-testid=timeline-canvas]'],
    ];
    for (const [name, hash, sel] of pages) {
      await page.goto(`${BASE}/${hash}`);
      await page.waitForSelector(sel);
      await page.waitForTimeout(150);
      assert.ok(await width(page) <= 390, `${name}: ${await width(page)} px wide at 390`);
      await shot(page, `53-phone-${name}`);
    }
    // The navigation folds behind a menu button; Escape closes it, a link navigates.
    await page.goto(`${BASE}/#/runs`);
    await page.waitForSelector('[data-testid=runs-table]');
    assert.equal(await page.isVisible('nav a:has-text("Plugins")'), false);
    await page.click('.nav-toggle');
    assert.equal(await page.getAttribute('.nav-toggle', 'aria-expanded'), 'true');
    await page.waitForSelector('nav a:has-text("Plugins")', { state: 'visible' });
    await page.keyboard.press('Escape');
    assert.equal(await page.isVisible('nav a:has-text("Plugins")'), false);
    await page.click('.nav-toggle');
    await page.click('nav a:has-text("Plugins")');
    await page.waitForSelector('table.plugins');
    assert.equal(await page.isVisible('nav a:has-text("Runs")'), false, 'the menu closes after a pick');
    // The runs table is wider than the screen: it scrolls inside its panel.
    await page.goto(`${BASE}/#/runs`);
    await page.waitForSelector('[data-testid=runs-table]');
    // (The table itself or its box is the scroller, whichever the layout makes it.)
    const scroll = await page.$eval('[data-testid=runs-table]', (t) => [t, t.closest('.table-scroll'), t.closest('.panel, main')]
      .filter(Boolean).map((e) => ({ sw: e.scrollWidth, cw: e.clientWidth, ox: getComputedStyle(e).overflowX })));
    const scroller = scroll.find((x) => x.ox === 'auto' && x.sw > x.cw);
    assert.ok(scroller, `the runs table scrolls inside its panel: ${JSON.stringify(scroll)}`);
    assert.ok(scroller.cw <= 390);
    // It really scrolls: the last column comes into view.
    await page.$eval('[data-testid=runs-table]', (t) => { for (const e of [t, t.closest('.table-scroll')]) e.scrollLeft = 10000; });
    assert.ok(await page.$eval('[data-testid=runs-table]', (t) => Math.max(t.scrollLeft, t.closest('.table-scroll').scrollLeft)) > 0);
    noErrors(page);
  });

  test('the timeline pans by touch and shows an op by tap, and by keyboard alone', async () => {
    const page = await phone();
    await signIn(page, fx.analystKey);
    const meta = await api(`/runs/${fx.slice.id}/timeline/meta`, fx.analystKey);
    await page.goto(`${BASE}/#/runs/${fx.slice.id}/timeline`);
    await page.waitForFunction(() => window.__timeline?.ready, null, { timeout: 60000 });
    // Down to single ops around a real one on GPU 0, inside the recorded start window
    // (elsewhere the timeline answers buckets).
    // The query must lie wholly inside the window: the run's span starts before it.
    const start = meta.windows.find((w) => w.reason === 'start' && w.status === 'recorded');
    const near = await api(`/runs/${fx.slice.id}/timeline?from_ns=${start.from_ns}&to_ns=${start.recorded_to_ns}&gpus=0&max_ops=500000`, fx.analystKey);
    assert.equal(near.mode, 'ops', `the start window answers ops: ${JSON.stringify(start)}`);
    const i = Math.floor(near.ops.start_ns.length / 2);
    const mid = (near.ops.start_ns[i] + near.ops.end_ns[i]) / 2;
    await page.evaluate((m) => window.__timeline.setView(m - 5e5, m + 5e5), mid);
    await page.waitForTimeout(300);
    await page.waitForFunction(() => window.__timeline.ready && window.__timeline.modes.every((m) => m === 'ops'), null, { timeout: 30000 });
    const box = await page.locator('[data-testid=timeline-canvas]').boundingBox();
    assert.ok(box.width <= 390);
    // Drag pans (a touch drag is a pointer drag).
    const v0 = await page.evaluate(() => ({ ...window.__timeline.view }));
    await page.mouse.move(box.x + 250, box.y + 60);
    await page.mouse.down();
    await page.mouse.move(box.x + 150, box.y + 60, { steps: 5 });
    await page.mouse.up();
    const v1 = await page.evaluate(() => ({ ...window.__timeline.view }));
    assert.ok(v1.from > v0.from, 'dragging left moves later in time');
    await page.evaluate((m) => window.__timeline.setView(m - 5e5, m + 5e5), mid);
    await page.waitForTimeout(300);
    await page.waitForFunction(() => window.__timeline.ready && window.__timeline.modes.every((m) => m === 'ops'), null, { timeout: 30000 });
    const v = await page.evaluate(() => window.__timeline.view);
    const x = box.x + 84 + ((mid - v.from) / (v.to - v.from)) * (box.width - 84);
    let tip = null;
    for (let dy = 30; dy < 140 && !tip; dy += 4) {
      await page.touchscreen.tap(x, box.y + dy);
      if (await page.isVisible('[data-testid=op-tooltip]')) tip = await page.textContent('[data-testid=op-tooltip]');
    }
    assert.ok(tip, 'a tap on a bar shows the op');
    assert.match(tip, /kind.*actual.*predicted/s);
    await shot(page, '54-phone-timeline-tap');
    await page.keyboard.press('Escape');
    // Keyboard only: focus the canvas, Enter shows an op, ] steps to the next one.
    await page.focus('[data-testid=timeline-canvas]');
    await page.keyboard.press('Enter');
    await page.waitForSelector('[data-testid=op-tooltip]');
    const a = await page.textContent('[data-testid=op-tooltip]');
    await page.keyboard.press(']');
    const b = await page.textContent('[data-testid=op-tooltip]');
    assert.notEqual(a, b, 'the next op');
    await page.keyboard.press('PageDown');
    assert.match(await page.textContent('.tooltip'), /GPU/);
    await page.keyboard.press('Escape');
    assert.equal(await page.isVisible('.tooltip'), false, 'Escape closes the details');
    noErrors(page);
  });
});
