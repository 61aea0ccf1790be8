//! The operator graph: in-flight iterations, their ops, states and tensor edges.

use crate::{GroupId, IterId, OpId, TenantId};
use petgraph::graph::{Graph, NodeIndex};
use petgraph::{Directed, Incoming, Outgoing};
use serde::Serialize;
use slicesched_model::{IterationDag, OpKind};

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
    /// Its DAG's shape in [`Gmg`]'s table.
    shape: u32,
}

/// The tensor edges of one DAG shape, by position in the DAG: a petgraph graph built
/// once per shape, edges added in the DAG's order, so a producer's consumers are walked
/// newest first and a consumer's producers last first (petgraph's adjacency lists), the
/// order that decides which ops become ready and which outputs are freed first.
/// Iterations share it: adding one writes its ops and no edge.
#[derive(Debug)]
struct Shape {
    /// A DAG of this shape, to recognise the next ones ([`IterationDag::same_shape`]).
    dag: IterationDag,
    edges: Graph<(), (), Directed, u32>,
    /// Per op, its producers and its consumers: counted once, read per iteration.
    inputs: Vec<u16>,
    consumers: Vec<u16>,
}

impl Shape {
    fn of(dag: &IterationDag) -> Shape {
        let n = dag.len() as usize;
        let mut edges = Graph::with_capacity(n, n * 2);
        for _ in 0..n {
            edges.add_node(());
        }
        let (mut inputs, mut consumers) = (vec![0u16; n], vec![0u16; n]);
        for (i, count) in inputs.iter_mut().enumerate() {
            for &p in &dag.preds(i as u32) {
                edges.add_edge(NodeIndex::new(p as usize), NodeIndex::new(i), ());
                *count += 1;
                consumers[p as usize] += 1;
            }
        }
        Shape { dag: dag.clone(), edges, inputs, consumers }
    }

    #[inline]
    fn preds(&self, i: u32) -> impl Iterator<Item = u32> + '_ {
        self.edges.neighbors_directed(NodeIndex::new(i as usize), Incoming).map(|x| x.index() as u32)
    }

    #[inline]
    fn succs(&self, i: u32) -> impl Iterator<Item = u32> + '_ {
        self.edges.neighbors_directed(NodeIndex::new(i as usize), Outgoing).map(|x| x.index() as u32)
    }
}

