//! `TraceSpec`: a scenario's `[tenants.trace]` table and how it becomes requests.
//!
//! File traces go through these steps, in this order:
//! 1. parse `path` (relative to the scenario's directory): rows sorted stably by
//!    time, the first at 0;
//! 2. spread requests sharing a quantised timestamp over its bucket (`spread`,
//!    `bucket_s`): on by default for mooncake (3 s buckets), opt-in for burstgpt
//!    (whole-second timestamps, 1 s buckets);
//! 3. the loop period is fixed from the whole trace (span + one mean gap), before any
//!    rows are dropped, so tenants cut from one file share one clock;
//! 4. burstgpt: keep rows whose `Model` equals `model` (ASCII case-insensitive);
//! 5. `split`: keep the rows whose index (after step 4) hashes to `part` of `parts`;
//! 6. window: take trace time `[offset_s, offset_s + window_s)`, looping back to the
//!    start past the end, rebased to 0. `window_s` defaults to the scenario duration
//!    times `rate_scale`, so that after step 7 the stream covers the scenario; with a
//!    non-finite duration (e.g. `f64::INFINITY`) and no `window_s`, exactly one loop;
//! 7. `rate_scale`: divide arrival times, multiplying the arrival rate.
//!
//! Synthetic kinds generate `window_s` (default: the duration) seconds at rates times
//! `rate_scale`, then apply `split`. Fields that a kind does not use are errors, so a
//! typo'd or misplaced setting never silently does nothing.
//!
//! ```toml
//! [tenants.trace]   # one table per tenant; one of:
//! kind = "azure"
//! path = "../data/traces/azure2023_code.csv"
//! offset_s = 900.0                    # start 15 min in (wraps at the end)
//! rate_scale = 1.5
//! split = { parts = 2, part = 0 }     # disjoint half of the rows
//!
//! kind = "burstgpt"                   # path = ..., model = "ChatGPT", spread = true
//! kind = "mooncake"                   # path = ..., spread = true, bucket_s = 3.0
//! kind = "poisson"                    # rate = 4.0
//! kind = "gamma"                      # rate = 4.0, cv = 3.0
//! kind = "onoff"                      # rate_on = 20.0, rate_off = 0.5, mean_on_s = 10.0, mean_off_s = 60.0
//! prompt = { dist = "lognormal", median = 1469, p90 = 5188, max = 8192 }
//! output = { dist = "lognormal", mean = 200, sigma = 1.0 }   # or "fixed" value / "uniform" min, max
//! ```

use crate::synth::{generate, Arrivals, LengthDist};
use crate::{load_file, mooncake, reason, transform, Format, Loaded, TraceError};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceKind {
    Azure,
    Burstgpt,
    Mooncake,
    Poisson,
    Gamma,
    Onoff,
}

/// A deterministic partition of a trace's rows into `parts` disjoint streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Split {
    pub parts: u32,
    /// This stream, `0..parts`.
    pub part: u32,
    /// Hash salt. Deliberately not the tenant's load seed: tenants usually get
    /// different seeds, and their parts must still be disjoint. Default 0.
    #[serde(default)]
    pub seed: u64,
}

/// How a scenario's tenant gets its requests (a `[tenants.trace]` table in TOML).
/// See the module docs for the order in which the fields apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    pub kind: TraceKind,
    /// File kinds: the trace file, relative to the scenario's directory.
    pub path: Option<String>,
    /// File kinds: start this many seconds into the trace (wrapping). Default 0.
    pub offset_s: Option<f64>,
    /// Seconds of trace to take; see the module docs for the default.
    pub window_s: Option<f64>,
    /// Arrival-rate multiplier; 1.0 (the default) is as recorded.
    pub rate_scale: Option<f64>,
    pub split: Option<Split>,
    /// burstgpt: keep only this `Model`.
    pub model: Option<String>,
    /// mooncake, burstgpt: spread quantised timestamps (default true for mooncake,
    /// false for burstgpt).
    pub spread: Option<bool>,
    /// mooncake, burstgpt: the quantisation bucket, seconds (default 3 and 1).
    pub bucket_s: Option<f64>,
    /// poisson, gamma: requests per second.
    pub rate: Option<f64>,
    /// gamma: coefficient of variation of inter-arrival gaps (1 = Poisson).
    pub cv: Option<f64>,
    /// onoff: rates (req/s) in ON and OFF periods and their mean lengths (s).
    pub rate_on: Option<f64>,
    pub rate_off: Option<f64>,
    pub mean_on_s: Option<f64>,
    pub mean_off_s: Option<f64>,
    /// Synthetic kinds: prompt and output length distributions (defaults: the Azure
    /// 2023 code trace marginals).
    pub prompt: Option<LengthDist>,
    pub output: Option<LengthDist>,
}

