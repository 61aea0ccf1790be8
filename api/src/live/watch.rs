//! A plugin policy serving live, watched: the host quarantines a misbehaving plugin and
//! decides every later call like `dedicated` itself, so traffic goes on; the watch only
//! notices the quarantine on the serving thread and hands it to a task that writes it
//! back (the plugin row `quarantined`, a `plugin.quarantine` audit entry naming the live
//! run, and the live run's `fallback`: who decided instead, how often), as a replay's
//! job does when its run ends.

use super::Cluster;
use crate::jobs::params::Fallback;
use crate::plugin_host::Quarantined;
use crate::state::AppState;
use slicesched_plugin_host::WasmPolicy;
use slicesched_policy::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::oneshot;
use uuid::Uuid;

/// The policy the loop runs, with where a quarantine is told.
pub struct Watched {
    inner: Box<WasmPolicy>,
    told: Option<oneshot::Sender<Quarantined>>,
    tally: Arc<Tally>,
}

/// The plugin's counts as the serving thread last saw them, for the run's `fallback`
/// (the fallback keeps deciding after the quarantine is written back).
#[derive(Debug, Default)]
pub struct Tally {
    pub calls: AtomicU64,
    pub fallback_decisions: AtomicU64,
}

/// A plugin policy's watch: its row, the quarantine notice, its counts.
pub struct Watch {
    plugin: Uuid,
    rx: oneshot::Receiver<Quarantined>,
    tally: Arc<Tally>,
}

/// What the loop gets for a policy instance, and the watch of a plugin's.
pub fn watch(instance: crate::policies::Instance) -> (Box<dyn Policy>, Option<Watch>) {
    match instance {
        crate::policies::Instance::Native(p) => (p, None),
        crate::policies::Instance::Plugin { id, policy } => {
            let (tx, rx) = oneshot::channel();
            let tally = Arc::new(Tally::default());
            (
                Box::new(Watched { inner: policy, told: Some(tx), tally: tally.clone() }),
                Some(Watch { plugin: id, rx, tally }),
            )
        }
    }
}

/// A live run's fallback: what the quarantine said, and the counts that keep growing
/// while the fallback decides.
pub struct LiveFallback {
    at_quarantine: Fallback,
    tally: Arc<Tally>,
}

impl LiveFallback {
    /// The fallback as it stands now.
    pub fn now(&self) -> Fallback {
        let mut out = self.at_quarantine.clone();
        out.decisions = self.tally.fallback_decisions.load(Ordering::Relaxed).max(out.decisions);
        out.calls = self.tally.calls.load(Ordering::Relaxed).max(out.calls);
        out
    }
}

/// Sets the run's `fallback` and audits it, as a replay's end does.
async fn write_fallback(db: &sqlx::PgPool, run: Uuid, f: &Fallback) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    f.store(&mut tx, run, true).await?;
    tx.commit().await
}

/// Writes the quarantine back when it comes (nothing when the cluster stops first or the
/// policy is switched away: the sender is dropped with it). The cluster's policy then
/// is the fallback's, `dedicated`.
pub fn write_back_when_told(st: &AppState, c: &Arc<Cluster>, w: Watch) {
    let (db, c) = (st.db.clone(), c.clone());
    let Watch { plugin, rx, tally } = w;
    tokio::spawn(async move {
        let Ok(q) = rx.await else { return };
        {
            let mut p = c.policy.lock().unwrap_or_else(|e| e.into_inner());
            *p = "dedicated".into();
        }
        let fallback = Fallback::of(q.clone(), true);
        *c.fallback.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(LiveFallback { at_quarantine: fallback.clone(), tally });
        // The host already decides like `dedicated`: a lost write leaves serving as it is
        // (and the stop's final store writes the fallback again).
        let (mut quarantine, mut run) = (false, false);
        for pause in [0u64, 1, 5] {
            tokio::time::sleep(std::time::Duration::from_secs(pause)).await;
            if !quarantine {
                match crate::plugin_host::write_back_quarantine(&db, plugin, c.id, &q).await {
                    Ok(_) => quarantine = true,
                    Err(e) => tracing::warn!(error = %e, %plugin, "writing back a live quarantine failed"),
                }
            }
            if !run {
                match write_fallback(&db, c.id, &fallback).await {
                    Ok(()) => run = true,
                    Err(e) => tracing::warn!(error = %e, run = %c.id, "writing a live run's fallback failed"),
                }
            }
            if quarantine && run {
                return;
            }
        }
    });
}

impl Watched {
    fn check(&mut self) {
        let s = self.inner.stats();
        self.tally.calls.store(s.calls, Ordering::Relaxed);
        self.tally.fallback_decisions.store(s.fallback_decisions, Ordering::Relaxed);
        if s.quarantined {
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
    fn home_when_free(&self) -> bool {
        self.inner.home_when_free()
    }
}
