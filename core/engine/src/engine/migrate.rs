//! A running request's KV moving to another engine of the same tenant (Llumnix-style
//! migration): the engine whose cache is short detaches a decoding request, the
//! receiving engine books the blocks for it before a byte moves, and once the copy has
//! landed the sender frees its blocks and the receiver schedules the request. Both hold
//! the blocks while the copy runs, so no moment has the KV in neither cache nor a block
//! promised twice.
//!
//! The engine knows no clock: how long the copy takes, and which engine receives, is
//! the caller's business.

use super::{Engine, Seq, SeqId};

/// What a receiving engine needs of a request whose KV moves to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MovedSeq {
    pub prompt: u32,
    pub output: u32,
    /// Tokens whose KV moves.
    pub computed: u32,
    pub generated: u32,
    /// KV blocks the request holds (the receiver books as many: same tenant, same block size).
    pub blocks: u32,
    pub preemptions: u32,
}

impl Engine {
    /// Blocks the request at the head of the waiting queue lacks to be admitted now
    /// (its next prefill chunk, beside the watermark); 0 when nothing waits or it fits.
    /// What a request's KV leaving this engine would have to free.
    pub fn kv_shortfall(&self) -> u32 {
        let Some(&id) = self.waiting.front() else { return 0 };
        let (_, _, need) = self.next_chunk(&self.seqs[id.0 as usize], self.cfg.max_batched_tokens);
        (need + self.watermark_blocks()).saturating_sub(self.blocks_free)
    }

    /// The request whose KV would best leave, among the decoding requests not
    /// executing, that have not moved before and have at least two tokens still to
    /// generate. To free `need` > 0 blocks: the one holding the fewest blocks that still
    /// covers `need` (the shortest copy that unblocks the queue), else the one holding
    /// the most. To shed load (`need` 0): the one with the most tokens still to
    /// generate (the most decode steps leave), the shorter KV first among equals.
    pub fn migration_candidate(&self, need: u32) -> Option<SeqId> {
        let movable = self.running.iter().copied().filter(|v| {
            let s = &self.seqs[v.0 as usize];
            s.can_move() && !s.moved_in && s.output > s.generated + 1
        });
        let blocks = |v: &SeqId| self.seqs[v.0 as usize].blocks;
        if need == 0 {
            let left = |v: &SeqId| self.seqs[v.0 as usize].output - self.seqs[v.0 as usize].generated;
            return movable.max_by_key(|v| (left(v), u32::MAX - blocks(v), u32::MAX - v.0));
        }
        movable
            .clone()
            .filter(|v| blocks(v) >= need)
            .min_by_key(|v| (blocks(v), v.0))
            .or_else(|| movable.max_by_key(|v| (blocks(v), u32::MAX - v.0)))
    }

