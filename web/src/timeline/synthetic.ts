// A synthetic run for the scale benchmark (#/bench): decode-like bursts of operators
// per GPU with idle gaps between iterations, a share borrowed by other tenants, and
// activation transfers before borrowed ops. Deterministic (seeded), so frame times
// compare across builds.

import { allocOps, finishOps, type OpsData } from './data';

const KINDS = ['qkv_proj', 'attention', 'o_proj', 'mlp_up', 'mlp_down', 'rmsnorm'];

export function syntheticOps(n: number, gpus: number, tenants: number, seed = 1): OpsData {
  let s = seed >>> 0 || 1;
  const rnd = () => ((s = (s * 1664525 + 1013904223) >>> 0) / 4294967296);
  const perGpu = Math.ceil(n / gpus);
  const total = perGpu * gpus;
  const d = allocOps(total, gpus, 0, 0, [...KINDS]);
  const gpuCol = new Uint16Array(total);
  let i = 0, end = 0;
  for (let g = 0; g < gpus; g++) {
    let t = 0;
    const home = g % tenants;
    for (let j = 0; j < perGpu; j++, i++) {
      // Every ~32 ops an iteration ends and the GPU idles for 0.1–3 ms.
      if (j % 32 === 0) t += 20_000 + rnd() * 3_000_000;
      const len = 5_000 + rnd() * 60_000;
      const borrowed = rnd() < 0.2;
      gpuCol[i] = g;
      d.start[i] = t;
      d.end[i] = t + len;
      d.tenant[i] = borrowed ? Math.floor(rnd() * tenants) : home;
      d.borrowed[i] = borrowed && d.tenant[i] !== home ? 1 : 0;
      d.kind[i] = j % KINDS.length;
      d.layer[i] = Math.floor(j / KINDS.length) % 32;
      d.predicted[i] = len * (0.85 + rnd() * 0.3);
      d.transfer[i] = d.borrowed[i] ? 2_000 + rnd() * 8_000 : 0;
      d.prefill[i] = j % 64 < 8 ? 512 : 0;
      d.decodes[i] = 16 + Math.floor(rnd() * 48);
      t += len + (d.transfer[i] || 500);
    }
    end = Math.max(end, t);
  }
  d.to = end;
  d.recorded = [[0, end]];
  finishOps(d, gpuCol);
  return d;
}
