//! Background runs: each replay or sweep executes on tokio's blocking pool; a semaphore
//! lets at most `max_concurrent_runs` execute at once while the rest wait queued.
//! Progress reaches the database at most every [`PROGRESS_EVERY`]; cancelling sets the
//! run's flag, which the simulator polls; at start-up, runs a previous process left
//! running are marked `interrupted`, and on shutdown (SIGTERM) the runs this process
//! is executing are cancelled at once and marked `interrupted`. Timeline windows
//! (`window.rs`) are recorded by the same runner, under the same slots. Bookkeeping
//! writes retry with back-off through a database outage (`retry`); a run holds its
//! estimated memory of the service's budget while it executes; a watchdog
//! (`watchdog`) ends runs left without a live job.

mod fault;
pub mod params;
mod replay;
pub mod retry;
mod sweep;
pub mod watchdog;
mod window;

pub use replay::{trace_decisions, DECISION_SPANS};

use crate::config::Config;
use crate::db::{self, runs::RunStatus};
use crate::telemetry::Metrics;
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Semaphore};
use tracing::Instrument;
use uuid::Uuid;

/// The least time between two progress writes of one run.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// Handle to the job runner (cheap to clone).
#[derive(Clone)]
pub struct Jobs {
    inner: Arc<Inner>,
}

struct Inner {
    db: PgPool,
    config: Arc<Config>,
    metrics: Arc<Metrics>,
    /// One permit per run allowed to execute at once.
    slots: Arc<Semaphore>,
    /// The service's memory budget for runs, one permit per MiB.
    memory: Arc<Semaphore>,
    /// Cancel flags of runs (and timeline windows) queued or running in this process.
    flags: Mutex<HashMap<Uuid, Arc<AtomicBool>>>,
    /// Executions holding a slot now.
    running: std::sync::atomic::AtomicUsize,
}

/// What a run's execution reports while it goes.
pub struct Ctx {
    pub cancel: Arc<AtomicBool>,
    pub progress: watch::Sender<f64>,
}

impl Ctx {
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// How an execution ended.
pub enum Outcome {
    /// Results written inside the transaction; the summary to store with the run.
    Done(serde_json::Value),
    Cancelled,
    Failed(String),
}

impl Jobs {
    pub fn new(db: PgPool, config: Arc<Config>, metrics: Arc<Metrics>) -> Jobs {
        let slots = Arc::new(Semaphore::new(config.max_concurrent_runs.max(1)));
        let mib = (config.limits.memory_budget_bytes >> 20).clamp(1, Semaphore::MAX_PERMITS as u64) as usize;
        let memory = Arc::new(Semaphore::new(mib));
        let inner = Inner {
            db,
            config,
            metrics,
            slots,
            memory,
            flags: Mutex::new(HashMap::new()),
            running: Default::default(),
        };
        Jobs { inner: Arc::new(inner) }
    }

    /// Marks runs of a previous process and queues again those that never started.
    pub async fn recover(&self) -> Result<u64, sqlx::Error> {
        let (interrupted, queued) = db::runs::recover(&self.inner.db).await?;
        if interrupted > 0 {
            tracing::warn!(interrupted, "runs left running by a previous process marked interrupted");
        }
        for id in queued {
            self.submit(id);
        }
        for id in db::windows::recover(&self.inner.db).await? {
            spawn_window(&self.inner, id);
        }
        Ok(interrupted)
    }

    /// Queues the recording of a timeline window already inserted as `queued`.
    pub fn submit_window(&self, id: Uuid) {
        spawn_window(&self.inner, id);
    }

    /// Cancels a queued or running window; false when it already ended.
    pub async fn cancel_window(&self, id: Uuid) -> Result<bool, sqlx::Error> {
        let r = sqlx::query(
            "update run_windows set status = 'cancelled', finished_at = now() where id = $1 and status = 'queued'",
        )
        .bind(id)
        .execute(&self.inner.db)
        .await?;
        let flag = self.inner.flags.lock().expect("flags lock").get(&id).cloned();
        if let Some(f) = flag {
            f.store(true, Ordering::Relaxed);
            return Ok(true);
        }
        Ok(r.rows_affected() == 1)
    }

