//! Live traffic in the history tables, while it is served: a cluster is a run of kind
//! `live` from its start (status `running`), its per-request records and per-second
//! series written in batches as requests end, its summary refreshed with each batch, and
//! the whole of it stored again, complete, when it stops (`succeeded`).
//!
//! The serving loop never waits for the database: every [`FLUSH_EVERY`] it hands a batch
//! to a bounded channel without blocking ([`Sink::flush`]); a tokio task ([`spawn_writer`])
//! writes each batch in one transaction with the bulk-insert helpers of `db::results`. When
//! the database is slow or down the channel fills, and a batch the database refused every
//! try comes back to the loop ([`HistoryStats::give_back`]); the loop keeps at most
//! [`MAX_BUFFERED`] records waiting, and what it had to let go past that is counted
//! ([`HistoryStats`]). The stop's final store writes what is still waiting and every
//! record the loop still holds (skipping those already stored).
//!
//! Once a record is in the sink, the loop forgets it ([`LiveSim::retire`]): what a
//! cluster holds per request is bounded by what is in service and what waits for the
//! database, not by how long it has served. A record let go past [`MAX_BUFFERED`] is
//! missing from the per-request history; the summary still counts it.

use super::Cluster;
use crate::state::AppState;
use serde::Serialize;
use slicesched_sim::{LiveSim, OpRecord, OpWindow, RequestRecord, Summary, TimeSeries};
use sqlx::PgPool;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use utoipa::ToSchema;
use uuid::Uuid;

/// How often the loop hands what ended to the writer.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Batches waiting for the writer, at most.
pub const CHANNEL_BATCHES: usize = 8;
/// Ended records the loop keeps while the channel is full, at most; past it the oldest
/// are let go (and counted).
pub const MAX_BUFFERED: usize = 100_000;
/// Seconds of the series the loop keeps behind what it handed over: a busy span that
/// closes late still lands in its bucket (ops last ms; the final store rewrites these).
const SERIES_KEPT: usize = 60;
/// Tries of one batch before the writer gives it back (none but the first while stopping).
const ATTEMPTS: u32 = 3;

/// What went to the history tables while serving.
#[derive(Debug, Default)]
pub struct HistoryStats {
    /// Records written by the writer.
    pub written: AtomicU64,
    /// Records let go while serving, past [`MAX_BUFFERED`] waiting for the database:
    /// missing from the per-request history (the summary counts them).
    pub dropped: AtomicU64,
    /// Batches whose write failed (each try).
    pub failed_writes: AtomicU64,
    /// The cluster is stopping: the writer tries each batch once.
    closing: AtomicBool,
    /// Records of batches the database refused every try, for the loop (or the stop's
    /// final store) to hand over again.
    returned: Mutex<Vec<RequestRecord>>,
}

/// [`HistoryStats`] as the live status shows it.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct HistorySnapshot {
    pub records_written: u64,
    pub records_dropped: u64,
    pub failed_writes: u64,
}

impl HistoryStats {
    pub fn snapshot(&self) -> HistorySnapshot {
        HistorySnapshot {
            records_written: self.written.load(Ordering::Relaxed),
            records_dropped: self.dropped.load(Ordering::Relaxed),
            failed_writes: self.failed_writes.load(Ordering::Relaxed),
        }
    }

    pub fn closing(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }

    /// A refused batch's records come back, up to [`MAX_BUFFERED`] waiting (the rest
    /// are let go and counted).
    fn give_back(&self, records: Vec<RequestRecord>) {
        let mut r = self.returned.lock().unwrap_or_else(|e| e.into_inner());
        let room = MAX_BUFFERED.saturating_sub(r.len());
        let over = records.len().saturating_sub(room);
        r.extend(records.into_iter().take(room));
        self.dropped.fetch_add(over as u64, Ordering::Relaxed);
    }

