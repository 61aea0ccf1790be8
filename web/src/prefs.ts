// The user's display choices, kept in localStorage (they are not secrets): times in UTC
// or the browser's local zone.

const TZ = 'slicesched.tz';

export type Zone = 'utc' | 'local';

export function zone(): Zone {
  try {
    return localStorage.getItem(TZ) === 'local' ? 'local' : 'utc';
  } catch {
    return 'utc';
  }
}

export function setZone(z: Zone): void {
  try { localStorage.setItem(TZ, z); } catch { /* private mode: the choice lasts this page */ }
}

/** "UTC", or the local zone as an offset ("UTC+01:00") with its name where the browser knows it. */
export function zoneLabel(z: Zone = zone(), at = new Date()): string {
  if (z === 'utc') return 'UTC';
  const off = -at.getTimezoneOffset();
  const sign = off >= 0 ? '+' : '−';
  const hh = String(Math.floor(Math.abs(off) / 60)).padStart(2, '0'), mm = String(Math.abs(off) % 60).padStart(2, '0');
  return `local, UTC${sign}${hh}:${mm}`;
}
