//! One-op what-if latency, incremental against full re-simulation, at 8, 64 and 512
//! GPUs: a p50/p99 table over 10k random candidates timed one call at a time, then
//! criterion's own estimates.

use criterion::{criterion_group, Criterion};
use slicesched_whatif::{Candidate, OpKey, Timeline, WhatIf};
use smallvec::{smallvec, SmallVec};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// SplitMix64: reproducible candidates without another dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const US: u64 = 1_000;

/// Per 8-GPU node, tenants on TP groups of 4, 2, 1 and 1 GPUs run iterations of 8 chained
/// ops (0.2-2 ms) separated by ~1.4 ms of engine CPU time, ~32 ops queued per GPU. Every
/// fourth op also waits for the neighbouring node's same-slot tenant (a 50 us transfer).
/// The first op of every group is already running.
fn timeline(n_gpus: usize, rng: &mut Rng) -> (Timeline, u64) {
    let gib = 1u64 << 30;
    let mut t = Timeline::new(n_gpus, vec![60 * gib; n_gpus], vec![80 * gib; n_gpus]).unwrap();
    let groups: Vec<(Vec<u32>, u32, i32)> = (0..n_gpus / 8)
        .flat_map(|node| {
            let b = node as u32 * 8;
            [(vec![b, b + 1, b + 2, b + 3], 0), (vec![b + 4, b + 5], 1), (vec![b + 6], 2), (vec![b + 7], 3)]
                .into_iter()
                .map(move |(g, slot)| (g, node as u32 * 4 + slot, slot as i32 % 3))
        })
        .collect();
    let mut last: Vec<Option<OpKey>> = vec![None; groups.len()];
    let mut ready = vec![0u64; groups.len()];
    let mut key = 0;
    for _iter in 0..4 {
        for step in 0..8 {
            for (gi, (gpus, tenant, prio)) in groups.iter().enumerate() {
                let mut deps: SmallVec<[(OpKey, u64); 2]> = last[gi].map(|k| (k, 0)).into_iter().collect();
                if step % 4 == 3 && groups.len() > 4 {
                    if let Some(k) = last[(gi + 4) % groups.len()] {
                        deps.push((k, 50 * US));
                    }
                }
                let op = Candidate {
                    key: OpKey(key),
                    gpus: gpus.iter().copied().collect(),
                    duration_ns: 200 * US + rng.below(1_800 * US),
                    priority: *prio,
                    tenant: *tenant,
                    ready_ns: if step == 0 { ready[gi] } else { 0 },
                    deps,
                    mem_bytes: rng.below(gib / 4),
                };
                let (_, f) = t.commit(op).unwrap();
                if step == 0 && ready[gi] == 0 {
                    t.started(OpKey(key), 0).unwrap();
                }
                if step == 7 {
                    ready[gi] = f + 1_400 * US;
                }
                last[gi] = Some(OpKey(key));
                key += 1;
            }
        }
    }
    let horizon = (0..key).filter_map(|k| t.predicted(OpKey(k))).map(|p| p.1).max().unwrap_or(0);
    (t, horizon)
}

/// A stray op of a new tenant: one GPU or a pair in a node, any priority, sometimes
/// waiting on a committed op's output.
fn candidate(n_gpus: usize, horizon: u64, n_ops: u64, rng: &mut Rng) -> Candidate {
    let g = rng.below(n_gpus as u64) as u32;
    let gpus = if rng.below(4) == 0 { smallvec![g & !1, g | 1] } else { smallvec![g] };
    let deps = if rng.below(3) == 0 { smallvec![(OpKey(rng.below(n_ops)), 20 * US)] } else { smallvec![] };
    Candidate {
        key: OpKey(u64::MAX),
        gpus,
        duration_ns: 100 * US + rng.below(900 * US),
        priority: rng.below(4) as i32,
        tenant: 1_000_000,
        ready_ns: rng.below(horizon.max(1)),
        deps,
        mem_bytes: rng.below(1 << 28),
    }
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn table() {
    println!("\none-op what-if latency (10k random candidates, one call timed at a time)");
    println!(
        "{:>5} {:>6} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "GPUs", "ops", "incr p50", "incr p99", "full p50", "full p99", "p50 ratio"
    );
    for n in [8usize, 64, 512] {
        let mut rng = Rng(n as u64);
        let (t, horizon) = timeline(n, &mut rng);
        let n_ops = t.len() as u64;
        let cands: Vec<Candidate> = (0..10_000).map(|_| candidate(n, horizon, n_ops, &mut rng)).collect();
        let mut w = WhatIf::default();
        for c in cands.iter().take(1000) {
            t.what_if(std::slice::from_ref(c), &mut w).unwrap();
        }
        let mut incr: Vec<Duration> = cands
            .iter()
            .map(|c| {
                let s = Instant::now();
                t.what_if(std::slice::from_ref(c), &mut w).unwrap();
                black_box(&w);
                s.elapsed()
            })
            .collect();
        let full_n = if n >= 512 { 100 } else { 1_000 };
        let mut full: Vec<Duration> = cands
            .iter()
            .take(full_n)
            .map(|c| {
                let s = Instant::now();
                black_box(t.full_resimulate(std::slice::from_ref(c)).unwrap());
                s.elapsed()
            })
            .collect();
        let (ip50, ip99) = (pct(&mut incr, 0.5), pct(&mut incr, 0.99));
        let (fp50, fp99) = (pct(&mut full, 0.5), pct(&mut full, 0.99));
        println!(
            "{:>5} {:>6} {:>8.2}us {:>8.2}us {:>8.0}us {:>8.0}us {:>8.0}x",
            n,
            n_ops,
            ip50.as_secs_f64() * 1e6,
            ip99.as_secs_f64() * 1e6,
            fp50.as_secs_f64() * 1e6,
            fp99.as_secs_f64() * 1e6,
            fp50.as_secs_f64() / ip50.as_secs_f64()
        );
    }
    println!();
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("what_if one op");
    g.sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    for n in [8usize, 64, 512] {
        let mut rng = Rng(n as u64);
        let (t, horizon) = timeline(n, &mut rng);
        let cands: Vec<Candidate> = (0..1024).map(|_| candidate(n, horizon, t.len() as u64, &mut rng)).collect();
        let mut w = WhatIf::default();
        let mut i = 0;
        g.bench_function(format!("incremental {n} GPUs"), |b| {
            b.iter(|| {
                i = (i + 1) % cands.len();
                t.what_if(std::slice::from_ref(&cands[i]), &mut w).unwrap();
            })
        });
        g.bench_function(format!("full_resimulate {n} GPUs"), |b| {
            b.iter(|| {
                i = (i + 1) % cands.len();
                t.full_resimulate(std::slice::from_ref(&cands[i])).unwrap()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not and only smoke-runs.
    if std::env::args().any(|a| a == "--bench") {
        table();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