    /// The records that came back and are not handed over again yet.
    pub fn take_returned(&self) -> Vec<RequestRecord> {
        std::mem::take(&mut *self.returned.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Operator records one flush takes from the loop, at most: past it the rest of the
/// flush's sample is cut (its window says where its record ends).
pub const MAX_OPS_PER_FLUSH: usize = 200_000;

/// One write: records that ended, the series' buckets from `series_from`, the summary,
/// the sampled operators and the sample windows that closed.
pub struct Batch {
    pub records: Vec<RequestRecord>,
    pub series_from: usize,
    pub series: TimeSeries,
    pub summary: Summary,
    pub ops: Vec<OpRecord>,
    pub windows: Vec<SampleWindow>,
}

/// A sample of the op timeline that closed: `[from_ns, recorded_to_ns)` holds every
/// operator that started there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleWindow {
    pub from_ns: u64,
    pub to_ns: u64,
    pub recorded_to_ns: u64,
}

/// The loop's side: which requests are open, what ended and is not handed over yet.
pub struct Sink {
    tx: mpsc::Sender<Batch>,
    open: BTreeSet<u32>,
    buffered: Vec<RequestRecord>,
    /// The first bucket not handed over for good (the last one handed was still filling).
    series_from: usize,
    last: Instant,
    stats: Arc<HistoryStats>,
    /// The sample the loop records, its next repeat to close, and what a full channel
    /// left to hand over.
    sample: OpWindow,
    next_window: u64,
    ops: Vec<OpRecord>,
    windows: Vec<SampleWindow>,
    /// The sample was cut at this start (a flush took [`MAX_OPS_PER_FLUSH`]).
    cut_at: Option<u64>,
}

impl Sink {
    pub fn new(tx: mpsc::Sender<Batch>, stats: Arc<HistoryStats>, sample: OpWindow) -> Self {
        Self {
            tx,
            open: BTreeSet::new(),
            buffered: Vec::new(),
            series_from: 0,
            last: Instant::now(),
            stats,
            sample,
            next_window: 0,
            ops: Vec::new(),
            windows: Vec::new(),
            cut_at: None,
        }
    }

    /// The ops recorded since the last flush, and the sample windows that closed by now.
    fn take_sample(&mut self, sim: &mut LiveSim, now: u64) {
        let ops = sim.take_ops();
        if ops.len() >= self.sample.max_ops {
            let last = ops.iter().map(|o| o.start_ns).max().unwrap_or(0);
            self.cut_at = Some(self.cut_at.map_or(last, |c| c.min(last)));
        }
        self.ops.extend(ops);
        let closed: Vec<_> = self.sample.closed_since(self.next_window, now).collect();
        for (k, from_ns, to_ns) in closed {
            self.next_window = k + 1;
            self.close(from_ns, to_ns);
        }
        if self.ops.len() > MAX_BUFFERED {
            // The writer is far behind: these samples go unrecorded (never claimed whole),
            // the one being recorded included.
            self.ops.clear();
            self.windows.clear();
            self.cut_at = Some(0);
        }
    }

    /// A sample window closed at `to_ns`: recorded up to where a cut stopped it, if one did.
    fn close(&mut self, from_ns: u64, to_ns: u64) {
        let cut = self.cut_at.filter(|&c| c < to_ns);
        let recorded_to_ns = cut.map_or(to_ns, |c| c.max(from_ns + 1));
        self.windows.push(SampleWindow { from_ns, to_ns, recorded_to_ns });
        if cut.is_some() {
            self.cut_at = None;
        }
    }

    /// What the stop's final store writes besides the records the loop holds: the ended
    /// records not handed over, the ops not handed over and every sample window up to
    /// `now` (the last one cut at `now`).
    pub fn finish(mut self, sim: &mut LiveSim) -> (Vec<RequestRecord>, Vec<OpRecord>, Vec<SampleWindow>) {
        let now = sim.now();
        self.take_sample(sim, now);
        let (from_ns, to_ns) = self.sample.repeat(self.next_window);
        if from_ns < now {
            self.close(from_ns, to_ns.min(now));
        }
        self.buffered.extend(self.stats.take_returned());
        (self.buffered, self.ops, self.windows)
    }

    /// A request got a record (served, or refused at once: both are history).
    pub fn opened(&mut self, id: u32) {
        self.open.insert(id);
    }

    pub fn due(&self) -> bool {
        self.last.elapsed() >= FLUSH_EVERY
    }

    /// Hands what ended since the last flush, the series' new seconds and the summary to
    /// the writer, never waiting: a full channel keeps the records for the next flush.
    pub fn flush(&mut self, sim: &mut LiveSim) {
        self.last = Instant::now();
        self.take_sample(sim, sim.now());
        let ended: Vec<u32> = self
            .open
            .iter()
            .copied()
            .filter(|&id| sim.record(id).is_some_and(|r| r.finish_ns.is_some() || r.dropped.is_some()))
            .collect();
        for id in ended {
            self.open.remove(&id);
            self.buffered.extend(sim.record(id).cloned());
        }
        // The sink has every ended record the loop was asked to keep: the loop forgets them.
        sim.retire(|id| self.open.contains(&id));
        self.buffered.extend(self.stats.take_returned());
        if self.buffered.len() > MAX_BUFFERED {
            let over = self.buffered.len() - MAX_BUFFERED;
            self.buffered.drain(..over);
            self.stats.dropped.fetch_add(over as u64, Ordering::Relaxed);
        }
        let s = sim.series();
        let now_bucket = (sim.now() / slicesched_sim::SERIES_BUCKET_NS) as usize;
        let to = s.end().max(now_bucket + 1);
        let from = self.series_from.min(to);
        let held = from.saturating_sub(s.first);
        let part = |v: &Vec<u64>| v.get(held..).map_or(Vec::new(), <[u64]>::to_vec);
        let mut series = TimeSeries {
            bucket_s: s.bucket_s,
            first: 0,
            prompt_tokens: part(&s.prompt_tokens),
            output_tokens: part(&s.output_tokens),
            completed: part(&s.completed),
            violations: part(&s.violations),
            gpu_busy_ns: s.gpu_busy_ns.iter().map(part).collect(),
        };
        series.pad(to - from);
        let batch = Batch {
            records: std::mem::take(&mut self.buffered),
            series_from: from,
            series,
            summary: sim.summary(),
            ops: std::mem::take(&mut self.ops),
            windows: std::mem::take(&mut self.windows),
        };
        match self.tx.try_send(batch) {
            Ok(()) => {
                self.series_from = to - 1;
                sim.forget_series_before(self.series_from.saturating_sub(SERIES_KEPT));
            }
            // The writer is behind (or gone): the batch waits here for the next flush or
            // the stop's final store.
            Err(mpsc::error::TrySendError::Full(b) | mpsc::error::TrySendError::Closed(b)) => {
                (self.buffered, self.ops, self.windows) = (b.records, b.ops, b.windows);
            }
        }
    }
}

/// The writer: one transaction per batch, tried again (with a pause) when it fails.
pub fn spawn_writer(
    db: PgPool,
    run: Uuid,
    names: Vec<String>,
    stats: Arc<HistoryStats>,
) -> (mpsc::Sender<Batch>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<Batch>(CHANNEL_BATCHES);
    let task = tokio::spawn(async move {
        while let Some(b) = rx.recv().await {
            let mut tries = 0;
            loop {
                tries += 1;
                match write(&db, run, &names, &b).await {
                    Ok(()) => {
                        stats.written.fetch_add(b.records.len() as u64, Ordering::Relaxed);
                        break;
                    }
                    Err(e) => {
                        stats.failed_writes.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, run = %run, "writing live history failed");
                        if tries >= ATTEMPTS || stats.closing.load(Ordering::Relaxed) {
                            stats.give_back(b.records);
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(500 * tries as u64)).await;
                    }
                }
            }
        }
    });
    (tx, task)
}

async fn write(db: &PgPool, run: Uuid, names: &[String], b: &Batch) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    crate::db::results::insert_requests(&mut tx, run, &b.records, names, true).await?;
    crate::db::results::store_series(&mut tx, run, &b.series, b.series_from, true).await?;
    store_sample(&mut tx, run, &b.ops, &b.windows).await?;
    let summary = serde_json::to_value(&b.summary).map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
    sqlx::query("update runs set summary = $2 where id = $1 and status = 'running'")
        .bind(run)
        .bind(summary)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// Sampled ops, and each closed sample window that saw work as a recorded window of the
/// run (once: a window stored already is left as it is).
pub async fn store_sample(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    run: Uuid,
    ops: &[OpRecord],
    windows: &[SampleWindow],
) -> Result<(), sqlx::Error> {
    if !ops.is_empty() {
        crate::db::results::insert_ops(tx, run, ops).await?;
    }
    let ns = |v: u64| v.min(i64::MAX as u64) as i64;
    for w in windows {
        sqlx::query(
            "insert into run_windows (id, run_id, reason, from_ns, to_ns, status, progress, recorded_to_ns, ops, \
             created_by, finished_at) \
             select $1, $2, 'sampled', $3, $4, 'recorded', 1, $5, o.n, 'system:live', now() \
             from (select count(*) n from run_ops where run_id = $2 and start_ns >= $3 and start_ns < $5) o \
             where o.n > 0 and not exists \
               (select 1 from run_windows where run_id = $2 and reason = 'sampled' and from_ns = $3)",
        )
        .bind(Uuid::new_v4())
        .bind(run)
        .bind(ns(w.from_ns))
        .bind(ns(w.to_ns.max(w.from_ns + 1)))
        .bind(ns(w.recorded_to_ns))
        .execute(&mut **tx)
        .await?;
    }
    if !ops.is_empty() {
        crate::db::results::refresh_op_bounds(tx, run).await?;
    }
    Ok(())
}

/// The run's row and its tenants (with the SLA version each is judged against), when the
/// cluster starts.
pub struct Opening<'a> {
    pub id: Uuid,
    pub config: &'a super::LiveConfig,
    pub tenants: &'a [super::ServedTenant],
    pub slas: &'a [(i32, slicesched_engine::Sla)],
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub actor: &'a str,
}