    /// Shutting down: every run and window this process is executing is cancelled and
    /// marked `interrupted` (their results were not stored and never will be); queued
    /// ones stay queued for the next start. Waits at most `grace` for the replays to
    /// notice their flag, so the process can exit promptly.
    pub async fn shutdown(&self, grace: Duration) -> Result<u64, sqlx::Error> {
        let ids: Vec<Uuid> = {
            let flags = self.inner.flags.lock().expect("flags lock");
            for f in flags.values() {
                f.store(true, Ordering::Relaxed);
            }
            flags.keys().copied().collect()
        };
        let msg = "the service was stopped (SIGTERM or SIGINT) while this run was running";
        let n = sqlx::query(
            "update runs set status = 'interrupted', finished_at = now(), error = $2 \
             where id = any($1) and status = 'running'",
        )
        .bind(&ids)
        .bind(msg)
        .execute(&self.inner.db)
        .await?
        .rows_affected();
        sqlx::query(
            "update run_windows set status = 'interrupted', finished_at = now(), error = $2 \
             where id = any($1) and status = 'running'",
        )
        .bind(&ids)
        .bind(msg)
        .execute(&self.inner.db)
        .await?;
        if n > 0 {
            tracing::warn!(interrupted = n, "runs interrupted by shutdown");
        }
        let deadline = tokio::time::Instant::now() + grace;
        while self.inner.running.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(n)
    }

    /// Queues a run already inserted with status `queued`.
    pub fn submit(&self, id: Uuid) {
        let flag = Arc::new(AtomicBool::new(false));
        {
            let mut flags = self.inner.flags.lock().unwrap_or_else(|e| e.into_inner());
            if flags.contains_key(&id) {
                return; // already queued here (the watchdog and a caller may both ask)
            }
            flags.insert(id, flag.clone());
        }
        let inner = self.inner.clone();
        inner.metrics.runs_in_flight.with_label_values(&["queued"]).inc();
        let span = tracing::info_span!("run", run_id = %id);
        tokio::spawn(
            async move {
                let permit = inner.slots.clone().acquire_owned().await.expect("the semaphore is never closed");
                inner.metrics.runs_in_flight.with_label_values(&["queued"]).dec();
                inner.metrics.runs_in_flight.with_label_values(&["running"]).inc();
                inner.running.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = execute(&inner, id, flag).await {
                    tracing::error!(error = %e, "run bookkeeping failed");
                }
                inner.flags.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                inner.running.fetch_sub(1, Ordering::Relaxed);
                inner.metrics.runs_in_flight.with_label_values(&["running"]).dec();
                drop(permit);
            }
            .instrument(span),
        );
    }

    /// Asks a run to stop. A queued run ends at once; a running one at the simulator's
    /// next check; one left `running` without a live job (its job died) at once. False
    /// when the run is not queued or running.
    pub async fn cancel(&self, id: Uuid) -> Result<bool, sqlx::Error> {
        let r =
            sqlx::query("update runs set cancel_requested = true where id = $1 and status in ('queued', 'running')")
                .bind(id)
                .execute(&self.inner.db)
                .await?;
        if r.rows_affected() == 0 {
            return Ok(false);
        }
        let live = self.inner.flags.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned();
        if let Some(f) = &live {
            f.store(true, Ordering::Relaxed);
        }
        // Without a live job nothing would ever act on the request: end the run here.
        let stranded = if live.is_none() { "status in ('queued', 'running')" } else { "status = 'queued'" };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "update runs set status = 'cancelled', finished_at = now() where id = $1 and {stranded}"
        )))
        .bind(id)
        .execute(&self.inner.db)
        .await?;
        Ok(true)
    }

    /// Runs queued or running in this process.
    pub fn in_flight(&self) -> usize {
        self.inner.flags.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Records a timeline window in the background, holding a run slot while it replays.
fn spawn_window(inner: &Arc<Inner>, id: Uuid) {
    let flag = Arc::new(AtomicBool::new(false));
    inner.flags.lock().expect("flags lock").insert(id, flag.clone());
    let inner = inner.clone();
    let span = tracing::info_span!("timeline_window", window_id = %id);
    tokio::spawn(
        async move {
            let permit = inner.slots.clone().acquire_owned().await.expect("the semaphore is never closed");
            inner.running.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = execute_window(&inner, id, flag).await {
                tracing::error!(error = %e, "timeline window bookkeeping failed");
            }
            inner.flags.lock().expect("flags lock").remove(&id);
            inner.running.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        }
        .instrument(span),
    );
}

async fn execute_window(inner: &Arc<Inner>, id: Uuid, cancel: Arc<AtomicBool>) -> Result<(), sqlx::Error> {
    let db = &inner.db;
    if !db::windows::start(db, id).await? {
        return Ok(());
    }
    let Some(w) = db::windows::get(db, id).await? else { return Ok(()) };
    let (tx, mut rx) = watch::channel(0.0);
    let writer = {
        let db = db.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let p = *rx.borrow_and_update();
                let _ = db::windows::set_progress(&db, id, p).await;
                tokio::time::sleep(PROGRESS_EVERY).await;
            }
        })
    };
    let cancelled = cancel.clone();
    let outcome = window::execute(inner, w, Ctx { cancel, progress: tx }).await;
    let _ = writer.await;
    match outcome {
        Ok(()) => tracing::info!("timeline window recorded"),
        Err(_) if cancelled.load(Ordering::Relaxed) => db::windows::finish(db, id, "cancelled", None).await?,
        Err(e) => {
            tracing::warn!(error = %e, "recording a timeline window failed");
            db::windows::finish(db, id, "failed", Some(&e)).await?
        }
    }
    Ok(())
}

