//! The continuous-batching scheduler of one tenant.

use crate::IdDeque;
use serde::{Deserialize, Serialize};
use slicesched_model::{DecodeItem, IterationBatch, PrefillItem};
use std::collections::VecDeque;

mod migrate;
pub use migrate::MovedSeq;

/// Batching knobs, named after vLLM's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Token budget of one iteration (prefill chunk tokens + decodes).
    pub max_batched_tokens: u32,
    /// Most requests running at once.
    pub max_num_seqs: u32,
    /// KV-cache block size, tokens.
    pub block_size: u32,
    /// Split long prompts across iterations; without it a prompt must fit the budget.
    pub chunked_prefill: bool,
    /// Fraction of KV blocks kept free when admitting new requests, so running ones
    /// can grow without immediate preemption (vLLM's watermark).
    pub watermark: f64,
    /// While another batch executes, form decode-only or prefill-only batches rather
    /// than mixed ones, so decode steps never wait behind a prefill chunk's pass; one
    /// batch of decodes at a time.
    pub split_micro_batches: bool,
    /// Token budget of a batch that carries decode steps, or that forms while this
    /// engine's decodes execute (Sarathi-Serve's stall-free budget: a decoding request's
    /// next token never waits behind a long prefill chunk). 0: the replay derives it from
    /// the tenant's TPOT target and the cost model; at or above `max_batched_tokens`: no cap.
    pub decode_token_budget: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_batched_tokens: 4096,
            max_num_seqs: 256,
            block_size: 16,
            chunked_prefill: true,
            watermark: 0.01,
            split_micro_batches: true,
            decode_token_budget: 0,
        }
    }
}

/// The engine's handle of a request (dense, in arrival order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SeqId(pub u32);

/// What the engine says about a new request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Queued(SeqId),
    /// Needs more KV blocks than the whole cache has: it could never run.
    TooLong {
        blocks_needed: u32,
        blocks_total: u32,
    },
}

/// What happened to a request during an iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqEvent {
    FirstToken { seq: SeqId },
    Finished { seq: SeqId },
}

#[derive(Debug, Clone)]
struct Seq {
    prompt: u32,
    output: u32,
    /// Tokens whose KV is in the cache.
    computed: u32,
    generated: u32,
    blocks: u32,
    preemptions: u32,
    finished: bool,
    /// Part of a batch that is executing (it cannot join or be preempted by another).
    inflight: bool,
    /// Its KV is being copied to or from another engine ([`Engine::detach`],
    /// [`Engine::attach`]): it holds its blocks and is neither scheduled nor preempted.
    moving: bool,
    /// It came from another engine: it moves at most once.
    moved_in: bool,
}

impl Seq {
    /// Tokens that must be prefilled before the next token can be sampled: the prompt,
    /// plus, after a preemption, everything generated so far but the last token.
    fn prefill_target(&self) -> u32 {
        self.prompt + self.generated.saturating_sub(1)
    }
    fn in_prefill(&self) -> bool {
        self.computed < self.prefill_target() || (self.generated == 0 && self.computed < self.prompt)
    }
    /// Prompt tokens it has still to prefill (none once it decodes or has ended).
    fn prefill_left(&self) -> u64 {
        if self.finished || !self.in_prefill() {
            0
        } else {
            u64::from(self.prefill_target().max(self.prompt) - self.computed)
        }
    }
    /// Decoding, idle, not moving nor ended: its KV may leave ([`Engine::detach`]).
    fn can_move(&self) -> bool {
        !self.inflight && !self.moving && !self.finished && !self.in_prefill() && self.generated >= 1
    }
}

#[derive(Debug, Clone, Copy)]
enum Work {
    Prefill(u32),
    Decode,
}

/// One tenant's continuous-batching engine.
#[derive(Debug, Clone)]
pub struct Engine {
    cfg: EngineConfig,
    blocks_total: u32,
    blocks_free: u32,
    /// By [`SeqId`]; the oldest ended ones retire ([`Engine::retire_ended`]).
    seqs: IdDeque<Seq>,
    waiting: VecDeque<SeqId>,
    running: Vec<SeqId>,
    /// Batches executing, by [`BatchId`] slot; several at once when a policy runs
    /// micro-batches concurrently on different GPUs.
    batches: Vec<Option<Batch>>,
    spare: Vec<Batch>,
    /// Running requests that are part of an executing batch.
    inflight_seqs: usize,
    /// Executing batches that hold decodes.
    decode_batches: usize,
    preemptions: u64,
    /// Requests preempted since the last [`Engine::take_preempted`] (their KV was freed).
    preempted: Vec<SeqId>,
    /// Most KV tokens a request holds (sliding-window attention), if capped.
    kv_window: Option<u32>,
    /// Free blocks lent to the activations of executing micro-batches
    /// ([`Engine::lend_blocks`]): held, so no request takes them meanwhile.
    lent: u32,
    /// Σ `Seq::prefill_left`, kept as requests arrive, compute, are preempted and end:
    /// policies read it at every admission decision, too often to sum the queues.
    prefill_left: u64,
}