fn spec_err(msg: impl Into<String>) -> TraceError {
    TraceError::Spec(msg.into())
}

impl TraceSpec {
    /// A spec of `kind` with every optional field unset.
    pub fn new(kind: TraceKind) -> Self {
        Self {
            kind,
            path: None,
            offset_s: None,
            window_s: None,
            rate_scale: None,
            split: None,
            model: None,
            spread: None,
            bucket_s: None,
            rate: None,
            cv: None,
            rate_on: None,
            rate_off: None,
            mean_on_s: None,
            mean_off_s: None,
            prompt: None,
            output: None,
        }
    }

    fn format(&self) -> Option<Format> {
        match self.kind {
            TraceKind::Azure => Some(Format::Azure),
            TraceKind::Burstgpt => Some(Format::Burstgpt),
            TraceKind::Mooncake => Some(Format::Mooncake),
            _ => None,
        }
    }

    /// Checks the fields fit the kind and lie in range, without reading any file.
    pub fn validate(&self) -> Result<(), TraceError> {
        use TraceKind::*;
        let set = [
            ("path", self.path.is_some(), &[Azure, Burstgpt, Mooncake][..]),
            ("offset_s", self.offset_s.is_some(), &[Azure, Burstgpt, Mooncake]),
            ("model", self.model.is_some(), &[Burstgpt]),
            ("spread", self.spread.is_some(), &[Mooncake, Burstgpt]),
            ("bucket_s", self.bucket_s.is_some(), &[Mooncake, Burstgpt]),
            ("rate", self.rate.is_some(), &[Poisson, Gamma]),
            ("cv", self.cv.is_some(), &[Gamma]),
            ("rate_on", self.rate_on.is_some(), &[Onoff]),
            ("rate_off", self.rate_off.is_some(), &[Onoff]),
            ("mean_on_s", self.mean_on_s.is_some(), &[Onoff]),
            ("mean_off_s", self.mean_off_s.is_some(), &[Onoff]),
            ("prompt", self.prompt.is_some(), &[Poisson, Gamma, Onoff]),
            ("output", self.output.is_some(), &[Poisson, Gamma, Onoff]),
        ];
        for (name, present, kinds) in set {
            if present && !kinds.contains(&self.kind) {
                return Err(spec_err(format!("`{name}` does not apply to kind {:?}", self.kind)));
            }
        }
        if self.format().is_some() && self.path.is_none() {
            return Err(spec_err(format!("kind {:?} needs `path`", self.kind)));
        }
        let nonneg = |name: &str, v: Option<f64>| match v {
            Some(x) if !(x.is_finite() && x >= 0.0) => {
                Err(spec_err(format!("`{name}` must be finite and >= 0, got {x}")))
            }
            _ => Ok(()),
        };
        nonneg("offset_s", self.offset_s)?;
        nonneg("window_s", self.window_s)?;
        nonneg("bucket_s", self.bucket_s)?;
        if let Some(s) = self.rate_scale {
            if !(s.is_finite() && s > 0.0) {
                return Err(spec_err(format!("`rate_scale` must be finite and > 0, got {s}")));
            }
        }
        if let Some(sp) = &self.split {
            if sp.parts == 0 || sp.part >= sp.parts {
                return Err(spec_err(format!(
                    "`split` needs parts >= 1 and part < parts, got {}/{}",
                    sp.part, sp.parts
                )));
            }
        }
        Ok(())
    }

