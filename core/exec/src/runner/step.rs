//! One op at a time: how the simulator's loop drives the executor. The simulator
//! starts an op once its inputs are done; the executor launches it, waits for it and
//! reports its measured time.

use super::iter::{collect, launch_one, prepare, timing, Build, Loc, Sampling};
use super::{ExecBatch, OpPlace, OpTiming, Runner};
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