#[derive(Debug, Clone, Default)]
struct Batch {
    items: Vec<(SeqId, Work)>,
    batch: IterationBatch,
}

/// A batch the engine formed and has not completed yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BatchId(pub u32);

impl Engine {
    pub fn new(cfg: EngineConfig, kv_blocks: u32) -> Self {
        Self {
            cfg,
            blocks_total: kv_blocks,
            blocks_free: kv_blocks,
            seqs: IdDeque::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            batches: Vec::new(),
            spare: Vec::new(),
            inflight_seqs: 0,
            decode_batches: 0,
            preemptions: 0,
            preempted: Vec::new(),
            kv_window: None,
            lent: 0,
            prefill_left: 0,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }
    pub fn kv_blocks_total(&self) -> u32 {
        self.blocks_total
    }
    pub fn kv_blocks_free(&self) -> u32 {
        self.blocks_free
    }
    /// Lends `n` free blocks (to activations), keeping a tenth of the cache free for the
    /// requests running to grow into, so lending never preempts; false if they are not there.
    pub fn lend_blocks(&mut self, n: u32) -> bool {
        if self.blocks_free < n.saturating_add(self.blocks_total / 10) {
            return false;
        }
        self.blocks_free -= n;
        self.lent += n;
        true
    }
    /// Takes back up to `n` lent blocks; returns how many came back.
    pub fn return_blocks(&mut self, n: u32) -> u32 {
        let n = n.min(self.lent);
        self.lent -= n;
        self.blocks_free += n;
        n
    }
    /// Blocks lent out now.
    pub fn lent_blocks(&self) -> u32 {
        self.lent
    }
    /// Blocks requests hold now, and those lent out.
    pub fn kv_blocks_held(&self) -> u32 {
        self.blocks_total - self.blocks_free
    }
    /// Resizes the cache, as a KV pool shared with other engines on the same GPUs
    /// grows or shrinks under it; never below what requests hold.
    pub fn set_kv_blocks_total(&mut self, total: u32) {
        let held = self.kv_blocks_held();
        self.blocks_total = total.max(held);
        self.blocks_free = self.blocks_total - held;
    }
    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }
    pub fn seq_preemptions(&self, seq: SeqId) -> u32 {
        self.seqs[seq.0 as usize].preemptions
    }
    /// Tokens the request has generated so far.
    pub fn seq_generated(&self, seq: SeqId) -> u32 {
        self.seqs[seq.0 as usize].generated
    }
    /// Requests waiting or running.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }
    /// The request at the head of the waiting queue (the longest waiting, or a
    /// preempted one, which arrived even earlier).
    pub fn oldest_waiting(&self) -> Option<SeqId> {
        self.waiting.front().copied()
    }
    /// Batches executing now.
    pub fn batches_in_flight(&self) -> usize {
        self.batches.iter().filter(|b| b.is_some()).count()
    }
    /// Whether a new batch could take any request now (waiting, or running and idle).
    pub fn has_schedulable(&self) -> bool {
        !self.waiting.is_empty() || self.running.len() > self.inflight_seqs
    }
    pub fn queue_lengths(&self) -> (usize, usize) {
        (self.waiting.len(), self.running.len())
    }

    /// Prompt tokens still to prefill, waiting and running requests together: what a
    /// new request's own prefill queues behind (chunks go to the oldest first).
    pub fn prefill_backlog(&self) -> u64 {
        debug_assert_eq!(self.prefill_left, self.seqs.iter().map(Seq::prefill_left).sum::<u64>());
        self.prefill_left
    }

    /// Blocks admission keeps free (vLLM's watermark).
    fn watermark_blocks(&self) -> u32 {
        (self.blocks_total as f64 * self.cfg.watermark) as u32
    }

