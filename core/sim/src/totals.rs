//! The request figures of a summary, accumulated one record at a time: exactly over a
//! replay's records, or in bounded memory over everything a live server served (its
//! ended records retire once history has them, their figures stay here).

use crate::metrics::{quantile_ms, RequestRecord};
use crate::sketch::Sketch;
use crate::summary::RequestStats;

/// Latency values: all of them (exact nearest-rank quantiles) or a [`Sketch`].
#[derive(Debug, Clone)]
enum Values {
    Exact(Vec<u64>),
    Sketch(Sketch),
}

impl Values {
    fn record(&mut self, ns: u64) {
        match self {
            Values::Exact(v) => v.push(ns),
            Values::Sketch(s) => s.record(ns),
        }
    }

    fn p50_p90_p99(&mut self) -> [f64; 3] {
        let qs = [0.5, 0.9, 0.99];
        match self {
            Values::Exact(v) => qs.map(|q| quantile_ms(v, q)),
            Values::Sketch(s) => qs.map(|q| s.quantile_ms(q)),
        }
    }
}

/// Counts, token sums and latencies of ended requests (one tenant, or all).
#[derive(Debug, Clone)]
pub(crate) struct Totals {
    requests: u64,
    completed: u64,
    violations: u64,
    prompt_tokens: u64,
    output_tokens: u64,
    ttft: Values,
    tpot: Values,
}

impl Totals {
    fn new(bounded: bool) -> Self {
        let v = || if bounded { Values::Sketch(Sketch::default()) } else { Values::Exact(Vec::new()) };
        Self { requests: 0, completed: 0, violations: 0, prompt_tokens: 0, output_tokens: 0, ttft: v(), tpot: v() }
    }

    pub fn exact() -> Self {
        Self::new(false)
    }

    /// Adds a request; one not finished counts as dropped (and as a violation).
    pub fn add(&mut self, r: &RequestRecord) {
        self.requests += 1;
        self.violations += r.violates() as u64;
        if r.finish_ns.is_some() {
            self.completed += 1;
            self.prompt_tokens += r.prompt_tokens as u64;
            self.output_tokens += r.output_tokens as u64;
            self.ttft.record(r.ttft_ns().unwrap_or(0));
            if r.output_tokens > 1 {
                self.tpot.record(r.tpot_ns().unwrap_or(0));
            }
        }
    }

    /// Token rates are over `dur_s` seconds.
    pub fn stats(&mut self, dur_s: f64) -> RequestStats {
        let n = self.requests;
        RequestStats {
            requests: n,
            completed: self.completed,
            dropped: n - self.completed,
            within_sla: n - self.violations,
            violation_rate: if n > 0 { self.violations as f64 / n as f64 } else { 0.0 },
            prompt_tokens_per_s: self.prompt_tokens as f64 / dur_s,
            output_tokens_per_s: self.output_tokens as f64 / dur_s,
            ttft_ms: self.ttft.p50_p90_p99(),
            tpot_ms: self.tpot.p50_p90_p99(),
        }
    }
}

/// A tenant's requests so far (ended or not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    pub requests: u64,
    pub completed: u64,
    pub dropped: u64,
    /// Completed past a target (drops are counted apart).
    pub sla_violations: u64,
}

impl RequestCounts {
    /// The counts of ended requests' totals (a request not finished was dropped).
    pub(crate) fn of_ended(t: &Totals) -> Self {
        let dropped = t.requests - t.completed;
        // Every drop is a violation: what is left are finished requests past a target.
        Self { requests: t.requests, completed: t.completed, dropped, sla_violations: t.violations - dropped }
    }

    pub(crate) fn add(&mut self, r: &RequestRecord) {
        self.requests += 1;
        self.completed += r.finish_ns.is_some() as u64;
        self.dropped += (r.finish_ns.is_none() && r.dropped.is_some()) as u64;
        self.sla_violations += (r.finish_ns.is_some() && r.violates()) as u64;
    }
}

/// A run's totals: all requests, each tenant's, and the drops by reason.
#[derive(Debug, Clone)]
pub(crate) struct RunTotals {
    pub all: Totals,
    pub tenants: Vec<Totals>,
    /// In first-seen order.
    pub dropped_by_reason: Vec<(String, u64)>,
}

impl RunTotals {
    /// `bounded`: latencies go into sketches (a live server), else every value is kept.
    pub fn new(tenants: usize, bounded: bool) -> Self {
        Self {
            all: Totals::new(bounded),
            tenants: (0..tenants).map(|_| Totals::new(bounded)).collect(),
            dropped_by_reason: Vec::new(),
        }
    }

    pub fn add(&mut self, r: &RequestRecord) {
        self.all.add(r);
        if let Some(t) = self.tenants.get_mut(r.tenant as usize) {
            t.add(r);
        }
        if let (Some(why), None) = (r.dropped, r.finish_ns) {
            count_reason(&mut self.dropped_by_reason, why);
        }
    }
}

pub(crate) fn count_reason(reasons: &mut Vec<(String, u64)>, why: &str) {
    match reasons.iter_mut().find(|(x, _)| x == why) {
        Some((_, c)) => *c += 1,
        None => reasons.push((why.to_string(), 1)),
    }
}