    /// The oldest request here still without its first token (waiting, or part-way
    /// through its prefill), if any: how far behind the engine is.
    pub fn oldest_unstarted(&self) -> Option<SeqId> {
        let running = self.running.iter().copied().filter(|v| self.seqs[v.0 as usize].generated == 0).min();
        match (running, self.waiting.front().copied()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What a receiver needs to take `seq`, if it is a [`Engine::migration_candidate`]
    /// kind of request (decoding, idle, not moving).
    pub fn moved_state(&self, seq: SeqId) -> Option<MovedSeq> {
        let s = self.seqs.get(seq.0 as usize).filter(|s| s.can_move())?;
        Some(MovedSeq {
            prompt: s.prompt,
            output: s.output,
            computed: s.computed,
            generated: s.generated,
            blocks: s.blocks,
            preemptions: s.preemptions,
        })
    }

    /// Books blocks for a request arriving from another engine: it holds them from now,
    /// and is scheduled once [`Engine::land`] says its KV is here. None when the blocks
    /// (beside the watermark) or a running slot are not free.
    pub fn attach(&mut self, m: &MovedSeq) -> Option<SeqId> {
        let watermark = self.watermark_blocks();
        let moving_in = self.seqs.iter().filter(|s| s.moving).count();
        if self.blocks_free < m.blocks.saturating_add(watermark)
            || self.running.len() + moving_in >= self.cfg.max_num_seqs as usize
        {
            return None;
        }
        self.blocks_free -= m.blocks;
        let id = SeqId(self.seqs.len() as u32);
        let seq = Seq {
            prompt: m.prompt,
            output: m.output,
            computed: m.computed,
            generated: m.generated,
            blocks: m.blocks,
            preemptions: m.preemptions,
            finished: false,
            inflight: false,
            moving: true,
            moved_in: true,
        };
        self.prefill_left += seq.prefill_left();
        self.seqs.push(seq);
        Some(id)
    }

    /// The request's KV starts leaving: it stops being scheduled (and cannot be
    /// preempted) and keeps its blocks until [`Engine::release_moved`]. False if it is
    /// not a request that can move now.
    pub fn detach(&mut self, seq: SeqId) -> bool {
        if self.moved_state(seq).is_none() {
            return false;
        }
        self.running.retain(|&v| v != seq);
        self.seqs[seq.0 as usize].moving = true;
        true
    }

    /// The copy landed: the sender frees the request's blocks; it has ended here.
    pub fn release_moved(&mut self, seq: SeqId) {
        let s = &mut self.seqs[seq.0 as usize];
        debug_assert!(s.moving && !s.finished);
        self.prefill_left -= s.prefill_left();
        self.blocks_free += s.blocks;
        s.blocks = 0;
        s.moving = false;
        s.finished = true;
    }

    /// The copy landed: the receiver schedules the request like any running one.
    pub fn land(&mut self, seq: SeqId) {
        let s = &mut self.seqs[seq.0 as usize];
        debug_assert!(s.moving && !s.finished);
        s.moving = false;
        self.running.push(seq);
    }
}

#[cfg(test)]
mod tests {
    use crate::{Engine, EngineConfig, SeqEvent};

    /// Runs up to `steps` iterations of `e`, returning every event.
    fn decode_a_while(e: &mut Engine, steps: usize) -> Vec<SeqEvent> {
        let mut ev = Vec::new();
        for _ in 0..steps {
            let Some(b) = e.schedule() else { break };
            e.complete(b, &mut ev);
        }
        ev
    }

    fn conserved(e: &Engine) {
        assert_eq!(e.blocks_held() + e.kv_blocks_free(), e.kv_blocks_total());
        e.prefill_backlog(); // checks the kept sum against the queues (debug builds)
    }

    #[test]
    fn a_moved_request_finishes_on_the_receiver_with_its_tokens_counted_once() {
        let cfg = EngineConfig { watermark: 0.0, ..EngineConfig::default() };
        let (mut a, mut b) = (Engine::new(cfg, 20), Engine::new(cfg, 20));
        a.add_request(100, 40); // 7 blocks to start, grows to 9
        a.add_request(100, 40);
        decode_a_while(&mut a, 4);
        a.add_request(150, 4); // 10 blocks: does not fit beside the two
        assert!(a.kv_shortfall() > 0);
        let seq = a.migration_candidate(a.kv_shortfall()).expect("a decoding request");
        let m = a.moved_state(seq).unwrap();
        let to = b.attach(&m).expect("room on the receiver");
        assert!(a.detach(seq));
        conserved(&a);
        conserved(&b);
        assert_eq!(b.kv_blocks_free(), 20 - m.blocks, "booked before the copy");
        assert!(a.is_inflight(seq) && b.is_inflight(to), "neither side aborts a moving request");
        assert!(b.schedule().is_none(), "not scheduled before it lands");
        a.release_moved(seq);
        b.land(to);
        conserved(&a);
        assert!(a.kv_shortfall() == 0, "the queue's head fits now");
        let ev = decode_a_while(&mut b, 100);
        let finished: Vec<_> = ev.iter().filter(|e| matches!(e, SeqEvent::Finished { .. })).collect();
        assert_eq!(finished.len(), 1);
        assert!(!ev.iter().any(|e| matches!(e, SeqEvent::FirstToken { .. })), "its first token was on the sender");
        assert_eq!(b.seq_generated(to), 40);
        assert_eq!(b.kv_blocks_free(), 20);
    }

    #[test]
    fn a_receiver_without_room_refuses_and_nothing_is_booked() {
        let cfg = EngineConfig { watermark: 0.0, ..EngineConfig::default() };
        let mut a = Engine::new(cfg, 40);
        a.add_request(200, 10);
        decode_a_while(&mut a, 2);
        let seq = a.migration_candidate(1).unwrap();
        let m = a.moved_state(seq).unwrap();
        let mut b = Engine::new(cfg, m.blocks - 1);
        assert_eq!(b.attach(&m), None);
        assert_eq!(b.kv_blocks_free(), m.blocks - 1);
        assert_eq!(b.seqs_held(), 0);
    }

    #[test]
    fn only_idle_decoding_requests_with_tokens_left_may_move() {
        let mut a = Engine::new(EngineConfig::default(), 100);
        a.add_request(64, 2);
        assert_eq!(a.migration_candidate(0), None, "waiting, not decoding");
        let b = a.schedule().unwrap();
        assert_eq!(a.migration_candidate(0), None, "executing");
        let mut ev = Vec::new();
        a.complete(b, &mut ev);
        assert_eq!(a.migration_candidate(0), None, "one token left: not worth a copy");
        a.add_request(64, 50);
        decode_a_while(&mut a, 2);
        assert!(a.migration_candidate(0).is_some());
    }

    proptest::proptest! {
        /// Requests moving back and forth between two engines at random moments, their
        /// copies landing some iterations later: every block is accounted for on both
        /// sides at every step, and every request finishes exactly once.
        #[test]
        fn moves_keep_every_block_and_every_request(
            reqs in proptest::collection::vec((1u32..400, 2u32..60), 1..24),
            blocks in 60u32..300,
            moves in proptest::collection::vec((0u8..4, 1usize..5), 0..40),
        ) {
            let cfg = EngineConfig { max_batched_tokens: 512, ..EngineConfig::default() };
            let mut e = [Engine::new(cfg, blocks), Engine::new(cfg, blocks)];
            let mut admitted = 0;
            for (p, o) in reqs {
                if let crate::Admission::Queued(_) = e[0].add_request(p, o) {
                    admitted += 1;
                }
            }
            // (from, its seq, to, its seq, landing step)
            let mut in_flight: Vec<(usize, crate::SeqId, usize, crate::SeqId, usize)> = Vec::new();
            let (mut finished, mut ev, mut moves) = (0, Vec::new(), moves.into_iter());
            for step in 0..100_000 {
                let mut k = 0;
                while k < in_flight.len() {
                    if in_flight[k].4 == step {
                        let (from, fs, to, ts, _) = in_flight.swap_remove(k);
                        e[from].release_moved(fs);
                        e[to].land(ts);
                    } else {
                        k += 1;
                    }
                }
                if let Some((dir, delay)) = moves.next() {
                    let from = (dir & 1) as usize;
                    let need = if dir & 2 == 0 { e[from].kv_shortfall() } else { 0 };
                    if let Some(seq) = e[from].migration_candidate(need) {
                        let m = e[from].moved_state(seq).unwrap();
                        if let Some(ts) = e[1 - from].attach(&m) {
                            proptest::prop_assert!(e[from].detach(seq));
                            in_flight.push((from, seq, 1 - from, ts, step + delay));
                        }
                    }
                }
                let mut busy = !in_flight.is_empty();
                for x in e.iter_mut() {
                    if let Some(b) = x.schedule() {
                        busy = true;
                        ev.clear();
                        x.complete(b, &mut ev);
                        finished += ev.iter().filter(|v| matches!(v, SeqEvent::Finished { .. })).count();
                    }
                    busy |= x.has_work();
                    proptest::prop_assert_eq!(x.blocks_held() + x.kv_blocks_free(), x.kv_blocks_total());
                }
                if !busy {
                    break;
                }
            }
            proptest::prop_assert_eq!(finished, admitted);
            for x in &e {
                proptest::prop_assert_eq!(x.kv_blocks_free(), blocks);
            }
        }
    }
}
