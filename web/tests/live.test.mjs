// A live run in the browser: two tiny tenants served on the CPU executor, the run page
// labelled live and updating on its own (no reload) as requests end, and the finished
// run once the cluster stops.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, BASE, launch, newPage, shot, signIn } from './browser.mjs';
import { ADMIN } from './fixtures.mjs';

let browser, close, cluster, keys;

async function complete(key, model, prompt) {
  const res = await fetch(`${BASE}/v1/completions`, { method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, prompt, max_tokens: 8, temperature: 0 }) });
  assert.equal(res.status, 200, await res.clone().text());
  return res.json();
}

before(async () => {
  ({ browser, close } = await launch());
  const suffix = Date.now().toString(36);
  const names = [`ui-live-a-${suffix}`, `ui-live-b-${suffix}`];
  keys = [];
  for (const name of names) {
    const t = await api('/tenants', ADMIN, { method: 'POST', body: JSON.stringify({ name, sla: { ttft_ms: 2000, tpot_ms: 300 } }) });
    keys.push(t.api_key);
  }
  cluster = await api('/live', ADMIN, { method: 'POST', body: JSON.stringify({
    devices: 'cpu:2', gpu_memory_utilization: 0.001, drain_s: 1,
    // Every operator sampled: the test's few requests are sure to be on the timeline.
    op_sample: { every_s: 1, length_s: 1 },
    tenants: [
      { name: names[0], model: 'tiny-2l', seed: 1, gpus: [0], max_model_len: 1024 },
      { name: names[1], model: 'tiny-4l', seed: 2, gpus: [1], max_model_len: 1024 },
    ] }) });
});
after(async () => {
  await api('/live', ADMIN, { method: 'DELETE' }).catch(() => undefined);
  await close?.();
});

describe('live run', () => {
  test('the run page of a live cluster is labelled live and updates on its own', async () => {
    await complete(keys[0], 'tiny-2l', 'first');
    const page = await newPage(browser);
    await signIn(page, ADMIN);
    await page.goto(`${BASE}/#/runs/${cluster.id}`);
    await page.waitForSelector('[data-testid=live-badge]');
    await page.waitForSelector('[data-testid=live-note]');
    await page.waitForSelector('[data-testid=live-served]:has-text("1 requests ended")', { timeout: 20000 });
    await page.waitForSelector('[data-testid=live-figures] [data-testid=summary-cards]');
    await shot(page, '60-live-run');
    // More traffic: the page shows it without a reload.
    await complete(keys[1], 'tiny-4l', 'second');
    await complete(keys[0], 'tiny-2l', 'third');
    await page.waitForSelector('[data-testid=live-served]:has-text("3 requests ended")', { timeout: 20000 });
    const tenants = await page.locator('[data-testid=live-figures]').textContent();
    assert.match(tenants, /ui-live-a-/);
    // Its charts run on the wall clock, and say so: nothing on a live run is simulated.
    await page.waitForSelector('[data-testid=live-figures] [data-testid=chart-throughput]');
    const chart = await page.locator('[data-testid=live-figures] [data-testid=chart-throughput]').textContent();
    assert.match(chart, /time since the cluster started/);
    assert.doesNotMatch(await page.locator('[data-testid=live-figures]').textContent(), /simulated/);
    // The stop ends the run: the page turns into the finished run's, still labelled live.
    await api('/live', ADMIN, { method: 'DELETE' });
    await page.waitForSelector('.badge-succeeded', { timeout: 20000 });
    await page.waitForSelector('[data-testid=live-badge]');
    await page.waitForSelector('[data-testid=summary-cards]');
    await page.waitForSelector('[data-testid=chart-throughput]:has-text("time since the cluster started")', { timeout: 20000 });
    await shot(page, '61-live-run-stopped');
    const run = await api(`/runs/${cluster.id}`, ADMIN);
    assert.equal(run.status, 'succeeded');
    assert.equal(run.summary.completed, 3);
    // Its timeline holds the operators sampled while it served, predicted against measured.
    await page.click('a:has-text("Open timeline")');
    await page.waitForFunction('window.__timeline?.ready', null, { timeout: 60000 });
    const windows = await page.locator(`[data-testid="windows-${cluster.id}"]`).textContent();
    assert.match(windows, /sampled while serving/);
    assert.match(windows, /operator records/);
    await page.locator(`[data-testid="windows-${cluster.id}"] li button:has-text("Show")`).first().click();
    await page.waitForFunction("window.__timeline.ready && window.__timeline.modes[0] === 'ops' && window.__timeline.opsInView > 0", null, { timeout: 30000 })
      .catch(async (e) => {
        await shot(page, '62-live-run-timeline-failed');
        throw new Error(`${e}: ${JSON.stringify(await page.evaluate(() => ({ ...window.__timeline, frames: undefined })))}; ${windows}`);
      });
    await shot(page, '62-live-run-timeline');
  });
});