/// The Global Mapping Graph of in-flight work.
///
/// Ops live in a table of slots; a retired iteration's slots are taken again last
/// freed first (as petgraph's `StableGraph` did when it held every op, so `OpId`s are what
/// they were). The edges are not stored per op: every iteration of a model has the same DAG
/// shape, whose edges are kept once, in a petgraph graph ([`Shape`]), so adding an iteration writes its ops and nothing
/// else, and retiring it frees their slots.
#[derive(Debug, Default)]
pub struct Gmg {
    nodes: Vec<Option<OpNode>>,
    /// Free slots of `nodes`, the last freed on top.
    free: Vec<u32>,
    live: usize,
    shapes: Vec<Shape>,
    iters: Vec<Option<IterationInfo>>,
    free_iters: Vec<u32>,
    /// Op vectors of retired iterations, reused so steady state allocates nothing.
    spare: Vec<Vec<OpId>>,
    ops_added: u64,
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
        self.live
    }

    fn shape_of(&mut self, dag: &IterationDag) -> u32 {
        match self.shapes.iter().position(|s| s.dag.same_shape(dag)) {
            Some(k) => k as u32,
            None => {
                self.shapes.push(Shape::of(dag));
                self.shapes.len() as u32 - 1
            }
        }
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
        let shape = self.shape_of(dag);
        let sh = &self.shapes[shape as usize];
        let mut ops = self.spare.pop().unwrap_or_default();
        ops.clear();
        let n = dag.len();
        ops.reserve(n as usize);
        // Segment by segment: `dag.op(i)` finds an op's layer by a division.
        let segments = std::iter::once((&dag.head, None))
            .chain((0..dag.layers).map(|l| (&dag.layer, Some(l))))
            .chain(std::iter::once((&dag.tail, None)));
        let specs = segments.flat_map(|(specs, layer)| specs.iter().map(move |s| (s, layer)));
        for (i, (spec, layer)) in (0..n).zip(specs) {
            let inputs = sh.inputs[i as usize];
            let node = OpNode {
                tenant,
                iter,
                index: i,
                kind: spec.kind,
                layer,
                state: if inputs == 0 { OpState::Ready } else { OpState::Pending },
                group: None,
                predicted_ns: predicted(i),
                ready_ns: now,
                start_ns: 0,
                end_ns: 0,
                out_bytes: spec.out_bytes,
                pending_inputs: inputs,
                pending_consumers: sh.consumers[i as usize],
            };
            let id = match self.free.pop() {
                Some(k) => {
                    self.nodes[k as usize] = Some(node);
                    OpId(k)
                }
                None => {
                    self.nodes.push(Some(node));
                    OpId(self.nodes.len() as u32 - 1)
                }
            };
            if inputs == 0 {
                ready.push(id);
            }
            ops.push(id);
        }
        self.live += n as usize;
        self.ops_added += n as u64;
        self.iters[slot as usize] = Some(IterationInfo { tenant, ops, done: 0, started_ns: now, shape });
        iter
    }

    #[inline]
    pub fn op(&self, op: OpId) -> &OpNode {
        self.nodes[op.0 as usize].as_ref().expect("live op")
    }

    #[inline]
    fn op_mut(&mut self, op: OpId) -> &mut OpNode {
        self.nodes[op.0 as usize].as_mut().expect("live op")
    }

    #[inline]
    pub fn iteration(&self, iter: IterId) -> &IterationInfo {
        self.iters[iter.index()].as_ref().expect("retired iteration")
    }

    /// Ready → Placed on `group`.
    #[inline]
    pub fn place(&mut self, op: OpId, group: GroupId) {
        let n = self.op_mut(op);
        debug_assert_eq!(n.state, OpState::Ready, "placing {op:?} in state {:?}", n.state);
        n.state = OpState::Placed;
        n.group = Some(group);
    }

    /// Placed → Ready: the placement is taken back before the op started (a borrowed op
    /// recalled when its lender's owner needs the GPU), to be placed again.
    #[inline]
    pub fn unplace(&mut self, op: OpId) {
        let n = self.op_mut(op);
        debug_assert_eq!(n.state, OpState::Placed, "recalling {op:?} in state {:?}", n.state);
        n.state = OpState::Ready;
        n.group = None;
    }

    /// Placed → Running at `now`.
    #[inline]
    pub fn start(&mut self, op: OpId, now: u64) {
        let n = self.op_mut(op);
        debug_assert_eq!(n.state, OpState::Placed);
        n.state = OpState::Running;
        n.start_ns = now;
    }

    /// Running → Done at `now`. Pushes consumers that became Ready to `ready`, and
    /// producers whose output no consumer needs any more to `freed` (with their bytes).
    /// Returns whether the op's iteration is now complete.
    pub fn finish(&mut self, op: OpId, now: u64, ready: &mut Vec<OpId>, freed: &mut Vec<(OpId, u64)>) -> bool {
        let (iter, index, own) = {
            let n = self.op_mut(op);
            debug_assert_eq!(n.state, OpState::Running);
            n.state = OpState::Done;
            n.end_ns = now;
            (n.iter, n.index, (n.pending_consumers == 0).then_some(n.out_bytes))
        };
        let info = self.iters[iter.index()].as_mut().expect("live iteration");
        let sh = &self.shapes[info.shape as usize];
        for s in sh.succs(index) {
            let id = info.ops[s as usize];
            let sn = self.nodes[id.0 as usize].as_mut().expect("live op");
            sn.pending_inputs -= 1;
            if sn.pending_inputs == 0 {
                sn.state = OpState::Ready;
                sn.ready_ns = now;
                ready.push(id);
            }
        }
        for p in sh.preds(index) {
            let id = info.ops[p as usize];
            let pn = self.nodes[id.0 as usize].as_mut().expect("live op");
            pn.pending_consumers -= 1;
            if pn.pending_consumers == 0 {
                freed.push((id, pn.out_bytes));
            }
        }
        if let Some(bytes) = own {
            freed.push((op, bytes));
        }
        info.done += 1;
        info.done as usize == info.ops.len()
    }

    /// Removes a completed iteration's ops from the graph.
    pub fn retire(&mut self, iter: IterId) {
        let info = self.iters[iter.index()].take().expect("live iteration");
        for &op in &info.ops {
            let n = self.nodes[op.0 as usize].take();
            debug_assert_eq!(n.map(|n| n.state), Some(OpState::Done));
            self.free.push(op.0);
        }
        self.live -= info.ops.len();
        self.free_iters.push(iter.0);
        self.spare.push(info.ops);
    }

    /// Producers of `op`'s inputs.
    #[inline]
    pub fn inputs(&self, op: OpId) -> impl Iterator<Item = OpId> + '_ {
        let n = self.op(op);
        let info = self.iteration(n.iter);
        self.shapes[info.shape as usize].preds(n.index).map(move |p| info.ops[p as usize])
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
