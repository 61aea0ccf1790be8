//! Request traces: parsers for public production traces and seeded synthetic arrivals.
//!
//! `TraceSpec::load` is the contract the simulator uses; `load_file` parses one file
//! as recorded (no transforms) for tests and tools.
//!
//! Every parser sorts rows stably by time and rebases arrivals so the first request
//! arrives at 0, so every transform in [`spec`] sees the same shape of input.

pub mod azure;
pub mod burstgpt;
mod common;
pub mod mooncake;
pub mod spec;
pub mod synth;
pub mod transform;

pub use spec::{Split, TraceKind, TraceSpec};
pub use synth::LengthDist;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One inference request, as a trace gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Arrival time from the start of the (shifted, scaled) trace, ns.
    pub arrival_ns: u64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    /// Mooncake 512-token prefix block ids (shared leading ids = reusable KV prefix);
    /// empty for traces that do not record them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hash_ids: Vec<u32>,
    /// A per-row tenant key when the trace has one (BurstGPT `Model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl Request {
    /// A request without prefix blocks or key.
    pub fn new(arrival_ns: u64, prompt_tokens: u32, output_tokens: u32) -> Self {
        Self { arrival_ns, prompt_tokens, output_tokens, hash_ids: Vec::new(), key: None }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A bad row; `line` is 1-based as an editor shows it (the CSV header is line 1).
    #[error("{path}:{line}: field `{field}`: {msg}")]
    Row { path: String, line: u64, field: String, msg: String },
    #[error("{path}: {msg}")]
    File { path: String, msg: String },
    /// The `[tenants.trace]` table is inconsistent (e.g. `rate` missing for poisson).
    #[error("trace spec: {0}")]
    Spec(String),
}

/// Why rows were read but not returned. Counts are keyed by a reason string; the
/// constants in [`reason`] are the ones this crate uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Data rows read from the file (or generated), before any skipping.
    pub rows_read: u64,
    /// Reason → number of rows dropped for it.
    pub counts: BTreeMap<String, u64>,
}

impl Skipped {
    pub fn add(&mut self, reason: &str, n: u64) {
        if n > 0 {
            *self.counts.entry(reason.to_string()).or_default() += n;
        }
    }

    /// Rows dropped for `reason` (0 when none were).
    pub fn get(&self, reason: &str) -> u64 {
        self.counts.get(reason).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// Reasons rows are dropped, as keys of [`Skipped::counts`].
pub mod reason {
    /// BurstGPT records failed requests with 0 request and 0 response tokens.
    pub const FAILED_0_0: &str = "failed 0/0 row";
    /// BurstGPT rows with exactly one zero count are failures too (no tokens served).
    pub const FAILED_ZERO: &str = "failed row with a zero token count";
    pub const MODEL_FILTER: &str = "other model";
    pub const SPLIT: &str = "other split part";
    pub const OUTSIDE_WINDOW: &str = "outside window";
}

/// Requests plus what was dropped while reading and transforming them.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub requests: Vec<Request>,
    pub skipped: Skipped,
}

/// A trace file layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Azure LLM inference CSV, 2023 or 2024 timestamps.
    Azure,
    /// BurstGPT CSV.
    Burstgpt,
    /// Mooncake JSON lines.
    Mooncake,
}

/// Parses a whole file as recorded: sorted, rebased to 0, no spreading or windowing.
pub fn load_file(path: &Path, format: Format) -> Result<Loaded, TraceError> {
    let label = path.display().to_string();
    let file = std::fs::File::open(path)
        .map_err(|e| TraceError::File { path: label.clone(), msg: format!("cannot open: {e}") })?;
    parse_reader(std::io::BufReader::new(file), format, &label)
}

/// Parses in-memory bytes; `label` names the source in errors.
pub fn parse_bytes(bytes: &[u8], format: Format, label: &str) -> Result<Loaded, TraceError> {
    parse_reader(bytes, format, label)
}

fn parse_reader<R: std::io::BufRead>(r: R, format: Format, label: &str) -> Result<Loaded, TraceError> {
    match format {
        Format::Azure => azure::parse(r, label),
        Format::Burstgpt => burstgpt::parse(r, label),
        Format::Mooncake => mooncake::parse(r, label),
    }
}