    /// A waiting request's prefill tokens still to run, its next chunk under `budget`,
    /// and the blocks that chunk adds.
    fn next_chunk(&self, s: &Seq, budget: u32) -> (u32, u32, u32) {
        let remaining = s.prefill_target().max(s.prompt) - s.computed;
        let chunk = remaining.min(budget);
        (remaining, chunk, self.blocks_for(s.computed, s.computed + chunk).saturating_sub(s.blocks))
    }

    /// Blocks a request holds once a step has computed its positions `start..end`: under
    /// a sliding window only the span its queries read and its tokens fill (the executor
    /// recycles the rest by the same rule, `slicesched_model::kv`). A request keeps the
    /// most it ever held, as the executor keeps the blocks it recycles.
    fn blocks_for(&self, start: u32, end: u32) -> u32 {
        slicesched_model::kv::live_blocks(self.cfg.block_size, self.kv_window, start, end)
    }

    /// Caps the KV each request holds at a sliding window of `window` tokens (a model
    /// whose every layer attends at most that far back; see
    /// `slicesched_model::ModelConfig::kv_window`).
    pub fn with_kv_window(mut self, window: Option<u32>) -> Self {
        self.kv_window = window.filter(|&w| w > 0);
        self
    }

    /// Queues a request, unless it could never fit in the KV cache.
    pub fn add_request(&mut self, prompt: u32, output: u32) -> Admission {
        let output = output.max(1);
        let need = slicesched_model::kv::peak_blocks(
            self.cfg.block_size,
            self.kv_window,
            prompt + output - 1,
            self.cfg.max_batched_tokens,
        );
        if need > self.blocks_total || prompt == 0 {
            return Admission::TooLong { blocks_needed: need, blocks_total: self.blocks_total };
        }
        let id = SeqId(self.seqs.len() as u32);
        self.seqs.push(Seq {
            prompt,
            output,
            computed: 0,
            generated: 0,
            blocks: 0,
            preemptions: 0,
            finished: false,
            inflight: false,
            moving: false,
            moved_in: false,
        });
        self.prefill_left += u64::from(prompt);
        self.waiting.push_back(id);
        Admission::Queued(id)
    }

    fn preempt(&mut self, victim: SeqId) {
        let s = &mut self.seqs[victim.0 as usize];
        self.prefill_left -= s.prefill_left();
        self.blocks_free += s.blocks;
        s.blocks = 0;
        s.computed = 0;
        self.prefill_left += s.prefill_left();
        s.preemptions += 1;
        self.preemptions += 1;
        self.preempted.push(victim);
        self.waiting.push_front(victim);
    }

    /// Moves the requests preempted since the last call into `out` (an executor that
    /// holds their KV frees it: they are recomputed from the start).
    pub fn take_preempted(&mut self, out: &mut Vec<SeqId>) {
        out.append(&mut self.preempted);
    }

    /// Ends a request early (a stop sequence, a cancelled client): it leaves the queues
    /// and its blocks are freed at once. Refused (false) while it is part of an
    /// executing batch, whose completion must come first, or when it already ended.
    pub fn abort(&mut self, seq: SeqId) -> bool {
        let Some(s) = self.seqs.get_mut(seq.0 as usize) else { return false };
        if s.inflight || s.moving || s.finished {
            return false;
        }
        self.prefill_left -= s.prefill_left();
        s.finished = true;
        self.blocks_free += s.blocks;
        s.blocks = 0;
        self.waiting.retain(|&v| v != seq);
        self.running.retain(|&v| v != seq);
        true
    }

    /// Whether the request is part of an executing batch, or its KV is moving: either
    /// way it cannot be aborted until that ends.
    pub fn is_inflight(&self, seq: SeqId) -> bool {
        self.seqs.get(seq.0 as usize).is_some_and(|s| s.inflight || s.moving)
    }

    /// Whether the request finished or was aborted.
    pub fn is_finished(&self, seq: SeqId) -> bool {
        self.seqs.get(seq.0 as usize).is_none_or(|s| s.finished)
    }

    /// The requests of an executing batch in its DAG's order: prefill chunks, then
    /// decodes, each in the order of [`IterationBatch`].
    pub fn batch_seqs(&self, id: BatchId, out: &mut Vec<SeqId>) {
        let b = self.batches[id.0 as usize].as_ref().expect("batch in flight");
        out.clear();
        out.extend(b.items.iter().filter(|(_, w)| matches!(w, Work::Prefill(_))).map(|(s, _)| *s));
        out.extend(b.items.iter().filter(|(_, w)| matches!(w, Work::Decode)).map(|(s, _)| *s));
    }

