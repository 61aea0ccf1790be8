//! The operator graph: in-flight iterations, their ops, states and tensor edges.

use crate::{GroupId, IterId, OpId, TenantId};
use petgraph::stable_graph::{NodeIndex, StableGraph};
use petgraph::Direction;
use serde::Serialize;
use slicesched_model::{IterationDag, OpKind, Segment};

/// Lifecycle of an op. Transitions only move forward, except that a placement may be
/// taken back before the op starts (Placed → Ready, see [`Gmg::unplace`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum OpState {
    /// Some input is not produced yet.
    Pending,
    /// All inputs done; waiting for a placement.
    Ready,
    /// Placed on a group; waiting for the devices.
    Placed,
    Running,
    Done,
}

/// One in-flight operator instance.
#[derive(Debug, Clone, Serialize)]
pub struct OpNode {
    pub tenant: TenantId,
    pub iter: IterId,
    /// Position in its iteration's DAG (topological order).
    pub index: u32,
    pub kind: OpKind,
    /// Layer for layer ops; None for head and tail ops.
    pub layer: Option<u32>,
    pub state: OpState,
    pub group: Option<GroupId>,
    /// Predicted latency on the tenant's home group, ns.
    pub predicted_ns: u64,
    pub ready_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub out_bytes: u64,
    /// Inputs not produced yet.
    pending_inputs: u16,
    /// Consumers that have not finished; the output is freed when this reaches 0.
    pending_consumers: u16,
}

/// Bookkeeping of one in-flight iteration.
#[derive(Debug, Clone)]
pub struct IterationInfo {
    pub tenant: TenantId,
    pub ops: Vec<OpId>,
    pub done: u32,
    pub started_ns: u64,
}

/// The Global Mapping Graph of in-flight work.
#[derive(Debug, Default)]
pub struct Gmg {
    graph: StableGraph<OpNode, u64>,
    iters: Vec<Option<IterationInfo>>,
    free_iters: Vec<u32>,
    /// Op vectors of retired iterations, reused so steady state allocates nothing.
    spare: Vec<Vec<OpId>>,
    ops_added: u64,
}

fn ix(op: OpId) -> NodeIndex {
    NodeIndex::new(op.0 as usize)
}

impl Gmg {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ops ever added (a counter for reports).
    pub fn ops_added(&self) -> u64 {
        self.ops_added
    }

    /// Ops currently in the graph.
    pub fn live_ops(&self) -> usize {
        self.graph.node_count()
    }

    /// Adds an iteration's DAG. `predicted(i)` gives op `i`'s predicted latency.
    /// Ops with no inputs become Ready and are pushed to `ready`.
    pub fn add_iteration(
        &mut self,
        tenant: TenantId,
        dag: &IterationDag,
        now: u64,
        mut predicted: impl FnMut(u32) -> u64,
        ready: &mut Vec<OpId>,
    ) -> IterId {
        let slot = self.free_iters.pop().unwrap_or_else(|| {
            self.iters.push(None);
            self.iters.len() as u32 - 1
        });
        let iter = IterId(slot);
        let mut ops = self.spare.pop().unwrap_or_default();
        ops.clear();
        let n = dag.len();
        ops.reserve(n as usize);
        for i in 0..n {
            let op = dag.op(i);
            let preds = dag.preds(i);
            let layer = match op.segment {
                Segment::Layer(l) => Some(l),
                _ => None,
            };
            let node = self.graph.add_node(OpNode {
                tenant,
                iter,
                index: i,
                kind: op.spec.kind,
                layer,
                state: if preds.is_empty() { OpState::Ready } else { OpState::Pending },
                group: None,
                predicted_ns: predicted(i),
                ready_ns: now,
                start_ns: 0,
                end_ns: 0,
                out_bytes: op.spec.out_bytes,
                pending_inputs: preds.len() as u16,
                pending_consumers: 0,
            });
            for &p in &preds {
                let pn = ix(ops[p as usize]);
                let bytes = self.graph[pn].out_bytes;
                self.graph.add_edge(pn, node, bytes);
                self.graph[pn].pending_consumers += 1;
            }
            let id = OpId(node.index() as u32);
            if preds.is_empty() {
                ready.push(id);
            }
            ops.push(id);
        }
        self.ops_added += n as u64;
        self.iters[slot as usize] = Some(IterationInfo { tenant, ops, done: 0, started_ns: now });
        iter
    }

    pub fn op(&self, op: OpId) -> &OpNode {
        &self.graph[ix(op)]
    }

    pub fn iteration(&self, iter: IterId) -> &IterationInfo {
        self.iters[iter.index()].as_ref().expect("retired iteration")
    }