async fn execute(inner: &Arc<Inner>, id: Uuid, cancel: Arc<AtomicBool>) -> Result<(), sqlx::Error> {
    let db = &inner.db;
    let Some(spec) = retry::until_back("reading the run", || db::runs::spec(db, id)).await? else { return Ok(()) };
    // Its share of the memory budget, held until it ends (checked at submission; a run
    // over the whole budget could never start, so it fails here rather than wait).
    let searches = (spec.policies.len() * spec.violation_targets.as_ref().map_or(2, Vec::len)) as u64;
    let searches = if spec.kind == "sweep" { searches } else { 0 };
    let draws = spec.params.as_ref().and_then(|p| p.get("seeds")).and_then(serde_json::Value::as_u64).unwrap_or(1);
    let (cfg, text, scale) = (inner.config.clone(), spec.scenario_toml.clone(), spec.rate_scale.unwrap_or(1.0));
    let estimate =
        tokio::task::spawn_blocking(move || crate::scenarios::estimate(&cfg, &text, searches, draws, scale)).await;
    let mib = match estimate {
        Ok(Ok(e)) => (e.memory_bytes >> 20).max(1),
        Ok(Err(e)) => return end(inner, &spec, Outcome::Failed(format!("over budget: {e}"))).await,
        Err(e) => return end(inner, &spec, Outcome::Failed(format!("estimating the run panicked: {e}"))).await,
    };
    let budget = (inner.config.limits.memory_budget_bytes >> 20).max(1);
    let Some(memory) = u32::try_from(mib).ok().filter(|_| mib <= budget) else {
        let why = format!("estimated {mib} MiB, over the service's memory budget of {budget} MiB");
        return end(inner, &spec, Outcome::Failed(why)).await;
    };
    let _memory = inner.memory.clone().acquire_many_owned(memory).await.expect("the semaphore is never closed");
    fault::pause("start").await;
    if !retry::until_back("starting the run", || db::runs::start(db, id)).await? {
        return Ok(()); // cancelled while queued
    }
    tracing::info!(kind = %spec.kind, scenario = %spec.scenario, policies = ?spec.policies, "run started");
    let (tx, mut rx) = watch::channel(0.0);
    let ctx = Ctx { cancel, progress: tx };
    // Throttled progress writer: it ends when the execution drops its sender.
    let writer = {
        let db = db.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let p = *rx.borrow_and_update();
                let _ = db::runs::set_progress(&db, id, p).await;
                tokio::time::sleep(PROGRESS_EVERY).await;
            }
        })
    };
    let outcome = match spec.kind.as_str() {
        "replay" => replay::run(inner, &spec, ctx).await,
        _ => sweep::run(inner, &spec, ctx).await,
    };
    let _ = writer.await;
    end(inner, &spec, outcome).await
}

/// Records how a run ended (retrying through an outage: a run never stays `running`
/// because its last write met a database restart).
async fn end(inner: &Arc<Inner>, spec: &db::runs::RunSpec, outcome: Outcome) -> Result<(), sqlx::Error> {
    let (db, id) = (&inner.db, spec.id);
    let status = match outcome {
        Outcome::Done(_) => RunStatus::Succeeded,
        Outcome::Cancelled => RunStatus::Cancelled,
        Outcome::Failed(_) => RunStatus::Failed,
    };
    match outcome {
        Outcome::Done(_) => {} // stored with its results
        Outcome::Cancelled => {
            retry::until_back("ending the run", || db::runs::finish(db, id, RunStatus::Cancelled, None)).await?
        }
        Outcome::Failed(e) => {
            tracing::warn!(error = %crate::text::one_line(&e, 512), "run failed");
            retry::until_back("ending the run", || db::runs::finish(db, id, RunStatus::Failed, Some(&e))).await?
        }
    }
    inner.metrics.runs.with_label_values(&[spec.kind.as_str(), status.as_str()]).inc();
    tracing::info!(status = status.as_str(), "run finished");
    Ok(())
}

/// Stores the summary and marks the run succeeded, inside the results' transaction.
async fn succeed(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    id: Uuid,
    summary: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    let r = sqlx::query(
        "update runs set status = 'succeeded', progress = 1, summary = $2, finished_at = now() \
         where id = $1 and status = 'running'",
    )
    .bind(id)
    .bind(summary)
    .execute(&mut **tx)
    .await?;
    // A run marked interrupted meanwhile (a restart raced this process) keeps that
    // status: failing here rolls its results back.
    if r.rows_affected() == 0 {
        return Err(sqlx::Error::RowNotFound);
    }
    Ok(())
}
