//! Live serving: a cluster inside the service that runs registered tenants' models on the
//! executor as their requests arrive over HTTP (`/v1`, OpenAI-compatible), through the
//! same engines, GMG, policy seam, core checks and memory ledger as `slicesched run`
//! (`slicesched_sim::LiveSim`, advanced to the wall clock).
//!
//! - [`config`]: what a cluster serves (`[live]` in the configuration, `POST /api/v1/live`).
//! - [`cluster`]: building it and the serving loop (one thread owns backend, executor and
//!   loop; commands arrive through a channel the handle bounds).
//! - [`exec`]: the executor with real tokens (KV kept per sequence, tokens streamed).
//! - [`sample`]: temperature / top-p sampling and stop sequences.
//! - [`history`]: the traffic stored as a run of kind `live` while it is served.
//! - [`watch`]: a plugin policy's quarantine while serving, written back.
//!
//! The handle ([`Live`]) lives in the app state; a request holds a [`Ticket`], whose drop
//! (the client went away) cancels the request and frees its KV blocks.

pub mod cluster;
pub mod config;
pub mod demo;
pub mod exec;
pub mod history;
pub mod metrics;
pub mod sample;
mod start;
pub mod watch;

pub use config::{LiveConfig, LiveEngine, LiveTenant};
pub use exec::{Event, Finished};
pub use start::start;

use cluster::{Cmd, Shared, Submit};
use sample::SamplingParams;
use serde::Serialize;
use slicesched_policy::SwitchHandle;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::mpsc::UnboundedReceiver;
use utoipa::ToSchema;
use uuid::Uuid;

/// One tenant's engines and requests now.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct TenantSnapshot {
    pub name: String,
    /// Requests waiting for their first batch, and running (admitted).
    pub waiting: u32,
    pub running: u32,
    /// Requests the executor serves now (accepted and not ended).
    pub in_service: u32,
    pub kv_blocks_total: u32,
    pub kv_blocks_free: u32,
    pub preemptions: u64,
    /// Requests since the start: all, finished, dropped (cancelled, failed, refused).
    pub requests: u64,
    pub completed: u64,
    pub dropped: u64,
    /// Finished requests whose TTFT or mean TPOT missed the tenant's SLA.
    pub sla_violations: u64,
    /// Offered load per second, as the meter a replay's `--replan online` reads: its
    /// moving average (~50 s) over closed 10-s windows (0 in a service's first 10 s).
    pub offered_requests_per_s: f64,
    pub offered_prompt_tokens_per_s: f64,
    pub offered_output_tokens_per_s: f64,
    /// The same meter's forecast: the average, or the busiest 10-s window of the last
    /// minute where that is higher (what the planner sizes a tenant's capacity for).
    pub forecast_requests_per_s: f64,
    pub forecast_prompt_tokens_per_s: f64,
    pub forecast_output_tokens_per_s: f64,
}

/// What the loop last published.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Snapshot {
    pub uptime_s: f64,
    /// The loop's clock (it follows the wall clock; behind it when the loop is busy).
    pub clock_s: f64,
    pub tenants: Vec<TenantSnapshot>,
    /// Requests whose state the loop holds: in service, or ended and not yet handed to
    /// history (within a second). Bounded however long the cluster serves.
    pub held_records: u64,
    /// Engine sequences held over every instance (the same bound).
    pub held_sequences: u64,
}

/// A served tenant as the HTTP side sees it.
pub struct ServedTenant {
    pub name: String,
    pub tenant_id: Uuid,
    /// The model id clients name.
    pub model_id: String,
    pub max_model_len: u32,
    pub max_pending: u32,
    pending: AtomicU32,
    /// KV blocks of its home and their size, for refusing what could never fit.
    pub kv_blocks: u32,
    pub block_size: u32,
    pub vocab: usize,
    /// Its SLA in force (the registered tenant's newest version).
    pub sla: Mutex<slicesched_engine::Sla>,
}

impl ServedTenant {
    pub fn sla(&self) -> slicesched_engine::Sla {
        *self.sla.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running live cluster.
pub struct Cluster {
    pub id: Uuid,
    pub config: LiveConfig,
    pub tenants: Vec<ServedTenant>,
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub created: i64,
    tx: std::sync::mpsc::Sender<Cmd>,
    shared: Arc<Shared>,
    next_client: AtomicU64,
    thread: Mutex<Option<std::thread::JoinHandle<Option<Stopped>>>>,
    pub switch: SwitchHandle,
    pub policy: Mutex<String>,
    /// The running policy's replicas and device sharing: a replacement must match.
    pub policy_shape: (slicesched_policy::ReplicaMode, bool),
    pub metrics: Arc<crate::telemetry::Metrics>,
    stopping: AtomicBool,
    /// What the history writer stored or let go while serving.
    pub history: Arc<history::HistoryStats>,
    writer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Set once a plugin serving here was quarantined: who decided instead, and the
    /// counts that keep growing while the fallback decides.
    pub fallback: Mutex<Option<watch::LiveFallback>>,
}

/// What a stopped cluster served: the loop's result (its `ops`: the sampled operators
/// not yet handed to the writer) and the sample windows still to store.
pub struct Stopped {
    pub result: slicesched_sim::ReplayResult,
    pub windows: Vec<history::SampleWindow>,
}

/// Why a request was not taken.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// The tenant's queue or the loop's channel is full: retry after this many seconds.
    Busy {
        retry_after_s: u32,
        why: String,
    },
    ShuttingDown,
}

/// A request in service; dropping it before it ended cancels it.
pub struct Ticket {
    cluster: Arc<Cluster>,
    tenant: usize,
    client: u64,
    ended: bool,
}

impl Ticket {
    /// The request ended (done, failed or refused): nothing to cancel.
    pub fn ended(&mut self) {
        self.ended = true;
    }

