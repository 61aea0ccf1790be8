// Debian's Chromium driven by playwright-core: Playwright's own browser download does
// not work here, and the background-networking flags keep Chromium from dialling out
// of a closed network.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';

export const BASE = process.env.BASE_URL ?? 'http://127.0.0.1:8080';
export const SHOTS = process.env.SHOTS_DIR ?? path.resolve(import.meta.dirname, '..', 'test-results');

export async function launch() {
  fs.mkdirSync(SHOTS, { recursive: true });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    // Playwright gives every launch a fresh temporary profile (it refuses --user-data-dir).
  });
  return { browser, close: () => browser.close() };
}

// bypassCSP: the tests poll the page with Playwright predicates (evaluated as strings,
// which the app's CSP refuses); the CSP itself is checked by api/tests (headers).
export async function newPage(browser) {
  const ctx = await browser.newContext({ viewport: { width: 1440, height: 1000 }, bypassCSP: true });
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.errors = errors;
  return page;
}

export async function shot(page, name) {
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

export async function signIn(page, key) {
  await page.goto(`${BASE}/#/signin`);
  await page.fill('#api-key', key);
  await page.click('button[type=submit]');
  await page.waitForSelector('[data-role]');
}

/** The REST API as the tests see it: for setup and for the numbers pages must show. */
export async function api(path, key, init = {}) {
  const res = await fetch(`${BASE}/api/v1${path}`, { ...init, headers: { Authorization: `Bearer ${key}`,
    ...(init.body && typeof init.body === 'string' ? { 'Content-Type': 'application/json' } : {}), ...init.headers } });
  const text = await res.text();
  if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}
