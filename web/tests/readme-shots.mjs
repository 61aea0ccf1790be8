// The README's two web UI screenshots (docs/img/web-run-detail.png and web-timeline.png),
// taken from the real service: `bursty-8t` replayed under `slice` and `dedicated`, the
// run page of the `slice` replay, and the timeline of the two stacked around the
// stretch where `slice` borrowed most, recorded op by op. Not one of the tests (its name
// does not end in .test.mjs): `bash web/scripts/screenshots.sh` runs it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { api, BASE, launch, signIn } from './browser.mjs';
import { ADMIN, finished } from './fixtures.mjs';

const OUT = process.env.README_SHOTS_DIR ?? path.resolve(import.meta.dirname, '..', '..', 'docs', 'img');
const SIZE = { width: 1280, height: 900 };
let browser, close;

before(async () => { ({ browser, close } = await launch()); });
after(async () => { await close?.(); });

async function page() {
  const ctx = await browser.newContext({ viewport: SIZE, bypassCSP: true, deviceScaleFactor: 1 });
  return ctx.newPage();
}

const waitTimeline = (p, pred = 'true') =>
  p.waitForFunction(`window.__timeline?.ready && (${pred})`, null, { timeout: 120000 });

test('README screenshots', async () => {
  const [dedicated, slice] = await Promise.all([finished('replay', ['dedicated']), finished('replay', ['slice'])]);
  fs.mkdirSync(OUT, { recursive: true });

  const p = await page();
  await signIn(p, ADMIN);
  await p.goto(`${BASE}/#/runs/${slice.id}`);
  await p.waitForSelector('[data-testid=summary-cards]', { timeout: 60000 });
  await p.waitForTimeout(1500); // charts lay out after their data arrives
  await p.screenshot({ path: path.join(OUT, 'web-run-detail.png') });

  // Where `slice` borrowed most, from the whole-run buckets: 100 ms around it.
  const meta = await api(`/runs/${slice.id}/timeline/meta`, ADMIN);
  const all = await api(`/runs/${slice.id}/timeline?from_ns=0&to_ns=${meta.to_ns}`, ADMIN);
  const b = all.buckets;
  const i = b.borrowed_ns.reduce((best, v, j) => (v > b.borrowed_ns[best] ? j : best), 0);
  assert.ok(b.borrowed_ns[i] > 0, 'slice borrowed somewhere');
  const mid = b.t0_ns[i] + all.bucket_ns / 2;
  // Record that stretch op by op in both runs (a job replays each up to there).
  const [from_ns, to_ns] = [Math.floor(mid - 50e6), Math.ceil(mid + 50e6)];
  for (const run of [slice, dedicated]) {
    const w = await api(`/runs/${run.id}/timeline/windows`, ADMIN, { method: 'POST', body: JSON.stringify({ from_ns, to_ns }) });
    for (let n = 0; ; n++) {
      const ws = (await api(`/runs/${run.id}/timeline/windows`, ADMIN)).items;
      // The window queued, or the recorded one that already covers the stretch.
      const mine = ws.find((x) => x.id === w.id);
      if (mine?.status === 'recorded') break;
      assert.ok(!mine || ['queued', 'running'].includes(mine.status), JSON.stringify(mine));
      assert.ok(n < 600, 'window recorded within 10 minutes');
      await new Promise((res) => setTimeout(res, 1000));
    }
  }
  await p.goto(`${BASE}/#/runs/${slice.id}/timeline?with=${dedicated.id}`);
  await waitTimeline(p);
  await p.evaluate(([a, z]) => window.__timeline.setView(a, z), [from_ns, to_ns]);
  await waitTimeline(p, "window.__timeline.modes.every((m) => m === 'ops') && window.__timeline.borrowedInView > 0");
  await p.waitForTimeout(500);
  // Tall enough for both runs' eight GPUs.
  await p.setViewportSize({ width: SIZE.width, height: 1180 });
  await p.waitForTimeout(500);
  await p.screenshot({ path: path.join(OUT, 'web-timeline.png') });
  const t = await p.evaluate(() => ({ ...window.__timeline }));
  console.log(`timeline: ${t.opsInView} ops in view, ${t.borrowedInView} borrowed; run ${slice.id}`);
});
