//! `dedicated`: container-level scheduling, today's baseline.

use crate::{Placement, Policy, ReadyOp, View};

/// Every tenant owns its home GPUs and all its ops run there in FIFO order: what a
/// Kubernetes pod with whole GPUs gives a model server.
#[derive(Debug, Default, Clone, Copy)]
pub struct Dedicated;

impl Policy for Dedicated {
    fn name(&self) -> &str {
        "dedicated"
    }

    fn reads_view(&self) -> bool {
        false
    }

    fn place(&mut self, _view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        out.extend(ready.iter().map(|r| Placement { op: r.op, group: r.home, priority: 0 }));
    }
}
