//! Job bookkeeping that outlives a database outage: a write the job must make (start,
//! the final store, the terminal status) is retried with exponential back-off while the
//! database is unreachable, so a run never stays `running` because Postgres was down at
//! the wrong moment. Errors that are not an outage (a refused statement) are returned at
//! once: retrying them would only repeat them.

use crate::error::is_outage;
use std::future::Future;
use std::time::Duration;

/// First wait after a failed attempt; doubled per attempt up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Runs `op` until it succeeds, fails other than by an outage, or `give_up` says stop
/// (checked between attempts: a cancelled run stops waiting for its store).
pub async fn with_backoff<T, F, Fut>(what: &str, mut give_up: impl FnMut() -> bool, mut op: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let mut wait = FIRST_BACKOFF;
    let mut attempt = 0u32;
    loop {
        match op().await {
            Ok(v) => {
                if attempt > 0 {
                    tracing::info!(what, attempts = attempt + 1, "database back: bookkeeping done");
                }
                return Ok(v);
            }
            Err(e) if is_outage(&e) && !give_up() => {
                attempt += 1;
                if attempt == 1 || attempt.is_power_of_two() {
                    tracing::warn!(what, attempt, error = %e, "database unavailable: retrying");
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_BACKOFF);
            }
            Err(e) => return Err(e),
        }
    }
}

/// [`with_backoff`] that never gives up.
pub async fn until_back<T, F, Fut>(what: &str, op: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    with_backoff(what, || false, op).await
}
