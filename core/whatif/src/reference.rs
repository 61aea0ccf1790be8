//! The slow reference: every start and finish recomputed from scratch by list scheduling
//! (Kahn's order over queue and dependency edges, so it does not lean on the global
//! queue order the incremental path relies on), memory peaks by brute force.

use crate::timeline::{qkey, State, Timeline, NONE};
use crate::{Candidate, CandidateOutcome, OpKey, TimelineError, WhatIf};
use std::collections::{HashMap, VecDeque};

struct RNode {
    key: OpKey,
    gpus: Vec<u32>,
    dur: u64,
    ready: u64,
    eff: i32,
    seq: u64,
    state: State,
    start: u64,
    finish: u64,
    mem: u64,
    deps: Vec<(usize, u64)>,
    /// The timeline slot of a committed op.
    slot: Option<usize>,
}

impl Timeline {
    /// The what-if answer computed the slow way, for tests and benchmarks.
    pub fn full_resimulate(&self, candidates: &[Candidate]) -> Result<WhatIf, TimelineError> {
        if self.is_stale() {
            // Delays are measured against the committed predictions: current ones.
            let mut fresh = self.clone();
            fresh.refresh();
            return fresh.full_resimulate(candidates);
        }
        let nodes = self.reference(candidates)?;
        let first = nodes.len() - candidates.len();
        let mut dependents = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            for &(d, _) in &n.deps {
                dependents[d].push(i);
            }
        }
        let mut on_gpu = vec![Vec::new(); self.n_gpus()];
        for (i, n) in nodes.iter().enumerate() {
            n.gpus.iter().for_each(|&g| on_gpu[g as usize].push(i));
        }
        let end = |i: usize| dependents[i].iter().map(|&y| nodes[y].finish).fold(nodes[i].finish, u64::max);
        let mut out = WhatIf::default();
        for (j, c) in candidates.iter().enumerate() {
            let n = &nodes[first + j];
            let (ws, we) = (n.start, n.finish.max(n.start + 1));
            let mut o = CandidateOutcome {
                key: c.key,
                start_ns: n.start,
                finish_ns: n.finish,
                fits: true,
                ..Default::default()
            };
            for &g in &c.gpus {
                let on_g = &on_gpu[g as usize];
                let mut points = vec![ws];
                points.extend(on_g.iter().map(|&i| nodes[i].start).filter(|&a| a > ws && a < we));
                let peak = points
                    .iter()
                    .map(|&t| {
                        let live = on_g.iter().filter(|&&i| nodes[i].start <= t && t < end(i));
                        self.baseline[g as usize] + live.map(|&i| nodes[i].mem).sum::<u64>()
                    })
                    .max()
                    .unwrap_or(0);
                o.fits &= peak <= self.capacity[g as usize];
                o.peak_mem.push((g, peak));
            }
            o.transfers = n.deps.iter().filter(|d| d.1 > 0).map(|&(d, t)| (nodes[d].key, t)).collect();
            out.candidates.push(o);
        }
        let mut delays: HashMap<u32, u64> = HashMap::new();
        for n in &nodes[..first] {
            let was = &self.nodes[n.slot.expect("committed")];
            if n.finish > was.finish {
                let d = delays.entry(was.tenant).or_default();
                *d = (*d).max(n.finish - was.finish);
            }
        }
        out.tenant_delays = delays.into_iter().collect();
        out.tenant_delays.sort_unstable();
        Ok(out)
    }

    /// Every op's (key, start, finish) as the reference computes them with no
    /// candidates, in key order; `predicted` must agree.
    pub fn resimulated(&self) -> Vec<(OpKey, u64, u64)> {
        let mut v: Vec<_> =
            self.reference(&[]).expect("no candidates").iter().map(|n| (n.key, n.start, n.finish)).collect();
        v.sort_unstable();
        v
    }

    fn reference(&self, cands: &[Candidate]) -> Result<Vec<RNode>, TimelineError> {
        let mut nodes = Vec::new();
        let mut of_slot = HashMap::new();
        for (x, n) in self.nodes.iter().enumerate().filter(|(_, n)| n.live) {
            of_slot.insert(x as u32, nodes.len());
            nodes.push(RNode {
                key: n.key,
                gpus: n.gpus.to_vec(),
                dur: n.dur,
                ready: n.ready,
                eff: n.eff,
                seq: n.seq,
                state: n.state,
                start: n.start,
                finish: n.finish,
                mem: n.mem,
                deps: Vec::new(),
                slot: Some(x),
            });
        }
        for n in nodes.iter_mut() {
            let x = n.slot.expect("committed");
            n.deps = self.nodes[x].deps.iter().filter(|d| d.0 != NONE).map(|&(d, t)| (of_slot[&d], t)).collect();
        }
        let mut by_key: HashMap<OpKey, usize> = nodes.iter().enumerate().map(|(i, n)| (n.key, i)).collect();
        for (j, c) in cands.iter().enumerate() {
            self.validate(cands, j)?;
            let deps: Vec<(usize, u64)> = c.deps.iter().filter_map(|&(k, t)| by_key.get(&k).map(|&d| (d, t))).collect();
            let eff = deps
                .iter()
                .filter(|&&(d, _)| nodes[d].state == State::Queued)
                .map(|&(d, _)| nodes[d].eff)
                .fold(c.priority, i32::min);
            by_key.insert(c.key, nodes.len());
            nodes.push(RNode {
                key: c.key,
                gpus: c.gpus.to_vec(),
                dur: c.duration_ns,
                ready: c.ready_ns,
                eff,
                seq: self.next_seq + j as u64,
                state: State::Queued,
                start: 0,
                finish: 0,
                mem: c.mem_bytes,
                deps,
                slot: None,
            });
        }
        // Waits: queue predecessors on every GPU, then dependencies.
        let mut preds: Vec<Vec<(usize, u64)>> = nodes.iter().map(|n| n.deps.clone()).collect();
        let mut on_gpu = vec![Vec::new(); self.n_gpus()];
        for (i, n) in nodes.iter().enumerate().filter(|(_, n)| n.state != State::Finished) {
            n.gpus.iter().for_each(|&g| on_gpu[g as usize].push(i));
        }
        for mut q in on_gpu {
            q.sort_by_key(|&i| {
                let n = &nodes[i];
                match n.state {
                    State::Started => (0, n.start, n.seq),
                    _ => (1, u64::from(qkey(n.eff, n.seq).0), n.seq),
                }
            });
            for w in q.windows(2) {
                preds[w[1]].push((w[0], 0));
            }
        }
        let is_queued: Vec<bool> = nodes.iter().map(|n| n.state == State::Queued).collect();
        let queued = |i: usize| is_queued[i];
        let mut succs = vec![Vec::new(); nodes.len()];
        let mut indeg = vec![0usize; nodes.len()];
        for i in (0..nodes.len()).filter(|&i| queued(i)) {
            for &(p, _) in &preds[i] {
                if queued(p) {
                    succs[p].push(i);
                    indeg[i] += 1;
                }
            }
        }
        let mut ready: VecDeque<usize> = (0..nodes.len()).filter(|&i| queued(i) && indeg[i] == 0).collect();
        let mut seen = 0;
        while let Some(i) = ready.pop_front() {
            seen += 1;
            let mut st = nodes[i].ready.max(self.now);
            for &g in &nodes[i].gpus {
                st = st.max(self.floor[g as usize]);
            }
            for &(p, t) in &preds[i] {
                st = st.max(nodes[p].finish + t);
            }
            nodes[i].start = st;
            nodes[i].finish = st + nodes[i].dur;
            for &y in &succs[i] {
                indeg[y] -= 1;
                if indeg[y] == 0 {
                    ready.push_back(y);
                }
            }
        }
        assert_eq!(seen, (0..nodes.len()).filter(|&i| queued(i)).count(), "queue order has a cycle");
        Ok(nodes)
    }
}