    /// Ready → Placed on `group`.
    pub fn place(&mut self, op: OpId, group: GroupId) {
        let n = &mut self.graph[ix(op)];
        debug_assert_eq!(n.state, OpState::Ready, "placing {op:?} in state {:?}", n.state);
        n.state = OpState::Placed;
        n.group = Some(group);
    }

    /// Placed → Ready: the placement is taken back before the op started (a borrowed op
    /// recalled when its lender's owner needs the GPU), to be placed again.
    pub fn unplace(&mut self, op: OpId) {
        let n = &mut self.graph[ix(op)];
        debug_assert_eq!(n.state, OpState::Placed, "recalling {op:?} in state {:?}", n.state);
        n.state = OpState::Ready;
        n.group = None;
    }

    /// Placed → Running at `now`.
    pub fn start(&mut self, op: OpId, now: u64) {
        let n = &mut self.graph[ix(op)];
        debug_assert_eq!(n.state, OpState::Placed);
        n.state = OpState::Running;
        n.start_ns = now;
    }

    /// Running → Done at `now`. Pushes consumers that became Ready to `ready`, and
    /// producers whose output no consumer needs any more to `freed` (with their bytes).
    /// Returns whether the op's iteration is now complete.
    pub fn finish(&mut self, op: OpId, now: u64, ready: &mut Vec<OpId>, freed: &mut Vec<(OpId, u64)>) -> bool {
        let node = ix(op);
        {
            let n = &mut self.graph[node];
            debug_assert_eq!(n.state, OpState::Running);
            n.state = OpState::Done;
            n.end_ns = now;
        }
        let mut succ = self.graph.neighbors_directed(node, Direction::Outgoing).detach();
        while let Some(s) = succ.next_node(&self.graph) {
            let sn = &mut self.graph[s];
            sn.pending_inputs -= 1;
            if sn.pending_inputs == 0 {
                sn.state = OpState::Ready;
                sn.ready_ns = now;
                ready.push(OpId(s.index() as u32));
            }
        }
        let mut preds = self.graph.neighbors_directed(node, Direction::Incoming).detach();
        while let Some(p) = preds.next_node(&self.graph) {
            let pn = &mut self.graph[p];
            pn.pending_consumers -= 1;
            if pn.pending_consumers == 0 {
                freed.push((OpId(p.index() as u32), pn.out_bytes));
            }
        }
        if self.graph[node].pending_consumers == 0 {
            freed.push((op, self.graph[node].out_bytes));
        }
        let iter = self.graph[node].iter;
        let info = self.iters[iter.index()].as_mut().expect("live iteration");
        info.done += 1;
        info.done as usize == info.ops.len()
    }

    /// Removes a completed iteration's ops from the graph.
    pub fn retire(&mut self, iter: IterId) {
        let info = self.iters[iter.index()].take().expect("live iteration");
        for &op in &info.ops {
            debug_assert_eq!(self.graph[ix(op)].state, OpState::Done);
            self.graph.remove_node(ix(op));
        }
        self.free_iters.push(iter.0);
        self.spare.push(info.ops);
    }

    /// Producers of `op`'s inputs.
    pub fn inputs(&self, op: OpId) -> impl Iterator<Item = OpId> + '_ {
        self.graph.neighbors_directed(ix(op), Direction::Incoming).map(|n| OpId(n.index() as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slicesched_model::{DecodeItem, IterationBatch, ModelConfig};

    #[test]
    fn lifecycle_follows_dependencies() {
        let m = ModelConfig::preset("llama-2-7b").unwrap();
        let dag = m.iteration_dag(&IterationBatch { prefills: vec![], decodes: vec![DecodeItem { kv_len: 5 }] }, 1);
        let mut g = Gmg::new();
        let mut ready = Vec::new();
        let it = g.add_iteration(TenantId(0), &dag, 0, |_| 10, &mut ready);
        assert_eq!(ready.len(), 1);
        let mut freed = Vec::new();
        let mut t = 0;
        let mut finished = false;
        let mut order = Vec::new();
        while let Some(op) = ready.pop() {
            g.place(op, GroupId(0));
            g.start(op, t);
            t += 10;
            order.push(g.op(op).index);
            finished = g.finish(op, t, &mut ready, &mut freed);
        }
        assert!(finished);
        assert_eq!(order.len() as u32, dag.len());
        // Every output is freed exactly once.
        assert_eq!(freed.len() as u32, dag.len());
        g.retire(it);
        assert_eq!(g.live_ops(), 0);
        // Slots are reused.
        let it2 = g.add_iteration(TenantId(1), &dag, t, |_| 1, &mut ready);
        assert_eq!(it2, it);
    }
}
