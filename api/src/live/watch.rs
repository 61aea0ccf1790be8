//! A plugin policy serving live, watched: the host quarantines a misbehaving plugin and
//! decides every later call like `dedicated` itself, so traffic goes on; the watch only
//! notices the quarantine on the serving thread and hands it to a task that writes it
//! back (the plugin row `quarantined`, a `plugin.quarantine` audit entry naming the live
//! run), as a replay's job does when its run ends.

use super::Cluster;
use crate::plugin_host::Quarantined;
use crate::state::AppState;
use slicesched_plugin_host::WasmPolicy;
use slicesched_policy::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};
use std::sync::Arc;
use tokio::sync::oneshot;
use uuid::Uuid;

/// The policy the loop runs, with where a quarantine is told.
pub struct Watched {
    inner: Box<WasmPolicy>,
    told: Option<oneshot::Sender<Quarantined>>,
}

/// What the loop gets for a policy instance, and the quarantine notice of a plugin's.
pub fn watch(instance: crate::policies::Instance) -> (Box<dyn Policy>, Option<(Uuid, oneshot::Receiver<Quarantined>)>) {
    match instance {
        crate::policies::Instance::Native(p) => (p, None),
        crate::policies::Instance::Plugin { id, policy } => {
            let (tx, rx) = oneshot::channel();
            (Box::new(Watched { inner: policy, told: Some(tx) }), Some((id, rx)))
        }
    }
}

/// Writes the quarantine back when it comes (nothing when the cluster stops first or the
/// policy is switched away: the sender is dropped with it). The cluster's policy then
/// is the fallback's, `dedicated`.
pub fn write_back_when_told(st: &AppState, c: &Arc<Cluster>, plugin: Uuid, rx: oneshot::Receiver<Quarantined>) {
    let (db, c) = (st.db.clone(), c.clone());
    tokio::spawn(async move {
        let Ok(q) = rx.await else { return };
        {
            let mut p = c.policy.lock().unwrap_or_else(|e| e.into_inner());
            *p = "dedicated".into();
        }
        // The host already decides like `dedicated`: a lost write leaves serving as it is.
        for pause in [0u64, 1, 5] {
            tokio::time::sleep(std::time::Duration::from_secs(pause)).await;
            match crate::plugin_host::write_back_quarantine(&db, plugin, c.id, &q).await {
                Ok(_) => return,
                Err(e) => tracing::warn!(error = %e, %plugin, "writing back a live quarantine failed"),
            }
        }
    });
}

impl Watched {
    fn check(&mut self) {
        if self.inner.stats().quarantined {
            if let Some(tx) = self.told.take() {
                let info = self.inner.info();
                let _ = tx.send(Quarantined::from_stats(&info.name, &info.version, self.inner.stats()));
            }
        }
    }
}

impl Policy for Watched {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        self.inner.place(view, ready, out);
        self.check();
    }
    fn reads_view(&self) -> bool {
        self.inner.reads_view()
    }
    fn context_switch_ns(&self) -> u64 {
        self.inner.context_switch_ns()
    }
    fn spatial_sharing(&self) -> bool {
        self.inner.spatial_sharing()
    }
    fn replicas(&self) -> ReplicaMode {
        self.inner.replicas()
    }
    fn admit(&mut self, view: &View<'_>, instance: &InstanceView) -> bool {
        let r = self.inner.admit(view, instance);
        self.check();
        r
    }
    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        let r = self.inner.route(view, instances);
        self.check();
        r
    }
    fn home_only(&self) -> bool {
        self.inner.home_only()
    }
}
