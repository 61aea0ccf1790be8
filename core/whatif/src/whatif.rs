//! Incremental what-if: candidates become an overlay on the committed times, and shifts
//! propagate in queue order through only the ops whose times change.

use crate::timeline::{qkey, State, Timeline, NONE};
use crate::{Candidate, OpKey, TimelineError};
use smallvec::SmallVec;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Node ids with this bit name the candidate `id & !CAND`; others are committed slots.
const CAND: u32 = 1 << 31;

/// What one candidate would get.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CandidateOutcome {
    pub key: OpKey,
    pub start_ns: u64,
    pub finish_ns: u64,
    /// (GPU, peak bytes over the candidate's run), in the candidate's GPU order.
    pub peak_mem: SmallVec<[(u32, u64); 4]>,
    /// Every peak within its GPU's capacity.
    pub fits: bool,
    /// (dependency, transfer ns) for each known dependency with a non-zero transfer.
    pub transfers: SmallVec<[(OpKey, u64); 2]>,
}

/// The answer to a what-if query; reuse one across calls to stay allocation-free.
#[derive(Debug, Clone, Default)]
pub struct WhatIf {
    pub candidates: Vec<CandidateOutcome>,
    /// (tenant, largest delay of its committed finishes), by tenant, delayed ones only.
    pub tenant_delays: Vec<(u32, u64)>,
    sc: Scratch,
}

impl PartialEq for WhatIf {
    fn eq(&self, o: &Self) -> bool {
        self.candidates == o.candidates && self.tenant_delays == o.tenant_delays
    }
}

impl Eq for WhatIf {}

#[derive(Debug, Clone)]
pub(crate) struct CandState {
    pub eff: i32,
    pub seq: u64,
    /// Insertion index in `order[gpus[i]]`; candidates at the same index go by queue key.
    pub ins: SmallVec<[u32; 4]>,
    /// (node id, transfer ns, key) for dependencies that are known.
    pub deps: SmallVec<[(u32, u64, OpKey); 2]>,
    pub start: u64,
    pub finish: u64,
}

/// Per-slot overlay stamped with an epoch so a query never clears the whole slab.
#[derive(Debug, Clone, Default)]
struct Scratch {
    epoch: u32,
    stamp: Vec<u32>,
    pushed: Vec<u32>,
    ov: Vec<(u64, u64)>,
    heap: BinaryHeap<Reverse<(u32, u64, u32)>>,
    touched: Vec<u32>,
    cands: Vec<CandState>,
    events: Vec<(u64, u8, u64)>,
}

impl Scratch {
    fn begin(&mut self, slots: usize) {
        if self.stamp.len() < slots {
            self.stamp.resize(slots, 0);
            self.pushed.resize(slots, 0);
            self.ov.resize(slots, (0, 0));
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // Stale stamps could now collide with the new epoch.
            self.stamp.iter_mut().for_each(|x| *x = 0);
            self.pushed.iter_mut().for_each(|x| *x = 0);
            self.epoch = 1;
        }
        self.heap.clear();
        self.touched.clear();
        self.cands.clear();
    }
}

/// Candidate `j`'s insertion index on GPU `g`, if it uses `g`.
#[inline]
fn cand_ins(cands: &[Candidate], s: &Scratch, j: usize, g: u32) -> Option<u32> {
    cands[j].gpus.iter().position(|&x| x == g).map(|i| s.cands[j].ins[i])
}

impl Timeline {
    /// Predicts what the candidates would get and whom they would delay, without
    /// changing the timeline. See the crate docs for the exact semantics. Call
    /// [`Timeline::refresh`] after mutations first: otherwise this refreshes a copy.
    pub fn what_if(&self, candidates: &[Candidate], out: &mut WhatIf) -> Result<(), TimelineError> {
        if self.is_stale() {
            let mut fresh = self.clone();
            fresh.refresh();
            return fresh.run(candidates, out, true);
        }
        self.run(candidates, out, true)
    }

    pub(crate) fn validate(&self, cands: &[Candidate], j: usize) -> Result<(), TimelineError> {
        let c = &cands[j];
        if c.gpus.is_empty() {
            return Err(TimelineError::NoGpu(c.key));
        }
        for (i, &g) in c.gpus.iter().enumerate() {
            if g as usize >= self.n_gpus() {
                return Err(TimelineError::UnknownGpu { key: c.key, gpu: g, n_gpus: self.n_gpus() });
            }
            if c.gpus[..i].contains(&g) {
                return Err(TimelineError::RepeatedGpu { key: c.key, gpu: g });
            }
        }
        if self.index.contains_key(&c.key) || cands[..j].iter().any(|o| o.key == c.key) {
            return Err(TimelineError::DuplicateKey(c.key));
        }
        Ok(())
    }