    /// Forms a batch from the requests not already executing. Returns None when there
    /// is nothing to run. Several batches may execute at once; each is completed with
    /// [`Engine::complete`].
    pub fn schedule(&mut self) -> Option<BatchId> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.items.clear();
        b.batch.prefills.clear();
        b.batch.decodes.clear();
        let mut budget = self.cfg.max_batched_tokens;
        let mut preempted = false;
        // Split: one batch of decodes at a time (a decode step reads all the weights,
        // however few requests it carries), and prefill chunks in the others.
        let split = self.cfg.split_micro_batches && self.inflight_seqs > 0;
        let ready_decodes = self
            .running
            .iter()
            .filter(|v| {
                let s = &self.seqs[v.0 as usize];
                !s.inflight && !s.in_prefill()
            })
            .count() as u32;
        let decode_only = split && self.decode_batches == 0 && ready_decodes > 0;
        let prefill_only = split && !decode_only;
        // Decode steps this batch may take: budget is kept for them ahead of any prefill
        // chunk (Sarathi-Serve), so a chunk never pushes a decode to the next iteration.
        let mut decodes_left = if prefill_only { 0 } else { ready_decodes };
        let cap = self.cfg.decode_token_budget;
        if cap > 0 && cap < budget && (decodes_left > 0 || self.decode_batches > 0) {
            budget = cap;
        }

        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let s = &self.seqs[id.0 as usize];
            if s.inflight || (decode_only && s.in_prefill()) || (prefill_only && !s.in_prefill()) {
                i += 1;
                continue;
            }
            let (work, tokens) = if s.in_prefill() {
                let room = budget.saturating_sub(decodes_left);
                if room == 0 {
                    i += 1;
                    continue;
                }
                let chunk = (s.prefill_target().max(s.prompt) - s.computed).min(room);
                (Work::Prefill(chunk), chunk)
            } else {
                decodes_left -= 1;
                (Work::Decode, 1)
            };
            let need = self.blocks_for(s.computed, s.computed + tokens).saturating_sub(s.blocks);
            // Free blocks by preempting the newest idle running requests, vLLM's policy.
            let mut self_preempted = false;
            let mut stuck = false;
            while self.blocks_free < need {
                let Some(pos) = self.running.iter().rposition(|v| !self.seqs[v.0 as usize].inflight) else {
                    stuck = true;
                    break;
                };
                let victim = self.running.remove(pos);
                preempted = true;
                self.preempt(victim);
                if victim == id {
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted || stuck {
                break;
            }
            self.blocks_free -= need;
            let s = &mut self.seqs[id.0 as usize];
            s.blocks += need;
            s.inflight = true;
            budget -= tokens;
            b.items.push((id, work));
            i += 1;
        }

        // Like vLLM, admit nothing new in a step that had to preempt.
        if !preempted && !decode_only {
            let watermark = self.watermark_blocks();
            while let Some(&id) = self.waiting.front() {
                if budget == 0 || self.running.len() as u32 >= self.cfg.max_num_seqs {
                    break;
                }
                let (remaining, chunk, need) = self.next_chunk(&self.seqs[id.0 as usize], budget);
                if !self.cfg.chunked_prefill && remaining > budget {
                    break;
                }
                if self.blocks_free < need + watermark {
                    break;
                }
                self.waiting.pop_front();
                self.blocks_free -= need;
                let s = &mut self.seqs[id.0 as usize];
                s.blocks += need;
                s.inflight = true;
                budget -= chunk;
                self.running.push(id);
                b.items.push((id, Work::Prefill(chunk)));
            }
        }

        for &(id, work) in &b.items {
            let s = &self.seqs[id.0 as usize];
            match work {
                Work::Prefill(chunk) => b.batch.prefills.push(PrefillItem {
                    chunk,
                    prior_kv: s.computed,
                    samples: s.computed + chunk >= s.prefill_target().max(s.prompt),
                }),
                Work::Decode => b.batch.decodes.push(DecodeItem { kv_len: s.computed + 1 }),
            }
        }
        if b.items.is_empty() {
            self.spare.push(b);
            return None;
        }
        self.inflight_seqs += b.items.len();
        self.decode_batches += !b.batch.decodes.is_empty() as usize;
        let slot = match self.batches.iter().position(|x| x.is_none()) {
            Some(p) => p,
            None => {
                self.batches.push(None);
                self.batches.len() - 1
            }
        };
        self.batches[slot] = Some(b);
        Some(BatchId(slot as u32))
    }

