// Twelve qualitative colours (Tableau 10 plus two) chosen so that adjacent tenants differ
// in hue and lightness; past twelve the hue repeats with a darker shade so 24 tenants
// still stay apart.
const BASE = [
  '#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948',
  '#b07aa1', '#ff9da7', '#9c755f', '#5d5d5d', '#17becf', '#b6992d',
];

export function tenantColor(i: number): string {
  const c = BASE[((i % BASE.length) + BASE.length) % BASE.length];
  return i >= BASE.length ? shade(c, 0.6) : c;
}

function shade(hex: string, f: number): string {
  const n = parseInt(hex.slice(1), 16);
  const r = Math.round(((n >> 16) & 255) * f);
  const g = Math.round(((n >> 8) & 255) * f);
  const b = Math.round((n & 255) * f);
  return `#${((r << 16) | (g << 8) | b).toString(16).padStart(6, '0')}`;
}

/** The same colours as packed RGBA for pixel-level drawing. */
export function tenantRgba(i: number): number {
  const n = parseInt(tenantColor(i).slice(1), 16);
  // ImageData is little-endian ABGR when viewed as Uint32.
  return (0xff << 24) | ((n & 255) << 16) | (n & 0xff00) | ((n >> 16) & 255);
}

export const POLICY_COLORS: Record<string, string> = {
  dedicated: '#5d5d5d',
  timeslice: '#f28e2b',
  mps: '#b07aa1',
  pooled: '#76b7b2',
  slice: '#e15759',
};

export function policyColor(p: string, i: number): string {
  return POLICY_COLORS[p] ?? tenantColor(i);
}
