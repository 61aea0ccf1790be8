//! What every handler shares.

use crate::config::Config;
use crate::jobs::Jobs;
use crate::telemetry::Metrics;
use sqlx::PgPool;
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    pub db: PgPool,
    /// Digest of the configured admin token (the token itself is not kept).
    pub admin_token_sha256: [u8; 32],
    pub config: Arc<Config>,
    pub jobs: Jobs,
    pub metrics: Arc<Metrics>,
    /// The live cluster, when one serves.
    pub live: crate::live::Live,
}

impl AppState {
    pub fn new(db: PgPool, config: Config, metrics: Arc<Metrics>) -> AppState {
        let config = Arc::new(config);
        let jobs = Jobs::new(db.clone(), config.clone(), metrics.clone());
        AppState {
            admin_token_sha256: crate::auth::sha256(&config.admin_token),
            db,
            config,
            jobs,
            metrics,
            live: Default::default(),
        }
    }
}