    /// The composition of an executing batch.
    pub fn batch(&self, id: BatchId) -> &IterationBatch {
        &self.batches[id.0 as usize].as_ref().expect("batch in flight").batch
    }

    /// Prompt tokens (first computation, not recomputation) in an executing batch.
    pub fn batch_new_prompt_tokens(&self, id: BatchId) -> u64 {
        let b = self.batches[id.0 as usize].as_ref().expect("batch in flight");
        b.items
            .iter()
            .map(|&(sid, w)| match w {
                Work::Prefill(c) => {
                    let s = &self.seqs[sid.0 as usize];
                    (s.computed + c).min(s.prompt).saturating_sub(s.computed) as u64
                }
                Work::Decode => 0,
            })
            .sum()
    }

    /// Applies an executing batch's results.
    pub fn complete(&mut self, id: BatchId, events: &mut Vec<SeqEvent>) {
        let b = self.batches[id.0 as usize].take().expect("batch in flight");
        self.inflight_seqs -= b.items.len();
        self.decode_batches -= !b.batch.decodes.is_empty() as usize;
        let mut any_finished = false;
        for &(sid, work) in &b.items {
            let s = &mut self.seqs[sid.0 as usize];
            s.inflight = false;
            let before = s.prefill_left();
            let sampled = match work {
                Work::Prefill(c) => {
                    s.computed += c;
                    s.computed >= s.prefill_target().max(s.prompt)
                }
                Work::Decode => {
                    s.computed += 1;
                    true
                }
            };
            if sampled {
                s.generated += 1;
                if s.generated == 1 {
                    events.push(SeqEvent::FirstToken { seq: sid });
                }
                if s.generated >= s.output {
                    s.finished = true;
                    any_finished = true;
                    self.blocks_free += s.blocks;
                    s.blocks = 0;
                    events.push(SeqEvent::Finished { seq: sid });
                }
            }
            self.prefill_left = self.prefill_left - before + s.prefill_left();
        }
        if any_finished {
            self.running.retain(|v| !self.seqs[v.0 as usize].finished);
        }
        self.spare.push(b);
    }

    /// Total blocks held by requests (for invariant checks).
    pub fn blocks_held(&self) -> u32 {
        self.seqs.iter().map(|s| s.blocks).sum()
    }

    /// Forgets the oldest requests that ended, up to the first one still waiting or
    /// running, and returns the lowest [`SeqId`] still held. A server that runs for ever
    /// calls this so the engine holds what is open, not every request it ever had; a
    /// retired request's state is gone ([`Engine::is_finished`] still answers true).
    pub fn retire_ended(&mut self) -> u32 {
        self.seqs.retire_while(|s| s.finished && !s.inflight, |_, _| {});
        self.seqs.base() as u32
    }

