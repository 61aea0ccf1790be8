//! Batch invariance, measured: one sequence's greedy generation alone, then again with
//! other sequences in the same batches (their prompts prefilled beside its prompt, their
//! decodes beside its decodes). On the CPU backend the GEMM is batch-invariant and the
//! logits are bit-identical; cuBLAS picks kernels by shape, so on a GPU the logits may
//! move with the batch (the GPU check reports by how much, and whether a greedy token
//! changed).

use crate::backend::{Backend, DeviceId};
use crate::model::HostWeights;
use crate::runner::{ExecBatch, OpPlace, Runner, SeqWork};
use crate::ExecError;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct BatchInvariance {
    pub model: String,
    /// Decode steps compared (the prefill's sampled token counts as the first).
    pub steps: usize,
    /// Steps whose logits were bit-identical alone and in the batch.
    pub identical_steps: usize,
    /// Largest |alone − batched| over every logit of every step.
    pub max_abs_diff: f32,
    /// Steps whose greedy token was the same.
    pub same_tokens: usize,
}

const ALONE: u64 = 1;
const OTHERS: [(u64, usize); 3] = [(2, 9), (3, 40), (4, 3)];

/// `steps` tokens of one sequence of `model` (random weights, a fixed prompt) alone
/// and beside three others, on `device` of `b`.
pub fn batch_invariance(
    b: &dyn Backend,
    device: DeviceId,
    model: &str,
    steps: usize,
) -> Result<BatchInvariance, ExecError> {
    let m = super::tiny(model)?;
    let w = HostWeights::random(&m, 3);
    let vocab = m.vocab() as i32;
    let mut r = Runner::new(b);
    let t = r.load_tenant(m, &w, &[device], 64)?;
    let prompt = |seed: u64, n: usize| -> Vec<i32> {
        (0..n as i64).map(|i| ((i * 7919 + seed as i64 * 104_729) % vocab as i64) as i32).collect()
    };
    let place = |_: u32, _: slicesched_model::OpKind, _: slicesched_model::Segment| OpPlace { group: 0, priority: 0 };
    let a_prompt = prompt(ALONE, 23);
    // One generation of sequence `seq` (prompt `a_prompt`), with `others` beside it.
    let mut generate = |seq: u64, others: &[(u64, usize)]| -> Result<Vec<(i32, Vec<f32>)>, ExecError> {
        let mut work: Vec<SeqWork> = std::iter::once((seq, a_prompt.clone()))
            .chain(others.iter().map(|&(s, n)| (s, prompt(s, n))))
            .map(|(s, tokens)| SeqWork { seq: s, tokens, start_pos: 0, prefill: true, samples: true })
            .collect();
        let mut out = Vec::with_capacity(steps);
        for _ in 0..steps {
            let o = r.run(t, &ExecBatch { seqs: work.clone() }, &place, true)?;
            let logits = o.logits.ok_or_else(|| ExecError::Launch("no logits returned".into()))?;
            let at = o
                .tokens
                .iter()
                .position(|x| x.0 == seq)
                .ok_or_else(|| ExecError::Launch(format!("sequence {seq} sampled no token")))?;
            out.push((o.tokens[at].1, logits[at].clone()));
            for s in &mut work {
                let tok = o.tokens.iter().find(|x| x.0 == s.seq).map_or(0, |x| x.1);
                s.start_pos += s.tokens.len();
                s.tokens = vec![tok];
                s.prefill = false;
            }
        }
        for s in &work {
            r.release(t, s.seq);
        }
        Ok(out)
    };
    let alone = generate(ALONE, &[])?;
    let batched = generate(ALONE + 10, &OTHERS.map(|(s, n)| (s + 10, n)))?;
    let mut res =
        BatchInvariance { model: model.to_string(), steps, identical_steps: 0, max_abs_diff: 0.0, same_tokens: 0 };
    for ((ta, la), (tb, lb)) in alone.iter().zip(&batched) {
        res.same_tokens += usize::from(ta == tb);
        res.identical_steps += usize::from(la.iter().zip(lb).all(|(x, y)| x.to_bits() == y.to_bits()));
        let d = la.iter().zip(lb).map(|(x, y)| (x - y).abs()).fold(0.0f32, |m, v| {
            if v.is_nan() {
                f32::INFINITY
            } else {
                m.max(v)
            }
        });
        res.max_abs_diff = res.max_abs_diff.max(d);
    }
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CpuBackend, CpuDeviceSpec};

    #[test]
    fn the_cpu_backend_is_batch_invariant_bit_for_bit() {
        let b = CpuBackend::new(&[CpuDeviceSpec { memory_bytes: 4 << 30, cores: 2 }]);
        let r = batch_invariance(&b, DeviceId(0), "tiny-2l", 5).unwrap();
        assert_eq!((r.identical_steps, r.same_tokens), (5, 5), "{r:?}");
        assert_eq!(r.max_abs_diff, 0.0);
    }
}
