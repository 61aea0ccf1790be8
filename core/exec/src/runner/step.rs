//! One op at a time: how the simulator's loop drives the executor. The simulator
//! starts an op once its inputs are done; the executor launches it, waits for it and
//! reports its measured time.

use super::iter::{collect, launch_one, prepare, timing, Build, Loc, Sampling};
use super::{ExecBatch, OpPlace, OpTiming, Runner, SeqWork};
use crate::kernels::BLOCK_TOKENS;
use crate::ExecError;
use slicesched_model::{IterationBatch, IterationDag};

/// Sampled `(sequence, greedy token)` pairs and, when asked, their logits.
pub type SampledOutput = (Vec<(u64, i32)>, Option<Vec<Vec<f32>>>);

/// An iteration being executed op by op.
pub struct Stepper<'b> {
    tenant: usize,
    pub dag: IterationDag,
    pub batch: IterationBatch,
    seqs: Vec<u64>,
    /// The sequences that sample a token, in batch order.
    sampled: Vec<u64>,
    acts: Vec<Option<Vec<Loc>>>,
    bld: Build<'b>,
    result: Sampling,
}

impl<'b> Runner<'b> {
    /// Prepares an iteration (KV blocks, metadata) without launching anything.
    pub fn begin(&mut self, tenant: usize, batch: &ExecBatch) -> Result<Stepper<'b>, ExecError> {
        let b = self.backend;
        let t = self.tenants.get_mut(tenant).ok_or_else(|| ExecError::Placement(format!("no tenant {tenant}")))?;
        let (ib, meta) = prepare(t, batch)?;
        let dag = t.model.config.iteration_dag(&ib, t.tp as u32);
        Ok(Stepper {
            tenant,
            acts: vec![None; dag.len() as usize],
            dag,
            batch: ib,
            seqs: batch.seqs.iter().map(|s| s.seq).collect(),
            sampled: batch.seqs.iter().filter(|s| s.samples || !s.prefill).map(|s| s.seq).collect(),
            bld: Build { b, bufs: Vec::new(), meta, stats: self.collectives.clone() },
            result: None,
        })
    }

    /// Launches op `index` on `place`, waits for it and returns its times. Its producers
    /// must have been stepped before.
    pub fn step(&mut self, st: &mut Stepper<'b>, index: u32, place: OpPlace) -> Result<OpTiming, ExecError> {
        let t = &self.tenants[st.tenant];
        if index >= st.dag.len() {
            return Err(ExecError::Placement(format!("op {index} outside an iteration of {} ops", st.dag.len())));
        }
        let (tokens, sampled) = (st.batch.tokens() as usize, st.batch.sampled() as usize);
        let rec = launch_one(t, &st.dag, index, place, &mut st.acts, &mut st.bld, (tokens, sampled), &mut st.result)?;
        timing(&rec)
    }

    /// The greedy token of every sampling sequence (in batch order) and, with
    /// `want_logits`, their f32 logits: what a server samples from. Its LM head (and
    /// all-gather) must have been stepped.
    pub fn sampled(&self, st: &Stepper<'b>, want_logits: bool) -> Result<SampledOutput, ExecError> {
        let (tokens, logits) = st.result.as_ref().ok_or_else(|| ExecError::Launch("the LM head has not run".into()))?;
        let (ids, logits) = collect(self.backend, tokens, *logits, want_logits)?;
        Ok((st.sampled.iter().copied().zip(ids).collect(), logits))
    }

    /// Runs one short prefill and one decode step of `tenant` on its home, timed by no
    /// one, and frees their KV: what a serving engine does before it takes requests
    /// (vLLM's profile run and graph capture), so that the first request does not pay
    /// for cold caches, first-touched pages and idle worker threads (under `run`,
    /// `tiny-2t`'s first prefill ran its layer-0 QKV in 3.2x the profiled time, its
    /// layer-1 QKV in 1.5x). Skipped where the cache has no free block.
    pub fn warm_up(&mut self, tenant: usize) -> Result<(), ExecError> {
        const TOKENS: usize = 32;
        const SEQ: u64 = u64::MAX - 1;
        let t = self.tenants.get(tenant).ok_or_else(|| ExecError::Placement(format!("no tenant {tenant}")))?;
        let fits = (t.free_kv_blocks() * BLOCK_TOKENS).saturating_sub(1).min(TOKENS);
        if fits == 0 {
            return Ok(());
        }
        let vocab = t.model.vocab().max(1) as i32;
        let tokens: Vec<i32> = (0..fits as i32).map(|i| (i * 7919) % vocab).collect();
        let prefill = SeqWork { seq: SEQ, tokens, start_pos: 0, prefill: true, samples: true };
        let decode = SeqWork { seq: SEQ, tokens: vec![1 % vocab], start_pos: fits, prefill: false, samples: true };
        let r = [prefill, decode].into_iter().try_for_each(|w| {
            let mut st = self.begin(tenant, &ExecBatch { seqs: vec![w] })?;
            let r = (0..st.dag.len())
                .try_for_each(|i| self.step(&mut st, i, OpPlace { group: 0, priority: 0 }).map(|_| ()));
            self.end(st, false);
            r
        });
        // Whether or not it ran through, its KV goes back.
        self.release(tenant, SEQ);
        r
    }

    /// Ends an iteration: frees its activations and, with `release`, its sequences' KV.
    pub fn end(&mut self, st: Stepper<'b>, release: bool) {
        for id in st.bld.bufs {
            let _ = self.backend.free(id);
        }
        if release {
            for s in st.seqs {
                self.release(st.tenant, s);
            }
        }
    }
}