pub async fn open(db: &PgPool, o: Opening<'_>) -> Result<(), sqlx::Error> {
    let names: Vec<String> = o.tenants.iter().map(|t| t.name.clone()).collect();
    let config = serde_json::to_string_pretty(o.config).unwrap_or_default();
    let tenant_map: serde_json::Map<String, serde_json::Value> =
        o.tenants.iter().map(|t| (t.name.clone(), serde_json::json!(t.tenant_id))).collect();
    let mut tx = db.begin().await?;
    sqlx::query(
        "insert into runs (id, kind, scenario, scenario_toml, policies, tenant_names, gpus, status, progress, \
         created_by, created_at, started_at, tenant_map) \
         values ($1, 'live', 'live', $2, $3, $4, $5, 'running', 0, $6, $7, $7, $8)",
    )
    .bind(o.id)
    .bind(&config)
    .bind(vec![o.config.policy.clone()])
    .bind(&names)
    .bind(o.config.device_count().unwrap_or(0) as i32)
    .bind(o.actor)
    .bind(o.started_at)
    .bind(serde_json::Value::Object(tenant_map))
    .execute(&mut *tx)
    .await?;
    for (t, (version, sla)) in o.tenants.iter().zip(o.slas) {
        sqlx::query(
            "insert into run_tenants (run_id, scenario_tenant, tenant_id, matched_by, sla_version, ttft_ms, \
             ttft_ms_per_1k, tpot_ms) values ($1, $2, $3, 'request', $4, $5, $6, $7)",
        )
        .bind(o.id)
        .bind(&t.name)
        .bind(t.tenant_id)
        .bind(version)
        .bind(sla.ttft_ms)
        .bind(sla.ttft_ms_per_1k)
        .bind(sla.tpot_ms)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// A served tenant's SLA changed: the run records the version its new requests are
/// judged against.
pub async fn sla_changed(
    db: &PgPool,
    run: Uuid,
    tenant: Uuid,
    version: i32,
    sla: &slicesched_engine::Sla,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update run_tenants set sla_version = $3, ttft_ms = $4, ttft_ms_per_1k = $5, tpot_ms = $6 \
         where run_id = $1 and tenant_id = $2",
    )
    .bind(run)
    .bind(tenant)
    .bind(version)
    .bind(sla.ttft_ms)
    .bind(sla.ttft_ms_per_1k)
    .bind(sla.tpot_ms)
    .execute(db)
    .await?;
    Ok(())
}

/// The stopped cluster's traffic: the records not stored yet (those the writer stored are kept),
/// the padded series, the latency histograms, the summary and `succeeded`, in one
/// transaction that refuses a run no longer `running`.
pub async fn store(st: &AppState, c: &Cluster, s: &super::Stopped, actor: &str) -> Result<(), sqlx::Error> {
    let r = &s.result;
    let names: Vec<String> = c.tenants.iter().map(|t| t.name.clone()).collect();
    let summary = serde_json::to_value(&r.summary).unwrap_or_default();
    let policy = c.policy.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut tx = st.db.begin().await?;
    let done = sqlx::query(
        "update runs set status = 'succeeded', progress = 1, finished_at = now(), summary = $2, \
         policies = $3 where id = $1 and status = 'running'",
    )
    .bind(c.id)
    .bind(&summary)
    .bind(vec![policy])
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(sqlx::Error::Protocol(format!("live run {} is no longer running", c.id)));
    }
    // The fallback's final count (the quarantine wrote what it had then).
    let fallback = c.fallback.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(super::watch::LiveFallback::now);
    if let Some(f) = fallback {
        f.store(&mut tx, c.id, false).await?;
    }
    crate::db::results::insert_requests(&mut tx, c.id, &r.records, &names, true).await?;
    store_sample(&mut tx, c.id, &r.ops, &s.windows).await?;
    crate::db::results::store_series(&mut tx, c.id, &r.series, r.series.first, true).await?;
    crate::db::latency::store(&mut tx, c.id, None).await?;
    let h = c.history.snapshot();
    crate::db::audit(
        &mut *tx,
        actor,
        "live.stored",
        &c.id.to_string(),
        serde_json::json!({"requests": r.summary.requests, "written_at_stop": r.records.len(), "written_while_serving": h.records_written,
                           "dropped_while_serving": h.records_dropped}),
    )
    .await?;
    tx.commit().await
}
