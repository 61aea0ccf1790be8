//! The committed timeline: a slab of ops, per-GPU queue orders, and reality feedback.

use crate::hash::FxMap;
use crate::{Candidate, OpKey, TimelineError};
use smallvec::SmallVec;

/// A dependency slot that no longer names an op (it was dropped after finishing).
pub(crate) const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Queued,
    Started,
    Finished,
}

#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub key: OpKey,
    pub gpus: SmallVec<[u32; 4]>,
    /// Index in `order[gpus[i]]`, while not finished; current only while the timeline
    /// is not stale (the reschedule rewrites every one): keeping them current on every
    /// mutation cost a simulator more than the queue edits themselves.
    pub pos: SmallVec<[u32; 4]>,
    pub dur: u64,
    /// Queue priority (the cap of the crate docs applied).
    pub eff: i32,
    pub tenant: u32,
    pub ready: u64,
    pub mem: u64,
    pub deps: SmallVec<[(u32, u64); 2]>,
    pub dependents: SmallVec<[u32; 4]>,
    pub seq: u64,
    pub state: State,
    pub start: u64,
    pub finish: u64,
    pub live: bool,
}

/// The position of a not-started op in every queue: smaller goes first.
#[inline]
pub(crate) fn qkey(eff: i32, seq: u64) -> (u32, u64) {
    (!((eff as u32) ^ 0x8000_0000), seq)
}

/// Ops committed to GPUs and not yet done, with their predicted times.
///
/// Mutations only record what changed; predicted times are recomputed when next read
/// (`refresh`, or on a copy inside `what_if` and `predicted` when the caller did not
/// refresh). A simulator commits and retires every op but asks about few: keeping the
/// times current after every event cost it a third of its time.
#[derive(Clone)]
pub struct Timeline {
    pub(crate) nodes: Vec<Node>,
    free: Vec<u32>,
    pub(crate) index: FxMap<OpKey, u32>,
    /// Per GPU: started ops (by start, then commit order), then queued ops by `qkey`.
    pub(crate) order: Vec<Vec<u32>>,
    pub(crate) n_started: Vec<u32>,
    /// Per GPU: finished ops still kept because an unfinished op depends on them.
    pub(crate) done: Vec<Vec<u32>>,
    /// Per GPU: the latest finish reported there; nothing queued starts before it.
    pub(crate) floor: Vec<u64>,
    pub(crate) baseline: Vec<u64>,
    pub(crate) capacity: Vec<u64>,
    pub(crate) now: u64,
    pub(crate) next_seq: u64,
    len: usize,
    sorted: Vec<u32>,
    /// Predicted times and stored positions lag the committed state (a mutation since
    /// the last reschedule).
    stale: bool,
    /// `finished`'s worklist, kept to stay allocation-free.
    stack: Vec<u32>,
}

impl Timeline {
    /// An empty timeline over GPUs `0..n_gpus` with per-GPU baseline memory and capacity.
    pub fn new(n_gpus: usize, baseline: Vec<u64>, capacity: Vec<u64>) -> Result<Self, TimelineError> {
        for (what, v) in [("baseline", &baseline), ("capacity", &capacity)] {
            if v.len() != n_gpus {
                return Err(TimelineError::Lengths { what, got: v.len(), n_gpus });
            }
        }
        Ok(Self {
            nodes: Vec::new(),
            free: Vec::new(),
            index: FxMap::default(),
            order: vec![Vec::new(); n_gpus],
            n_started: vec![0; n_gpus],
            done: vec![Vec::new(); n_gpus],
            floor: vec![0; n_gpus],
            baseline,
            capacity,
            now: 0,
            next_seq: 0,
            len: 0,
            sorted: Vec::new(),
            stale: false,
            stack: Vec::new(),
        })
    }

    pub fn n_gpus(&self) -> usize {
        self.order.len()
    }