    /// The request finished: recorded in the tenant's metrics.
    pub fn finish(&mut self, f: &Finished) {
        self.ended = true;
        let t = &self.cluster.tenants[self.tenant];
        self.cluster.metrics.live.ended(&t.model_id, &t.name, f, &t.sla());
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.cluster.tenants[self.tenant].pending.fetch_sub(1, Ordering::Relaxed);
        if !self.ended {
            let _ = self.cluster.tx.send(Cmd::Cancel(self.client));
        }
    }
}

impl Cluster {
    /// Hands a request to the loop; its events come on the receiver.
    pub fn submit(
        self: &Arc<Self>,
        tenant: usize,
        prompt: Vec<i32>,
        params: SamplingParams,
    ) -> Result<(Ticket, UnboundedReceiver<Event>), Refused> {
        if self.stopping.load(Ordering::Relaxed) {
            return Err(Refused::ShuttingDown);
        }
        let t = &self.tenants[tenant];
        if t.pending.fetch_add(1, Ordering::Relaxed) >= t.max_pending {
            t.pending.fetch_sub(1, Ordering::Relaxed);
            let why = format!("tenant `{}` has {} requests in service, its limit", t.name, t.max_pending);
            return Err(Refused::Busy { retry_after_s: 1, why });
        }
        let client = self.next_client.fetch_add(1, Ordering::Relaxed);
        let ticket = Ticket { cluster: self.clone(), tenant, client, ended: false };
        if self.shared.queued.fetch_add(1, Ordering::Relaxed) >= self.config.queue_capacity {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            let mut ticket = ticket;
            ticket.ended();
            let why = format!("the serving queue is full ({} requests)", self.config.queue_capacity);
            return Err(Refused::Busy { retry_after_s: 1, why });
        }
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        let sub = Submit { tenant: tenant as u32, prompt, params, events, client };
        if self.tx.send(Cmd::Submit(Box::new(sub))).is_err() {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            let mut ticket = ticket;
            ticket.ended();
            return Err(Refused::ShuttingDown);
        }
        Ok((ticket, rx))
    }

    pub fn snapshot(&self) -> Snapshot {
        self.shared.snapshot.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The served tenant a tenant id maps to.
    pub fn tenant_of(&self, id: Uuid) -> Option<usize> {
        self.tenants.iter().position(|t| t.tenant_id == id)
    }

    pub fn vocab(&self, tenant: usize) -> usize {
        self.tenants[tenant].vocab
    }

    pub fn model(&self, model_id: &str) -> Option<usize> {
        self.tenants.iter().position(|t| t.model_id == model_id)
    }

    /// A registered tenant's SLA changed: the tenant's requests from now on are judged
    /// against it (the loop's targets and the metrics' verdicts alike). False when the
    /// tenant is not served here.
    pub fn set_sla(&self, tenant_id: Uuid, sla: slicesched_engine::Sla) -> bool {
        let Some(i) = self.tenant_of(tenant_id) else { return false };
        *self.tenants[i].sla.lock().unwrap_or_else(|e| e.into_inner()) = sla;
        let _ = self.tx.send(Cmd::Sla(i as u32, sla));
        true
    }

    /// Stops taking requests, lets in-flight ones finish (for the drain time), fails the
    /// rest and waits for the loop to end and the history writer to finish what it holds.
    async fn stop(self: Arc<Self>) -> Option<Stopped> {
        self.stopping.store(true, Ordering::Relaxed);
        let _ = self.tx.send(Cmd::Stop);
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        let served = tokio::task::spawn_blocking(move || handle.join().ok().flatten()).await.ok().flatten();
        // The final store writes everything again: the writer tries what it holds once.
        self.history.closing();
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = writer {
            let _ = w.await;
        }
        // What the database refused while stopping waits for the final store too.
        served.map(|mut s| {
            s.result.records.extend(self.history.take_returned());
            s
        })
    }
}

/// The service's live cluster slot.
#[derive(Clone, Default)]
pub struct Live {
    slot: Arc<RwLock<Option<Arc<Cluster>>>>,
    /// Held while a cluster starts or stops, so two never race.
    busy: Arc<tokio::sync::Mutex<()>>,
}

impl Live {
    pub fn current(&self) -> Option<Arc<Cluster>> {
        self.slot.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn install(&self, c: Arc<Cluster>) {
        *self.slot.write().unwrap_or_else(|e| e.into_inner()) = Some(c);
    }

    /// Stops the running cluster (new requests at once find none); its in-flight
    /// requests finish or fail. Returns what it served, if one ran.
    pub async fn stop(&self) -> Option<(Arc<Cluster>, Option<Stopped>)> {
        let _g = self.busy.lock().await;
        let c = self.slot.write().unwrap_or_else(|e| e.into_inner()).take()?;
        let r = c.clone().stop().await;
        Some((c, r))
    }
}
