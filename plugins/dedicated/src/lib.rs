//! `dedicated`: container-level scheduling, today's baseline.

use slicesched_plugin_sdk::{Info, Placement, Policy, ReadyOp, View};

/// Every tenant owns its home GPUs and all its ops run there in FIFO order: what a
/// Kubernetes pod with whole GPUs gives a model server.
#[derive(Debug, Default, Clone, Copy)]
pub struct Dedicated;

impl Policy for Dedicated {
    fn info(&self) -> Info {
        Info { reads_view: false, ..Info::new("dedicated", env!("CARGO_PKG_VERSION")) }
    }

    fn place(&mut self, _view: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
        out.extend(ready.iter().enumerate().map(|(i, r)| Placement { op: i as u32, group: r.home, priority: 0 }));
        Ok(())
    }

    fn home_only(&self) -> bool {
        true
    }
}

slicesched_plugin_sdk::export_policy!(Dedicated);
