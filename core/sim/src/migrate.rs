//! KV that moves (Llumnix-style migration): when the request at the head of an
//! instance's queue waits for KV blocks, or the instance is behind (its oldest request
//! without a first token has waited half its TTFT target), a decoding request's KV
//! moves to another instance of the same tenant ([`Sim::move_target`]: less loaded,
//! not itself behind) so the queue's head starts (or the instance's GPUs spend their
//! time on prefill) and the moved request goes on decoding there. The core decides, as
//! vLLM's engine decides preemption: every policy that places copies gets it alike.
//!
//! The core checks every move: the receiver books the blocks (beside its watermark, in
//! the GPUs' shared KV pools) before the copy starts, the sender keeps its own until
//! the copy lands, so the memory ledger counts the KV on both sides while it travels;
//! the request is neither scheduled nor preempted meanwhile; the copy takes the link
//! between the two groups' time for the bytes each GPU holds (its shard under tensor
//! parallelism). Attention runs where the KV is: after the move, on the receiver.
//!
//! Simplifications, said as such: the copy is priced by the link alone (copy engines,
//! not SMs; no contention with activation transfers on the same link), and the request
//! pauses for the whole copy (Llumnix pipelines it to hide all but the last blocks).

use crate::place::view;
use crate::replay::{Ev, Sim};
use slicesched_engine::SeqId;
use slicesched_policy::View;

/// When a request's KV may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KvMigration {
    /// Never: a request stays on the instance it was admitted to. The default: on the
    /// 20 mixes of `scenarios/family` and the shipped scenarios, moves fired only where
    /// KV ran short (one mix at its 9% rate scale, `mix-6t` past it), cut preemptions
    /// there and left slightly more requests violating (README, "KV that moves").
    #[default]
    Off,
    /// When the request at the head of an instance's queue waits for KV blocks
    /// (Llumnix's case: a move instead of a preemption or a wait).
    Memory,
    /// Also to shed an instance's load when it is behind (its oldest request without a
    /// first token has waited half its TTFT target), to an idle instance of the tenant.
    Load,
}

impl KvMigration {
    /// The name `--kv-migration` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Memory => "memory",
            Self::Load => "load",
        }
    }
}

impl std::str::FromStr for KvMigration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "memory" => Ok(Self::Memory),
            "load" => Ok(Self::Load),
            _ => Err(format!("unknown KV migration mode `{s}` (known: off, memory, load)")),
        }
    }
}

/// One move in flight.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Move {
    req: u32,
    from: u32,
    from_seq: SeqId,
    to: u32,
    to_seq: SeqId,
}

/// Moves in flight, by slot, and what moved in the whole run.
#[derive(Debug, Default)]
pub(crate) struct Moves {
    slots: Vec<Option<Move>>,
    pub count: u64,
    /// Of those, the moves that freed blocks for a queue waiting on KV (the rest shed load).
    pub for_memory: u64,
    /// KV bytes moved, summed over the GPUs they left.
    pub bytes: u64,
    /// Time requests spent paused for their copies.
    pub pause_ns: u64,
}