    pub(crate) fn run(&self, cands: &[Candidate], out: &mut WhatIf, memory: bool) -> Result<(), TimelineError> {
        let s = &mut out.sc;
        s.begin(self.nodes.len());
        for (j, c) in cands.iter().enumerate() {
            self.validate(cands, j)?;
            let mut eff = c.priority;
            let mut deps = SmallVec::new();
            for &(k, t) in &c.deps {
                if let Some(i) = cands[..j].iter().position(|o| o.key == k) {
                    eff = eff.min(s.cands[i].eff);
                    deps.push((CAND | i as u32, t, k));
                } else if let Some(&x) = self.index.get(&k) {
                    let n = &self.nodes[x as usize];
                    if n.state == State::Queued {
                        eff = eff.min(n.eff);
                    }
                    deps.push((x, t, k));
                }
            }
            let ins = c.gpus.iter().map(|&g| self.insertion_point(g, eff)).collect();
            let seq = self.next_seq + j as u64;
            s.cands.push(CandState { eff, seq, ins, deps, start: 0, finish: 0 });
            s.heap.push(Reverse((qkey(eff, seq).0, seq, CAND | j as u32)));
        }
        while let Some(Reverse((_, _, id))) = s.heap.pop() {
            self.settle(cands, s, id);
        }
        out.tenant_delays.clear();
        for &x in &s.touched {
            let n = &self.nodes[x as usize];
            let d = s.ov[x as usize].1 - n.finish;
            match out.tenant_delays.iter_mut().find(|t| t.0 == n.tenant) {
                Some(t) => t.1 = t.1.max(d),
                None => out.tenant_delays.push((n.tenant, d)),
            }
        }
        out.tenant_delays.sort_unstable();
        out.candidates.clear();
        for (j, c) in cands.iter().enumerate() {
            let cs = &s.cands[j];
            let mut o = CandidateOutcome {
                key: c.key,
                start_ns: cs.start,
                finish_ns: cs.finish,
                fits: true,
                transfers: cs.deps.iter().filter(|d| d.1 > 0).map(|d| (d.2, d.1)).collect(),
                ..Default::default()
            };
            if memory {
                for &g in &c.gpus {
                    let peak = self.peak(cands, s, j, g);
                    o.fits &= peak <= self.capacity[g as usize];
                    o.peak_mem.push((g, peak));
                }
            }
            out.candidates.push(o);
        }
        Ok(())
    }

    /// (start, finish) of an op or candidate, with this query's shifts applied.
    #[inline]
    fn times_of(&self, s: &Scratch, id: u32) -> (u64, u64) {
        if id & CAND != 0 {
            let c = &s.cands[(id & !CAND) as usize];
            (c.start, c.finish)
        } else if s.stamp[id as usize] == s.epoch {
            s.ov[id as usize]
        } else {
            let n = &self.nodes[id as usize];
            (n.start, n.finish)
        }
    }

    #[inline]
    fn finish_of(&self, s: &Scratch, id: u32) -> u64 {
        self.times_of(s, id).1
    }

    #[inline]
    fn start_of(&self, s: &Scratch, id: u32) -> u64 {
        self.times_of(s, id).0
    }

    fn key_of(&self, s: &Scratch, id: u32) -> (u32, u64) {
        if id & CAND != 0 {
            let c = &s.cands[(id & !CAND) as usize];
            qkey(c.eff, c.seq)
        } else {
            let n = &self.nodes[id as usize];
            qkey(n.eff, n.seq)
        }
    }

    /// The node queued just before the one with `key` at index `pos` of GPU `g` once
    /// the candidates are in, or `NONE`. Candidates sharing an index go by queue key.
    fn pred(&self, cands: &[Candidate], s: &Scratch, g: u32, pos: u32, key: (u32, u64)) -> u32 {
        let mut best = NONE;
        let mut best_key = (0, 0);
        for j in 0..s.cands.len() {
            if cand_ins(cands, s, j, g) == Some(pos) {
                let k = qkey(s.cands[j].eff, s.cands[j].seq);
                if k < key && (best == NONE || k > best_key) {
                    (best, best_key) = (CAND | j as u32, k);
                }
            }
        }
        if best == NONE && pos > 0 {
            best = self.order[g as usize][pos as usize - 1];
        }
        best
    }

    /// The node queued just after the one with `key`; `pos` is the index where the
    /// candidates after it would be inserted.
    fn succ(&self, cands: &[Candidate], s: &Scratch, g: u32, pos: u32, key: (u32, u64)) -> u32 {
        let mut best = NONE;
        let mut best_key = (0, 0);
        for j in 0..s.cands.len() {
            if cand_ins(cands, s, j, g) == Some(pos) {
                let k = qkey(s.cands[j].eff, s.cands[j].seq);
                if k > key && (best == NONE || k < best_key) {
                    (best, best_key) = (CAND | j as u32, k);
                }
            }
        }
        let o = &self.order[g as usize];
        if best == NONE && (pos as usize) < o.len() {
            best = o[pos as usize];
        }
        best
    }