    /// Ops in the timeline, finished ones still held for their dependents included.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn now(&self) -> u64 {
        self.now
    }

    /// Updates a GPU's baseline (weights + KV pool) and capacity in bytes.
    pub fn set_memory(&mut self, gpu: u32, baseline: u64, capacity: u64) {
        self.baseline[gpu as usize] = baseline;
        self.capacity[gpu as usize] = capacity;
    }

    /// Predicted (or actual) start and finish of an op in the timeline. Call
    /// [`Timeline::refresh`] after mutations first: otherwise this refreshes a copy.
    pub fn predicted(&self, key: OpKey) -> Option<(u64, u64)> {
        if self.stale {
            let mut fresh = self.clone();
            fresh.refresh();
            return fresh.predicted(key);
        }
        let n = &self.nodes[*self.index.get(&key)? as usize];
        Some((n.start, n.finish))
    }

    /// Brings every predicted time up to date with the committed state (a no-op when
    /// nothing changed since the last call).
    pub fn refresh(&mut self) {
        if self.stale {
            self.reschedule();
            self.stale = false;
        }
    }

    pub(crate) fn is_stale(&self) -> bool {
        self.stale
    }

    /// Adds an op and returns its predicted start and finish; ops it delays shift.
    pub fn commit(&mut self, op: Candidate) -> Result<(u64, u64), TimelineError> {
        let key = op.key;
        self.insert(op)?;
        self.refresh();
        Ok(self.predicted(key).expect("just inserted"))
    }

    /// Adds an op like [`Timeline::commit`] without predicting its times yet (they are
    /// computed when next read): what a caller that commits every op and asks about few
    /// should use.
    pub fn insert(&mut self, op: Candidate) -> Result<(), TimelineError> {
        self.validate(std::slice::from_ref(&op), 0)?;
        // The queue priority and insertion points exactly as `what_if` derives them.
        let mut eff = op.priority;
        let mut deps: SmallVec<[(u32, u64); 2]> = SmallVec::new();
        for &(k, t) in &op.deps {
            if let Some(&x) = self.index.get(&k) {
                let n = &self.nodes[x as usize];
                if n.state == State::Queued {
                    eff = eff.min(n.eff);
                }
                deps.push((x, t));
            }
        }
        let ins = op.gpus.iter().map(|&g| self.insertion_point(g, eff)).collect();
        self.place_node(op, eff, ins, deps);
        self.stale = true;
        Ok(())
    }

    /// Commits candidates in order, as `what_if` saw them.
    pub fn commit_what_if(&mut self, candidates: &[Candidate]) -> Result<(), TimelineError> {
        for c in candidates {
            self.commit(c.clone())?;
        }
        Ok(())
    }

    /// Stores a validated op at its queue positions `ins`; its times are set by the
    /// next reschedule.
    fn place_node(&mut self, op: Candidate, eff: i32, ins: SmallVec<[u32; 4]>, deps: SmallVec<[(u32, u64); 2]>) {
        let (start, finish) = (0, 0);
        let slot = match self.free.pop() {
            Some(x) => x,
            None => {
                self.nodes.push(Node {
                    key: op.key,
                    gpus: SmallVec::new(),
                    pos: SmallVec::new(),
                    dur: 0,
                    eff: 0,
                    tenant: 0,
                    ready: 0,
                    mem: 0,
                    deps: SmallVec::new(),
                    dependents: SmallVec::new(),
                    seq: 0,
                    state: State::Queued,
                    start: 0,
                    finish: 0,
                    live: false,
                });
                (self.nodes.len() - 1) as u32
            }
        };
        for &(d, _) in &deps {
            self.nodes[d as usize].dependents.push(slot);
        }
        self.nodes[slot as usize] = Node {
            key: op.key,
            pos: ins.clone(),
            gpus: op.gpus,
            dur: op.duration_ns,
            eff,
            tenant: op.tenant,
            ready: op.ready_ns,
            mem: op.mem_bytes,
            deps,
            dependents: SmallVec::new(),
            seq: self.next_seq,
            state: State::Queued,
            start,
            finish,
            live: true,
        };
        self.next_seq += 1;
        self.len += 1;
        self.index.insert(op.key, slot);
        for i in 0..ins.len() {
            let g = self.nodes[slot as usize].gpus[i] as usize;
            self.order[g].insert(ins[i] as usize, slot);
        }
    }

    /// Where a not-started op of queue priority `eff` goes in GPU `g`'s order: after
    /// the started ops and every queued one of at least its priority (it is the newest).
    pub(crate) fn insertion_point(&self, g: u32, eff: i32) -> u32 {
        let (o, ns) = (&self.order[g as usize], self.n_started[g as usize] as usize);
        (ns + o[ns..].partition_point(|&y| self.nodes[y as usize].eff >= eff)) as u32
    }

    /// Rewrites every stored position (see `Node::pos`).
    fn renumber(&mut self) {
        for g in 0..self.order.len() {
            for p in 0..self.order[g].len() {
                let x = self.order[g][p] as usize;
                let n = &mut self.nodes[x];
                let i = n.gpus.iter().position(|&y| y as usize == g).expect("op on its GPU");
                n.pos[i] = p as u32;
            }
        }
    }

    /// Where op `x` is in GPU `g`'s order: a scan, since stored positions may lag
    /// (`Node::pos`); started ops and the queue's head, which reality reports on, are
    /// at its front.
    fn position(&self, g: usize, x: u32) -> usize {
        self.order[g].iter().position(|&y| y == x).expect("an unfinished op is in its GPUs' orders")
    }

    fn slot(&self, key: OpKey) -> Result<usize, TimelineError> {
        self.index.get(&key).map(|&s| s as usize).ok_or(TimelineError::UnknownKey(key))
    }

    /// Nothing not yet started starts before `now` any more.
    pub fn advance(&mut self, now: u64) {
        if now > self.now {
            self.now = now;
            self.stale = true;
        }
    }

    /// Reality: the op started at `at`; it keeps its place ahead of every queued op.
    pub fn started(&mut self, key: OpKey, at: u64) -> Result<(), TimelineError> {
        let x = self.slot(key)?;
        match self.nodes[x].state {
            State::Queued => {}
            State::Started => return Err(TimelineError::AlreadyStarted(key)),
            State::Finished => return Err(TimelineError::AlreadyFinished(key)),
        }
        let seq = self.nodes[x].seq;
        for i in 0..self.nodes[x].gpus.len() {
            let g = self.nodes[x].gpus[i] as usize;
            let p = self.position(g, x as u32);
            let ns = self.n_started[g] as usize;
            let nodes = &self.nodes;
            let q = self.order[g][..ns].partition_point(|&y| {
                let n = &nodes[y as usize];
                (n.start, n.seq) < (at, seq)
            });
            // Usually the queue's head starting after every started op: it stays put.
            if q != p {
                self.order[g].remove(p);
                self.order[g].insert(q, x as u32);
            }
            self.n_started[g] += 1;
        }
        let n = &mut self.nodes[x];
        n.state = State::Started;
        n.start = at;
        n.finish = at + n.dur;
        self.stale = true;
        Ok(())
    }

    /// Reality: the op finished at `at`. An op never reported started is taken to have
    /// started at the earlier of its predicted start and `at`.
    pub fn finished(&mut self, key: OpKey, at: u64) -> Result<(), TimelineError> {
        let x = self.slot(key)?;
        let was = self.nodes[x].state;
        if was == State::Finished {
            return Err(TimelineError::AlreadyFinished(key));
        }
        if was == State::Queued {
            // Its start is taken from its prediction: that must be current.
            self.refresh();
        }
        for i in 0..self.nodes[x].gpus.len() {
            let g = self.nodes[x].gpus[i] as usize;
            let p = self.position(g, x as u32);
            self.order[g].remove(p);
            if was == State::Started {
                self.n_started[g] -= 1;
            }
            self.floor[g] = self.floor[g].max(at);
            self.done[g].push(x as u32);
        }
        let n = &mut self.nodes[x];
        n.state = State::Finished;
        n.start = n.start.min(at);
        n.finish = at;
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        stack.extend(n.deps.iter().map(|&(d, _)| d).filter(|&d| d != NONE));
        stack.push(x as u32);
        while let Some(y) = stack.pop() {
            self.collect(y as usize, &mut stack);
        }
        self.stack = stack;
        self.stale = true;
        Ok(())
    }

    /// Reality: an op that had not started was taken back (its placement withdrawn, to
    /// be committed again elsewhere under a new key). Ops that depended on it no longer
    /// wait for it.
    pub fn withdraw(&mut self, key: OpKey) -> Result<(), TimelineError> {
        let x = self.slot(key)?;
        match self.nodes[x].state {
            State::Queued => {}
            State::Started => return Err(TimelineError::AlreadyStarted(key)),
            State::Finished => return Err(TimelineError::AlreadyFinished(key)),
        }
        for i in 0..self.nodes[x].gpus.len() {
            let g = self.nodes[x].gpus[i] as usize;
            let p = self.position(g, x as u32);
            self.order[g].remove(p);
        }
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        self.release(x, &mut stack);
        // A finished producer kept only for this op may go now.
        while let Some(y) = stack.pop() {
            self.collect(y as usize, &mut stack);
        }
        self.stack = stack;
        self.stale = true;
        Ok(())
    }

    /// Drops a finished op none of whose dependents is unfinished; queues its deps to retry.
    fn collect(&mut self, x: usize, stack: &mut Vec<u32>) {
        let n = &self.nodes[x];
        if !n.live || n.state != State::Finished {
            return;
        }
        if n.dependents.iter().any(|&y| self.nodes[y as usize].state != State::Finished) {
            return;
        }
        for i in 0..self.nodes[x].gpus.len() {
            let g = self.nodes[x].gpus[i] as usize;
            let p = self.done[g].iter().position(|&y| y as usize == x).expect("finished op listed");
            self.done[g].swap_remove(p);
        }
        self.release(x, stack);
    }

    /// Frees op `x`'s slot (it is out of every GPU's order already): ops that depended on
    /// it stop waiting for it, the ops it depended on go to `stack` (one may be
    /// collectable now), and its key is forgotten.
    fn release(&mut self, x: usize, stack: &mut Vec<u32>) {
        let dependents = std::mem::take(&mut self.nodes[x].dependents);
        for &y in &dependents {
            for d in self.nodes[y as usize].deps.iter_mut() {
                if d.0 == x as u32 {
                    d.0 = NONE;
                }
            }
        }
        let deps = std::mem::take(&mut self.nodes[x].deps);
        for &(d, _) in &deps {
            if d != NONE {
                self.nodes[d as usize].dependents.retain(|y| *y != x as u32);
                stack.push(d);
            }
        }
        let key = self.nodes[x].key;
        self.index.remove(&key);
        self.nodes[x].live = false;
        self.free.push(x as u32);
        self.len -= 1;
    }

    /// Recomputes every queued op's times in queue order (which every wait respects).
    fn reschedule(&mut self) {
        self.renumber();
        let mut sorted = std::mem::take(&mut self.sorted);
        sorted.clear();
        sorted.extend(
            (0..self.nodes.len() as u32)
                .filter(|&x| self.nodes[x as usize].live && self.nodes[x as usize].state == State::Queued),
        );
        let nodes = &self.nodes;
        sorted.sort_unstable_by_key(|&x| qkey(nodes[x as usize].eff, nodes[x as usize].seq));
        for &x in &sorted {
            let n = &self.nodes[x as usize];
            let mut s = n.ready.max(self.now);
            for (i, &g) in n.gpus.iter().enumerate() {
                s = s.max(self.floor[g as usize]);
                let p = n.pos[i] as usize;
                if p > 0 {
                    s = s.max(self.nodes[self.order[g as usize][p - 1] as usize].finish);
                }
            }
            for &(d, t) in &n.deps {
                if d != NONE {
                    s = s.max(self.nodes[d as usize].finish + t);
                }
            }
            let n = &mut self.nodes[x as usize];
            n.start = s;
            n.finish = s + n.dur;
        }
        self.sorted = sorted;
    }
}
