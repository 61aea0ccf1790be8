//! Service configuration: a TOML file (optional) overridden by the environment.

use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where to listen.
    pub addr: String,
    /// Postgres URL (`DATABASE_URL` overrides it).
    pub database_url: String,
    /// The admin bearer token (`SLICESCHED_ADMIN_TOKEN` overrides it).
    pub admin_token: String,
    /// Built web UI assets, served at `/`.
    pub web_dir: PathBuf,
    /// Shipped scenarios, by file stem.
    pub scenarios_dir: PathBuf,
    /// Shipped plugin components (`*.wasm`) registered at start-up.
    pub plugins_dir: PathBuf,
    /// Replays or sweeps running at once; the rest wait in the queue.
    pub max_concurrent_runs: usize,
    /// Largest plugin upload accepted, bytes.
    pub plugin_max_bytes: usize,
    /// Store the demo replays at start-up when the database holds no run, and serve the
    /// demo's two tiny tenants live (unless `[live]` starts a cluster).
    pub demo_run: bool,
    /// Ops recorded for the timeline of a replay (the first this many of its window).
    pub record_max_ops: u64,
    /// Folders a scenario may read clusters, models and traces from (relative ones to
    /// the working directory); by default `scenarios/`, `data/` and the plugin folder.
    /// Never `.data/` or `.git/`, even below one of these.
    pub data_dirs: Vec<PathBuf>,
    /// Budgets every request and run is checked against before any work.
    pub limits: crate::limits::Limits,
    /// A live cluster to serve (`[live]`; started with the service when `autostart`).
    pub live: Option<crate::live::LiveConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: "127.0.0.1:8080".into(),
            database_url: "postgres://postgres@127.0.0.1:5432/slicesched".into(),
            admin_token: String::new(),
            web_dir: "web/dist".into(),
            scenarios_dir: "scenarios".into(),
            plugins_dir: "target/plugins".into(),
            max_concurrent_runs: 2,
            plugin_max_bytes: 8 * 1024 * 1024,
            demo_run: true,
            record_max_ops: 200_000,
            data_dirs: vec!["scenarios".into(), "data".into(), "target/plugins".into()],
            limits: crate::limits::Limits::default(),
            live: None,
        }
    }
}

/// The shortest admin token the service accepts (it guards every admin action).
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {msg}")]
    File { path: String, msg: String },
    #[error("no admin token: set SLICESCHED_ADMIN_TOKEN or admin_token in the config file")]
    NoAdminToken,
    #[error("the admin token (SLICESCHED_ADMIN_TOKEN or admin_token) is {len} characters; it must be at least {MIN_ADMIN_TOKEN_CHARS}")]
    WeakAdminToken { len: usize },
}

impl Config {
    /// The file (if any), then `DATABASE_URL` and `SLICESCHED_ADMIN_TOKEN`.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut c = match file {
            Some(p) => {
                let err = |msg: String| ConfigError::File { path: p.display().to_string(), msg };
                let text = std::fs::read_to_string(p).map_err(|e| err(e.to_string()))?;
                toml::from_str(&text).map_err(|e| err(e.to_string()))?
            }
            None => Config::default(),
        };
        if let Ok(u) = std::env::var("DATABASE_URL") {
            c.database_url = u;
        }
        if let Ok(t) = std::env::var("SLICESCHED_ADMIN_TOKEN") {
            c.admin_token = t;
        }
        c.check()?;
        Ok(c)
    }

    pub fn check(&self) -> Result<(), ConfigError> {
        if self.admin_token.is_empty() {
            return Err(ConfigError::NoAdminToken);
        }
        let len = self.admin_token.chars().count();
        if len < MIN_ADMIN_TOKEN_CHARS {
            return Err(ConfigError::WeakAdminToken { len });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_admin_token_is_refused_in_one_line_naming_the_rule() {
        let c = Config { admin_token: "short-token".into(), ..Config::default() };
        let msg = c.check().unwrap_err().to_string();
        assert_eq!(
            msg,
            "the admin token (SLICESCHED_ADMIN_TOKEN or admin_token) is 11 characters; it must be at least 16"
        );
        assert!(!msg.contains('\n'));
        let ok = Config { admin_token: "x".repeat(MIN_ADMIN_TOKEN_CHARS), ..Config::default() };
        assert!(ok.check().is_ok());
    }
}
