//! The watchdog: runs the database says are queued or running but that no job of this
//! process holds (their job died, or its last write was lost) would otherwise wait
//! forever. A stuck `running` one is failed with the cause; a `queued` one is queued
//! again. Only runs older than [`GRACE`] are looked at, so a run inserted a moment ago
//! and about to be submitted is left alone.

use super::Jobs;
use std::time::Duration;
use uuid::Uuid;

/// How long a run may be queued or running without a live job before the watchdog acts.
pub const GRACE: Duration = Duration::from_secs(30);
/// Between two passes.
pub const EVERY: Duration = Duration::from_secs(10);

/// The cause a stuck run is failed with.
pub const STUCK: &str = "no live job held this run (its job ended without recording an outcome)";

impl Jobs {
    /// One pass; returns (runs failed, runs queued again).
    pub async fn sweep_stuck(&self, grace: Duration) -> Result<(u64, u64), sqlx::Error> {
        let secs = grace.as_secs_f64();
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            // A live run is held by its cluster, not by a job.
            "select id, status from runs where status in ('queued', 'running') and kind <> 'live' \
             and coalesce(started_at, created_at) < now() - make_interval(secs => $1)",
        )
        .bind(secs)
        .fetch_all(&self.inner.db)
        .await?;
        let (mut failed, mut requeued) = (0, 0);
        for (id, status) in rows {
            if self.inner.flags.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&id) {
                continue;
            }
            if status == "queued" {
                self.submit(id);
                requeued += 1;
            } else {
                let r = sqlx::query(
                    "update runs set status = 'failed', error = $2, finished_at = now() \
                     where id = $1 and status = 'running'",
                )
                .bind(id)
                .bind(STUCK)
                .execute(&self.inner.db)
                .await?;
                failed += r.rows_affected();
            }
        }
        if failed + requeued > 0 {
            tracing::warn!(failed, requeued, "watchdog: runs without a live job");
        }
        Ok((failed, requeued))
    }

    /// Runs [`Jobs::sweep_stuck`] every `every` until the process ends; a pass that meets
    /// an outage is simply tried again at the next tick.
    pub fn start_watchdog(&self, every: Duration, grace: Duration) {
        let jobs = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = jobs.sweep_stuck(grace).await {
                    tracing::debug!(error = %e, "watchdog pass failed");
                }
            }
        });
    }
}
