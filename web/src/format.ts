// One place decides units so every page says ms and tokens/s the same way.

import { zone, zoneLabel } from './prefs';

export function ms(v: number | null | undefined, digits = 1): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  if (v >= 10_000) return `${(v / 1000).toFixed(1)} s`;
  return `${v.toFixed(v < 10 ? Math.max(digits, 2) : digits)} ms`;
}

export function tokPerS(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  return `${num(v)} tok/s`;
}

export function num(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  if (Math.abs(v) >= 1e6) return `${(v / 1e6).toFixed(2)} M`;
  if (Math.abs(v) >= 1e4) return `${(v / 1e3).toFixed(1)} k`;
  return Number.isInteger(v) || Math.abs(v) >= 100 ? String(Math.round(v)) : v.toFixed(1);
}

export function pct(v: number | null | undefined, digits = 1): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  return `${(v * 100).toFixed(digits)} %`;
}

export function ratio(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  return `${v.toFixed(2)}×`;
}

/** Nanoseconds as a human duration with a unit that fits its size. */
export function dur(ns: number): string {
  const a = Math.abs(ns);
  if (a < 1e3) return `${ns.toFixed(0)} ns`;
  if (a < 1e6) return `${(ns / 1e3).toFixed(a < 1e4 ? 2 : 1)} µs`;
  if (a < 1e9) return `${(ns / 1e6).toFixed(a < 1e7 ? 3 : 2)} ms`;
  return `${(ns / 1e9).toFixed(3)} s`;
}

/** Wall-clock durations (how long a run took), in the units people say them in. */
export function wall(msTotal: number): string {
  const s = msTotal / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

/** A round duration for axis labels: 1 µs, 10 µs, 3.2 ms, 1 s. */
export function shortDur(ns: number): string {
  const [u, d] = ns >= 1e9 ? ['s', 1e9] : ns >= 1e6 ? ['ms', 1e6] : ns >= 1e3 ? ['µs', 1e3] : ['ns', 1];
  return `${+(ns / d).toPrecision(2)} ${u}`;
}

/** A timestamp in the zone the user chose (header toggle), always labelled with it. */
export function when(iso: string | null | undefined): string {
  if (!iso) return '–';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  if (zone() === 'utc') return d.toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())} (${zoneLabel('local', d)})`;
}

export function bytes(n: number): string {
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(1)} KiB`;
  return `${n} B`;
}

/** Run ids are UUIDs: the first 8 hex digits tell runs apart on a page, the link keeps all. */
export function shortId(id: string | number): string {
  const s = String(id);
  return `#${/^[0-9a-f]{8}-/.test(s) ? s.slice(0, 8) : s}`;
}
