// Drives zoom and pan on the timeline and summarises the frame times the page records
// (window.__timeline.frames: draw time of each frame) and the frame pacing seen by a
// requestAnimationFrame loop running during the interaction.

export async function measure(page, canvasSel = '[data-testid=timeline-canvas]') {
  await page.waitForFunction(() => window.__timeline?.ready);
  const box = await page.locator(canvasSel).boundingBox();
  const cx = box.x + box.width / 2, cy = box.y + Math.min(box.height / 2, 200);
  await page.evaluate(() => {
    window.__timeline.frames.length = 0;
    window.__pacing = [];
    const loop = (t) => { window.__pacing.push(t); if (window.__pacing.length < 100000 && !window.__stopPacing) requestAnimationFrame(loop); };
    window.__stopPacing = false;
    requestAnimationFrame(loop);
  });
  const step = () => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
  await page.mouse.move(cx, cy);
  for (let i = 0; i < 30; i++) { await page.mouse.wheel(0, -120); await step(); }   // zoom in
  await page.mouse.down();
  for (let i = 0; i < 30; i++) { await page.mouse.move(cx - i * 12, cy); await step(); } // drag pan
  await page.mouse.up();
  for (let i = 0; i < 30; i++) { await page.mouse.wheel(0, 120); await step(); }    // zoom out
  await page.mouse.down();
  for (let i = 0; i < 30; i++) { await page.mouse.move(cx - 360 + i * 12, cy); await step(); } // pan back
  await page.mouse.up();
  const r = await page.evaluate(() => {
    window.__stopPacing = true;
    return { frames: window.__timeline.frames, pacing: window.__pacing };
  });
  const draws = r.frames.map((f) => f.draw_ms);
  const big = r.frames.filter((f) => f.ops >= 200000).map((f) => f.draw_ms);
  const gaps = r.pacing.slice(1).map((t, i) => t - r.pacing[i]);
  return {
    frames: draws.length, frames_200k: big.length,
    draw_ms: stats(draws), draw_ms_200k: stats(big), frame_interval_ms: stats(gaps),
    max_ops_in_view: Math.max(0, ...r.frames.map((f) => f.ops)),
  };
}

function stats(v) {
  if (!v.length) return null;
  const s = [...v].sort((a, b) => a - b);
  const q = (p) => +s[Math.min(s.length - 1, Math.floor(p * s.length))].toFixed(2);
  return { p50: q(0.5), p95: q(0.95), max: +s[s.length - 1].toFixed(2), mean: +(v.reduce((a, b) => a + b, 0) / v.length).toFixed(2) };
}
