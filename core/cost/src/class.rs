//! Op classes: which cost model prices an op kind.
//!
//! Every op kind maps to one class, and the class (not the kind) chooses the model: a
//! new op kind needs only a line here — the class it belongs to and, for the classes
//! fitted per profiled kernel, which profiled kernel stands for it.

use slicesched_model::{OpKind, OpShape};

/// The cost-model classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    /// A matmul with weights: fixed floor + memory term + compute term whose efficiency
    /// depends on the op's intensity relative to the SKU's ridge point.
    Gemm,
    /// Row reductions (RMSNorm, LayerNorm): one pass, reduction-bound.
    Norm,
    /// Pointwise passes (activation, residual add, rotary embedding).
    Pointwise,
    /// Table lookups (token embedding).
    Gather,
    /// Attention over the KV cache (its own grids).
    Attention,
    /// NCCL collectives over the tensor-parallel group.
    Collective,
    /// Copies between GPUs inserted by the scheduler.
    Transfer,
}

impl OpClass {
    /// The non-GEMM kernels that run at a fraction of HBM bandwidth, their throughput
    /// set by the SM array rather than by HBM.
    pub fn is_streaming(self) -> bool {
        matches!(self, OpClass::Norm | OpClass::Pointwise | OpClass::Gather)
    }
}

/// The class of an op. The shape decides first (a kind the model crate adds later with
/// a GEMM or elementwise shape is priced by that shape's class); the kind refines the
/// elementwise ones.
pub fn op_class(kind: OpKind, shape: &OpShape) -> OpClass {
    match shape {
        OpShape::Gemm { .. } => OpClass::Gemm,
        OpShape::Attention(_) => OpClass::Attention,
        OpShape::Collective { .. } => OpClass::Collective,
        OpShape::Transfer { .. } => OpClass::Transfer,
        OpShape::Elementwise { .. } => match kind.cost_class() {
            OpKind::InputNorm | OpKind::PostAttnNorm | OpKind::FinalNorm => OpClass::Norm,
            OpKind::Embedding => OpClass::Gather,
            _ => OpClass::Pointwise,
        },
    }
}

/// The profiled kernel whose curves price `kind` when the profile has no column of
/// its own (the final norm is the input norm's kernel).
pub(crate) fn priced_as(kind: OpKind) -> OpKind {
    match kind.cost_class() {
        OpKind::FinalNorm => OpKind::InputNorm,
        k => k,
    }
}

/// Kernels the executor launches for `kind` beyond the one whose curve prices it: the
/// final norm first gathers the rows to sample, then runs the input norm's kernel on
/// them. Where ops were timed as launched each costs a launch more (`tiny-2t` under
/// `slicesched run`: the final norm measured 1.5x its input-norm price, 3.2-3.5 µs
/// against 2.1, the other norms within 5%).
pub(crate) fn extra_launches(kind: OpKind) -> u32 {
    match kind.cost_class() {
        OpKind::FinalNorm => 1,
        _ => 0,
    }
}

/// Whether `kind`'s kernel changes with the TP degree beyond its shape, so that its
/// profiled curves are kept per degree: the vocab-parallel embedding masks the tokens
/// outside its shard of the vocabulary, gathers the rest and zeroes the masked rows
/// (several kernels at TP > 1, one plain gather at TP 1), at the same width.
pub(crate) fn per_tp_kernel(kind: OpKind) -> bool {
    priced_as(kind) == OpKind::Embedding
}

#[cfg(test)]
mod tests {
    use super::*;
    use slicesched_model::OpSpec;

    #[test]
    fn every_kind_has_a_class() {
        let m = slicesched_model::ModelConfig::preset("llama-3-8b").unwrap();
        let b = slicesched_model::IterationBatch {
            prefills: vec![slicesched_model::PrefillItem { chunk: 16, prior_kv: 0, samples: true }],
            decodes: vec![],
        };
        let dag = m.iteration_dag(&b, 2);
        let ops: Vec<&OpSpec> = dag.head.iter().chain(&dag.layer).chain(&dag.tail).collect();
        for o in ops {
            let c = op_class(o.kind, &o.shape);
            assert_eq!(c == OpClass::Gemm, o.kind.is_gemm(), "{:?}", o.kind);
            assert_eq!(c == OpClass::Collective, o.kind.is_collective(), "{:?}", o.kind);
        }
        assert_eq!(op_class(OpKind::FinalNorm, &OpShape::Elementwise { tokens: 1, width: 1 }), OpClass::Norm);
    }
}
