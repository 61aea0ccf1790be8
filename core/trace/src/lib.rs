//! Request traces.
//!
//! SKELETON: `Request` and `TraceSpec::load` are the contract the simulator uses.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// One inference request, as a trace gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Arrival time from the start of the (shifted, scaled) trace, ns.
    pub arrival_ns: u64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}:{line}: field `{field}`: {msg}")]
    Row { path: String, line: u64, field: String, msg: String },
    #[error("{path}: {msg}")]
    File { path: String, msg: String },
}

/// How a scenario's tenant gets its requests (a `[tenants.trace]` table in TOML).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceSpec {
    pub kind: String,
    pub path: Option<String>,
    pub rate: Option<f64>,
}

/// Requests plus what was skipped while reading them.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub requests: Vec<Request>,
    pub skipped: Vec<(String, u64)>,
}

impl TraceSpec {
    /// Materialises the requests; relative paths resolve against `base_dir`.
    pub fn load(&self, _base_dir: &Path, seed: u64, duration_s: f64) -> Result<Loaded, TraceError> {
        let rate = self.rate.unwrap_or(1.0);
        let n = (rate * duration_s) as u64;
        let gap = (1e9 / rate) as u64;
        let requests = (0..n)
            .map(|i| Request { arrival_ns: i * gap + seed % 7, prompt_tokens: 512, output_tokens: 64 })
            .collect();
        Ok(Loaded { requests, skipped: vec![] })
    }
}