impl Sim<'_> {
    /// After instance `inst` changed: if its queue's head waits for KV blocks, or it is
    /// behind, starts moving one of its decoding requests to [`Sim::move_target`] if that
    /// has room for it. One move at a time leaves an instance; a request moves at most
    /// once.
    pub(crate) fn maybe_migrate(&mut self, inst: usize) {
        let mode = self.opts.kv_migration;
        if mode == KvMigration::Off || self.exec.is_some() || self.insts[inst].moving_out > 0 {
            return;
        }
        let t = self.insts[inst].tenant.index();
        if self.tenant_insts[t].len() < 2 {
            return;
        }
        let need = self.insts[inst].engine.kv_shortfall();
        if need == 0 && (mode != KvMigration::Load || !self.behind(inst)) {
            return;
        }
        let Some(seq) = self.insts[inst].engine.migration_candidate(need) else { return };
        self.build_views();
        let Some(to) = self.move_target(inst, need == 0) else { return };
        let m = self.insts[inst].engine.moved_state(seq).expect("a migration candidate can move");
        self.kv_refresh(to);
        let Some(to_seq) = self.insts[to].engine.attach(&m) else { return };
        self.kv_sync(to);
        let detached = self.insts[inst].engine.detach(seq);
        debug_assert!(detached);
        let req = self.insts[inst].seq_to_req[seq.0 as usize];
        debug_assert_eq!(to_seq.0 as usize, self.insts[to].seq_to_req.len());
        self.insts[to].seq_to_req.push(req);
        self.insts[inst].moving_out += 1;
        self.insts[to].moving_in += 1;

        let bytes = m.blocks as u64 * self.reserve_and_block(inst).1;
        let (a, b) = (self.insts[inst].group, self.insts[to].group);
        let ns = view!(self).transfer_ns(a, b, bytes);
        let mv = Move { req, from: inst as u32, from_seq: seq, to: to as u32, to_seq };
        let slot = match self.moves.slots.iter().position(Option::is_none) {
            Some(s) => {
                self.moves.slots[s] = Some(mv);
                s
            }
            None => {
                self.moves.slots.push(Some(mv));
                self.moves.slots.len() - 1
            }
        };
        self.moves.count += 1;
        self.moves.for_memory += (need > 0) as u64;
        self.moves.bytes += bytes * self.scn.deployment.group(a).gpus.len() as u64;
        self.moves.pause_ns += ns;
        self.push(self.now + ns, Ev::Moved(slot as u32));
    }

    /// Where a request of `from` moves: the tenant's other instance with no queue of its
    /// own, not behind, on its own home or on quiet GPUs, with the fewest requests; to
    /// shed load, only one with none.
    fn move_target(&self, from: usize, shed_load: bool) -> Option<usize> {
        let t = self.insts[from].tenant.index();
        let running = |i: usize| self.insts[i].engine.queue_lengths().1;
        // Another owner's GPUs take a moved request only while they are quiet: their
        // owner not needing them now and the GPUs busy under half of the last whole
        // second. A request moves for all its remaining decode steps, and an owner that
        // needs its GPU meanwhile runs first (measured on scenarios/family gen-18, where
        // moves onto busy owners' GPUs freed the sender's KV but took the owners from
        // 5.1% to 8.5% violating).
        let quiet = |i: usize| {
            let rt = &self.insts[i];
            rt.is_home
                || self.scn.deployment.group(rt.group).gpus.iter().all(|g| {
                    let g = g.0 as usize;
                    self.owner_need[g] > self.now && self.recent_busy_share(g) < crate::OWNER_BUSY
                })
        };
        self.tenant_insts[t]
            .iter()
            .map(|&i| i as usize)
            .filter(|&i| i != from && self.copies.routable(i) && self.insts[i].engine.oldest_waiting().is_none())
            .filter(|&i| !self.behind(i) && quiet(i))
            .filter(|&i| !shed_load || (running(i) == 0 && self.insts[i].inflight == 0))
            .min_by_key(|&i| (running(i), i))
    }

    /// GPU `g`'s busy share over the last whole second (0 in the first).
    fn recent_busy_share(&self, g: usize) -> f64 {
        let s = &self.series;
        let Some(k) = (self.now / crate::SERIES_BUCKET_NS).checked_sub(1) else { return 0.0 };
        let busy = (k as usize).checked_sub(s.first).and_then(|i| s.gpu_busy_ns[g].get(i)).copied().unwrap_or(0);
        busy as f64 / crate::SERIES_BUCKET_NS as f64
    }

    /// Whether the instance's oldest request without a first token has waited at least
    /// half its TTFT target.
    fn behind(&self, inst: usize) -> bool {
        let rt = &self.insts[inst];
        let Some(seq) = rt.engine.oldest_unstarted() else { return false };
        let r = &self.records[rt.seq_to_req[seq.0 as usize] as usize];
        self.now.saturating_sub(r.arrival_ns) >= r.ttft_target_ns / 2
    }

    /// A copy landed: the sender frees the blocks (its queue's head may start), the
    /// receiver schedules the request.
    pub(crate) fn moved(&mut self, slot: u32) {
        let mv = self.moves.slots[slot as usize].take().expect("a move in flight");
        let (from, to) = (mv.from as usize, mv.to as usize);
        self.insts[from].engine.release_moved(mv.from_seq);
        self.insts[from].moving_out -= 1;
        self.insts[to].engine.land(mv.to_seq);
        self.insts[to].moving_in -= 1;
        self.req_seq[mv.req as usize] = (mv.to, mv.to_seq.0);
        self.kv_sync(from);
        self.apply_ends();
        self.maybe_migrate(from);
        self.start_iterations(to);
        self.start_iterations(from);
        self.copy_inst_idle(from);
    }
}