    /// The synthetic arrival process, or `None` for file kinds.
    fn arrivals(&self) -> Result<Option<Arrivals>, TraceError> {
        let need =
            |name: &str, v: Option<f64>| v.ok_or_else(|| spec_err(format!("kind {:?} needs `{name}`", self.kind)));
        let scale = self.rate_scale.unwrap_or(1.0);
        Ok(Some(match self.kind {
            TraceKind::Poisson => Arrivals::Poisson { rate: need("rate", self.rate)? * scale },
            TraceKind::Gamma => Arrivals::Gamma { rate: need("rate", self.rate)? * scale, cv: need("cv", self.cv)? },
            TraceKind::Onoff => Arrivals::OnOff {
                rate_on: need("rate_on", self.rate_on)? * scale,
                rate_off: self.rate_off.unwrap_or(0.0) * scale,
                mean_on_s: need("mean_on_s", self.mean_on_s)?,
                mean_off_s: need("mean_off_s", self.mean_off_s)?,
            },
            _ => return Ok(None),
        }))
    }

    /// Materialises the requests; relative paths resolve against `base_dir`.
    /// `duration_s` is the scenario length; pass `f64::INFINITY` for a whole file trace.
    pub fn load(&self, base_dir: &Path, seed: u64, duration_s: f64) -> Result<Loaded, TraceError> {
        self.validate()?;
        if duration_s.is_nan() || duration_s < 0.0 {
            return Err(spec_err(format!("duration must be >= 0, got {duration_s}")));
        }
        let scale = self.rate_scale.unwrap_or(1.0);
        let mut loaded = match self.arrivals()? {
            Some(arr) => {
                let secs = self.window_s.unwrap_or(duration_s);
                let prompt = self.prompt.clone().unwrap_or_else(LengthDist::default_prompt);
                let output = self.output.clone().unwrap_or_else(LengthDist::default_output);
                let requests = generate(&arr, &prompt, &output, seed, secs)?;
                let mut l = Loaded { requests, ..Default::default() };
                l.skipped.rows_read = l.requests.len() as u64;
                l
            }
            None => self.load_file_kind(base_dir, seed, duration_s * scale)?,
        };
        if let (Some(sp), true) = (&self.split, self.format().is_none()) {
            let (kept, dropped) = transform::split(std::mem::take(&mut loaded.requests), sp.seed, sp.parts, sp.part);
            loaded.requests = kept;
            loaded.skipped.add(reason::SPLIT, dropped);
        }
        Ok(loaded)
    }

    fn load_file_kind(&self, base_dir: &Path, seed: u64, default_window_s: f64) -> Result<Loaded, TraceError> {
        let (Some(format), Some(path)) = (self.format(), &self.path) else {
            return Err(spec_err("file kind without `path`"));
        };
        let mut loaded = load_file(&base_dir.join(path), format)?;
        let reqs = &mut loaded.requests;
        let is_mooncake = self.kind == TraceKind::Mooncake;
        if self.spread.unwrap_or(is_mooncake) {
            let default_s = if is_mooncake { mooncake::DEFAULT_BUCKET_NS as f64 / 1e9 } else { 1.0 };
            mooncake::spread_buckets(reqs, seed, (self.bucket_s.unwrap_or(default_s) * 1e9) as u64);
        }
        let period = transform::period_ns(reqs.len(), reqs.last().map_or(0, |r| r.arrival_ns));
        if let Some(model) = &self.model {
            let n = reqs.len();
            reqs.retain(|r| r.key.as_deref().is_some_and(|k| k.trim().eq_ignore_ascii_case(model.trim())));
            loaded.skipped.add(reason::MODEL_FILTER, (n - reqs.len()) as u64);
        }
        if let Some(sp) = &self.split {
            let (kept, dropped) = transform::split(std::mem::take(reqs), sp.seed, sp.parts, sp.part);
            *reqs = kept;
            loaded.skipped.add(reason::SPLIT, dropped);
        }
        let window_s = self.window_s.unwrap_or(default_window_s);
        let window_ns = if window_s.is_finite() { (window_s * 1e9).min(u64::MAX as f64) as u64 } else { period };
        let offset_ns = (self.offset_s.unwrap_or(0.0) * 1e9).min(u64::MAX as f64) as u64;
        let (mut out, unused) = transform::window(reqs, period, offset_ns, window_ns)?;
        loaded.skipped.add(reason::OUTSIDE_WINDOW, unused);
        transform::rate_scale(&mut out, self.rate_scale.unwrap_or(1.0));
        loaded.requests = out;
        Ok(loaded)
    }
}