    /// Requests whose state the engine holds (open ones, and ended ones not retired).
    pub fn seqs_held(&self) -> usize {
        self.seqs.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_to_end(e: &mut Engine) -> (u32, Vec<SeqEvent>) {
        let mut iters = 0;
        let mut ev = Vec::new();
        while let Some(b) = e.schedule() {
            iters += 1;
            e.complete(b, &mut ev);
            assert_eq!(e.blocks_held() + e.kv_blocks_free(), e.kv_blocks_total());
            e.prefill_backlog(); // checks the kept sum against the queues (debug builds)
            assert!(iters < 100_000);
        }
        (iters, ev)
    }

    #[test]
    fn one_request_prefills_then_decodes() {
        let mut e = Engine::new(EngineConfig::default(), 1000);
        e.add_request(100, 5);
        let id = e.schedule().unwrap();
        assert_eq!(e.batch(id).prefills, vec![PrefillItem { chunk: 100, prior_kv: 0, samples: true }]);
        let mut ev = Vec::new();
        e.complete(id, &mut ev);
        assert_eq!(ev, vec![SeqEvent::FirstToken { seq: SeqId(0) }]);
        let id = e.schedule().unwrap();
        assert_eq!(e.batch(id).decodes, vec![DecodeItem { kv_len: 101 }]);
        e.complete(id, &mut ev);
        let (iters, ev) = run_to_end(&mut e);
        assert_eq!(iters, 3);
        assert_eq!(ev, vec![SeqEvent::Finished { seq: SeqId(0) }]);
        assert_eq!(e.kv_blocks_free(), 1000);
    }

    #[test]
    fn ended_requests_retire_oldest_first_and_ids_keep_counting() {
        let mut e = Engine::new(EngineConfig::default(), 1000);
        let long = match e.add_request(50, 40) {
            Admission::Queued(s) => s,
            other => panic!("{other:?}"),
        };
        for _ in 0..5 {
            e.add_request(20, 2);
        }
        // A few iterations: the short ones finish, the long one is still decoding.
        for _ in 0..4 {
            let b = e.schedule().unwrap();
            e.complete(b, &mut Vec::new());
        }
        assert!(!e.is_finished(long));
        // The long request is the oldest: nothing behind it can retire yet.
        assert_eq!(e.retire_ended(), 0);
        assert_eq!(e.seqs_held(), 6);
        run_to_end(&mut e);
        assert_eq!(e.retire_ended(), 6);
        assert_eq!(e.seqs_held(), 0);
        assert!(e.is_finished(long));
        assert_eq!(e.add_request(10, 1), Admission::Queued(SeqId(6)));
        assert_eq!(e.retire_ended(), 6, "an open request stays");
        run_to_end(&mut e);
        assert_eq!(e.kv_blocks_free(), 1000);
    }

    #[test]
    fn the_prefill_backlog_counts_what_is_left_of_every_prompt() {
        let cfg = EngineConfig { max_batched_tokens: 256, ..Default::default() };
        let mut e = Engine::new(cfg, 1000);
        assert_eq!(e.prefill_backlog(), 0);
        e.add_request(600, 2);
        e.add_request(100, 2);
        assert_eq!(e.prefill_backlog(), 700, "both waiting");
        // The long prompt takes the whole first chunk; the short one waits behind it.
        let id = e.schedule().unwrap();
        assert_eq!(e.prefill_backlog(), 700, "an executing chunk counts until it is done");
        e.complete(id, &mut Vec::new());
        assert_eq!(e.prefill_backlog(), 444);
        while e.prefill_backlog() > 0 {
            let id = e.schedule().unwrap();
            e.complete(id, &mut Vec::new());
        }
        // Decoding requests have nothing left to prefill.
        assert_eq!(e.queue_lengths(), (0, 2));
        run_to_end(&mut e);
        assert_eq!(e.prefill_backlog(), 0);
    }

    #[test]
    fn chunked_prefill_respects_budget() {
        let cfg = EngineConfig { max_batched_tokens: 256, ..Default::default() };
        let mut e = Engine::new(cfg, 1000);
        e.add_request(600, 2);
        let chunks: Vec<_> = (0..3)
            .map(|_| {
                let id = e.schedule().unwrap();
                let b = e.batch(id).prefills[0];
                e.complete(id, &mut Vec::new());
                b
            })
            .collect();
        assert_eq!(chunks.iter().map(|c| c.chunk).collect::<Vec<_>>(), vec![256, 256, 88]);
        assert_eq!(chunks.iter().map(|c| c.prior_kv).collect::<Vec<_>>(), vec![0, 256, 512]);
        assert_eq!(chunks.iter().map(|c| c.samples).collect::<Vec<_>>(), vec![false, false, true]);
    }

    #[test]
    fn preempts_newest_when_kv_runs_out() {
        // 4 blocks of 16 tokens: two requests of 16-token prompts that each grow to 40.
        let mut e = Engine::new(EngineConfig { watermark: 0.0, ..Default::default() }, 4);
        e.add_request(16, 25);
        e.add_request(16, 25);
        let (_, ev) = run_to_end(&mut e);
        assert!(e.preemptions() >= 1, "expected a preemption");
        assert_eq!(ev.iter().filter(|x| matches!(x, SeqEvent::Finished { .. })).count(), 2);
        assert!(e.seq_preemptions(SeqId(1)) >= 1, "the newer request is the victim");
    }

    #[test]
    fn concurrent_batches_take_disjoint_requests() {
        let mut e = Engine::new(EngineConfig { max_batched_tokens: 300, ..Default::default() }, 1000);
        for _ in 0..3 {
            e.add_request(200, 3);
        }
        let a = e.schedule().unwrap();
        let b = e.schedule().unwrap();
        assert_ne!(a, b);
        // 300-token budget: the first batch takes request 0 and 100 tokens of request 1;
        // the second may only take what is not executing: request 2.
        assert_eq!(e.batch(a).prefills.len(), 2);
        assert_eq!(e.batch(b).prefills, vec![PrefillItem { chunk: 200, prior_kv: 0, samples: true }]);
        assert!(e.schedule().is_none(), "everything is executing");
        assert_eq!(e.batches_in_flight(), 2);
        let mut ev = Vec::new();
        e.complete(b, &mut ev);
        e.complete(a, &mut ev);
        assert_eq!(ev.len(), 2, "requests 0 and 2 got their first token");
        let (_, ev) = run_to_end(&mut e);
        assert_eq!(ev.iter().filter(|x| matches!(x, SeqEvent::Finished { .. })).count(), 3);
    }

    #[test]
    fn beside_an_executing_batch_decodes_go_alone() {
        let shape = |e: &Engine, b: BatchId| (e.batch(b).decodes.len(), e.batch(b).prefills.len());
        for split in [true, false] {
            let cfg = EngineConfig { max_batched_tokens: 300, split_micro_batches: split, ..Default::default() };
            let mut e = Engine::new(cfg, 1000);
            let mut ev = Vec::new();
            e.add_request(100, 5);
            let a = e.schedule().unwrap();
            e.complete(a, &mut ev);
            e.add_request(1000, 5);
            // Nothing else executing: request 0's decode rides with request 1's chunk.
            let mixed = e.schedule().unwrap();
            assert_eq!(shape(&e, mixed), (1, 1));
            e.add_request(50, 2);
            let other = e.schedule().unwrap();
            assert_eq!(shape(&e, other), (0, 1), "only request 2 is free");
            e.complete(mixed, &mut ev);
            // `other` executes: with the split, request 0's decode goes without request
            // 1's next chunk, which gets a batch of its own.
            let next = e.schedule().unwrap();
            if split {
                assert_eq!(shape(&e, next), (1, 0));
                let chunk = e.schedule().unwrap();
                assert_eq!(shape(&e, chunk), (0, 1));
                // Request 2 now decodes too, but one batch of decodes executes already:
                // it waits for the next one rather than read all the weights for itself.
                e.complete(other, &mut ev);
                assert!(e.schedule().is_none());
                e.complete(next, &mut ev);
                let both = e.schedule().unwrap();
                assert_eq!(shape(&e, both), (2, 0));
            } else {
                assert_eq!(shape(&e, next), (1, 1));
            }
        }
    }

    #[test]
    fn decode_budget_caps_the_chunk_only_while_decodes_ride() {
        let cfg = EngineConfig { max_batched_tokens: 1000, decode_token_budget: 300, ..Default::default() };
        let mut e = Engine::new(cfg, 1000);
        let mut ev = Vec::new();
        e.add_request(2000, 5);
        // No decode anywhere: the chunk takes the whole budget.
        let a = e.schedule().unwrap();
        assert_eq!(e.batch(a).prefills[0].chunk, 1000);
        e.complete(a, &mut ev);
        let b = e.schedule().unwrap();
        assert_eq!(e.batch(b).prefills[0].chunk, 1000);
        e.complete(b, &mut ev);
        e.add_request(500, 5);
        // Request 0 decodes now: its step rides with at most 299 of request 1's tokens.
        let c = e.schedule().unwrap();
        assert_eq!(e.batch(c).decodes.len(), 1);
        assert_eq!(e.batch(c).prefills.iter().map(|p| p.chunk).sum::<u32>(), 299);
    }

    #[test]
    fn a_chunk_ahead_of_decodes_leaves_them_room() {
        // Request 0 is part-way through a long prompt and ahead of request 1, which
        // decodes: the chunk yields a token of the budget rather than push the decode
        // to the next iteration.
        let cfg = EngineConfig { max_batched_tokens: 100, ..Default::default() };
        let mut e = Engine::new(cfg, 1000);
        let mut ev = Vec::new();
        e.add_request(1000, 5);
        let a = e.schedule().unwrap();
        e.add_request(10, 5);
        // Beside request 0's chunk, request 1's prompt goes in a batch of its own.
        let b = e.schedule().unwrap();
        assert_eq!(e.batch(b).prefills, vec![PrefillItem { chunk: 10, prior_kv: 0, samples: true }]);
        e.complete(a, &mut ev);
        e.complete(b, &mut ev);
        let c = e.schedule().unwrap();
        assert_eq!(e.batch(c).decodes.len(), 1);
        assert_eq!(e.batch(c).prefills[0].chunk, 99);
    }

    #[test]
    fn sliding_window_caps_a_requests_kv() {
        // 10,000 tokens of context hold 625 blocks, or under a 4096-token window the
        // window's 257 plus what the largest prefill chunk (256 tokens here) writes.
        let mut e = Engine::new(EngineConfig::default(), 300);
        assert!(matches!(e.add_request(9_000, 1_001), Admission::TooLong { blocks_needed: 625, .. }));
        let windowed = |cfg| Engine::new(cfg, 300).with_kv_window(Some(4096));
        // Chunks of 4,096 tokens: the second reads the first's last 4,095 tokens while it
        // writes its own, 512 blocks live at once, more than the cache.
        let mut e = windowed(EngineConfig::default());
        assert!(matches!(e.add_request(9_000, 1_001), Admission::TooLong { blocks_needed: 513, .. }));
        let mut e = windowed(EngineConfig { max_batched_tokens: 256, ..EngineConfig::default() });
        assert!(matches!(e.add_request(9_000, 1_001), Admission::Queued(_)));
        let mut held = 0;
        while let Some(b) = e.schedule() {
            held = held.max(e.kv_blocks_held());
            e.complete(b, &mut Vec::new());
        }
        // Chunks start on block boundaries here: the window's 256 blocks and the chunk's 16.
        assert_eq!(held, 4096 / 16 + 256 / 16);
        assert_eq!(e.kv_blocks_free(), 300);
        // Within the window nothing changes.
        let mut a = Engine::new(EngineConfig::default(), 300);
        let mut b = Engine::new(EngineConfig::default(), 300).with_kv_window(Some(4096));
        a.add_request(1000, 50);
        b.add_request(1000, 50);
        assert_eq!(run_to_end(&mut a), run_to_end(&mut b));
    }

    #[test]
    fn abort_frees_blocks_unless_executing() {
        let mut e = Engine::new(EngineConfig::default(), 100);
        let Admission::Queued(a) = e.add_request(40, 10) else { panic!() };
        let Admission::Queued(b) = e.add_request(40, 10) else { panic!() };
        let Admission::Queued(c) = e.add_request(40, 10) else { panic!() };
        let id = e.schedule().unwrap();
        let mut order = Vec::new();
        e.batch_seqs(id, &mut order);
        assert_eq!(order, vec![a, b, c]);
        assert!(!e.abort(a), "executing: refused");
        e.complete(id, &mut Vec::new());
        assert!(e.abort(a));
        assert!(!e.abort(a), "already ended");
        assert_eq!(e.kv_blocks_held(), 2 * 3, "b and c hold 40 tokens, 3 blocks each");
        assert!(e.is_finished(a) && !e.is_finished(b));
        let (_, ev) = run_to_end(&mut e);
        assert_eq!(ev.iter().filter(|x| matches!(x, SeqEvent::Finished { .. })).count(), 2);
        assert_eq!(e.kv_blocks_free(), 100);
    }

    #[test]
    fn too_long_is_refused() {
        let mut e = Engine::new(EngineConfig::default(), 10);
        assert!(matches!(e.add_request(1000, 10), Admission::TooLong { .. }));
    }

    #[test]
    fn lent_blocks_are_held_until_returned_and_never_the_last_tenth() {
        let mut e = Engine::new(EngineConfig::default(), 1000);
        assert!(!e.lend_blocks(901), "a tenth of the cache stays free for running requests");
        assert!(e.lend_blocks(300));
        assert_eq!((e.kv_blocks_free(), e.kv_blocks_held(), e.lent_blocks()), (700, 300, 300));
        // A shared pool shrinking under the engine never takes lent blocks.
        e.set_kv_blocks_total(200);
        assert_eq!(e.kv_blocks_total(), 300);
        e.set_kv_blocks_total(1000);
        assert_eq!(e.return_blocks(500), 300, "only what was lent comes back");
        assert_eq!((e.kv_blocks_free(), e.lent_blocks()), (1000, 0));
    }

    proptest::proptest! {
        #[test]
        fn every_request_finishes_and_blocks_balance(
            reqs in proptest::collection::vec((1u32..600, 1u32..80), 1..30),
            blocks in 40u32..400,
            budget in 16u32..2048,
        ) {
            let mut e = Engine::new(EngineConfig { max_batched_tokens: budget, ..Default::default() }, blocks);
            let mut admitted = 0;
            for (p, o) in reqs {
                if let Admission::Queued(_) = e.add_request(p, o) { admitted += 1; }
            }
            let (_, ev) = run_to_end(&mut e);
            let finished = ev.iter().filter(|x| matches!(x, SeqEvent::Finished { .. })).count();
            proptest::prop_assert_eq!(finished, admitted);
            proptest::prop_assert_eq!(e.kv_blocks_free(), blocks);
        }
    }
}