    fn push(&self, s: &mut Scratch, id: u32) {
        if id == NONE || id & CAND != 0 || s.pushed[id as usize] == s.epoch {
            return;
        }
        s.pushed[id as usize] = s.epoch;
        let n = &self.nodes[id as usize];
        s.heap.push(Reverse((qkey(n.eff, n.seq).0, n.seq, id)));
    }

    /// Computes node `id`'s time from its (already settled) predecessors and, if it
    /// changed, queues its successors.
    fn settle(&self, cands: &[Candidate], s: &mut Scratch, id: u32) {
        let key = self.key_of(s, id);
        if id & CAND != 0 {
            let j = (id & !CAND) as usize;
            let c = &cands[j];
            let mut st = c.ready_ns.max(self.now);
            for (i, &g) in c.gpus.iter().enumerate() {
                st = st.max(self.floor[g as usize]);
                let p = self.pred(cands, s, g, s.cands[j].ins[i], key);
                if p != NONE {
                    st = st.max(self.finish_of(s, p));
                }
            }
            for &(d, t, _) in &s.cands[j].deps {
                st = st.max(self.finish_of(s, d) + t);
            }
            s.cands[j].start = st;
            s.cands[j].finish = st + c.duration_ns;
            for (i, &g) in c.gpus.iter().enumerate() {
                let nx = self.succ(cands, s, g, s.cands[j].ins[i], key);
                self.push(s, nx);
            }
            return;
        }
        let n = &self.nodes[id as usize];
        debug_assert_eq!(n.state, State::Queued);
        let mut st = n.ready.max(self.now);
        for (i, &g) in n.gpus.iter().enumerate() {
            st = st.max(self.floor[g as usize]);
            let p = self.pred(cands, s, g, n.pos[i], key);
            if p != NONE {
                st = st.max(self.finish_of(s, p));
            }
        }
        for &(d, t) in &n.deps {
            if d != NONE {
                st = st.max(self.finish_of(s, d) + t);
            }
        }
        if st == n.start {
            return;
        }
        let x = id as usize;
        s.stamp[x] = s.epoch;
        s.ov[x] = (st, st + n.dur);
        s.touched.push(id);
        for (i, &g) in n.gpus.iter().enumerate() {
            let nx = self.succ(cands, s, g, n.pos[i] + 1, key);
            self.push(s, nx);
        }
        for &y in &n.dependents {
            if self.nodes[y as usize].state == State::Queued {
                self.push(s, y);
            }
        }
    }

    /// When node `id`'s activations are released: its finish or its last dependent's.
    fn mem_end(&self, s: &Scratch, id: u32) -> u64 {
        let mut e = self.finish_of(s, id);
        if id & CAND == 0 {
            for &y in &self.nodes[id as usize].dependents {
                e = e.max(self.finish_of(s, y));
            }
        }
        for c in &s.cands {
            if c.deps.iter().any(|d| d.0 == id) {
                e = e.max(c.finish);
            }
        }
        e
    }

    /// Peak usage on GPU `g` over candidate `j`'s run.
    fn peak(&self, cands: &[Candidate], s: &mut Scratch, j: usize, g: u32) -> u64 {
        let (ws, wf) = (s.cands[j].start, s.cands[j].finish);
        let we = wf.max(ws + 1);
        let mut events = std::mem::take(&mut s.events);
        events.clear();
        let mut base = self.baseline[g as usize];
        let mut add = |a: u64, b: u64, m: u64| {
            if m == 0 || b <= a || a >= we || b <= ws {
                return;
            }
            if a <= ws {
                base += m;
            } else {
                events.push((a, 1, m));
            }
            if b < we {
                events.push((b, 0, m));
            }
        };
        let (o, ns) = (&self.order[g as usize], self.n_started[g as usize] as usize);
        for (p, &x) in o.iter().enumerate() {
            let a = self.start_of(s, x);
            if p >= ns && a >= we {
                // Queued starts only grow along the queue.
                break;
            }
            add(a, self.mem_end(s, x), self.nodes[x as usize].mem);
        }
        for &x in &self.done[g as usize] {
            add(self.start_of(s, x), self.mem_end(s, x), self.nodes[x as usize].mem);
        }
        for (k, c) in cands.iter().enumerate() {
            if c.gpus.contains(&g) {
                let id = CAND | k as u32;
                add(s.cands[k].start, self.mem_end(s, id), c.mem_bytes);
            }
        }
        events.sort_unstable();
        let (mut cur, mut peak) = (base, base);
        for &(_, kind, m) in &events {
            if kind == 1 {
                cur += m;
                peak = peak.max(cur);
            } else {
                cur -= m;
            }
        }
        s.events = events;
        peak
    }
}
