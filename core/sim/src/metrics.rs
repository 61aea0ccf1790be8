//! What a replay measures: per-request records, time series, per-GPU busy time and
//! idle gaps, and the summary built from them.

use serde::Serialize;

/// Time-series bucket width.
pub const SERIES_BUCKET_NS: u64 = 1_000_000_000;

/// One request's fate.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    pub id: u32,
    pub tenant: u32,
    pub arrival_ns: u64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub first_token_ns: Option<u64>,
    pub finish_ns: Option<u64>,
    pub preemptions: u32,
    pub dropped: Option<&'static str>,
    pub ttft_target_ns: u64,
    pub tpot_target_ns: u64,
}

impl RequestRecord {
    pub fn ttft_ns(&self) -> Option<u64> {
        self.first_token_ns.map(|t| t - self.arrival_ns)
    }
    /// Mean time per output token after the first; 0 for one-token outputs.
    pub fn tpot_ns(&self) -> Option<u64> {
        let (f, e) = (self.first_token_ns?, self.finish_ns?);
        Some(if self.output_tokens > 1 { (e - f) / (self.output_tokens as u64 - 1) } else { 0 })
    }
    pub fn e2e_ns(&self) -> Option<u64> {
        self.finish_ns.map(|t| t - self.arrival_ns)
    }
    /// Dropped requests violate; completed ones when TTFT or mean TPOT misses target.
    /// Finished or dropped: its figures are final.
    pub fn ended(&self) -> bool {
        self.finish_ns.is_some() || self.dropped.is_some()
    }

    pub fn violates(&self) -> bool {
        match (self.ttft_ns(), self.tpot_ns(), self.finish_ns) {
            (Some(a), Some(b), Some(_)) => a > self.ttft_target_ns || b > self.tpot_target_ns,
            _ => true,
        }
    }
}

/// Upper edges of the idle-gap histogram buckets, ns: 10 per decade from 1 µs to 1000 s.
pub const GAP_BUCKETS: usize = 91;

fn gap_bucket(ns: u64) -> usize {
    if ns <= 1_000 {
        return 0;
    }
    let d = (ns as f64 / 1_000.0).log10() * 10.0;
    (d.ceil() as usize).min(GAP_BUCKETS - 1)
}

/// Upper edge of gap bucket `b`, ns.
pub fn gap_bucket_edge_ns(b: usize) -> f64 {
    1_000.0 * 10f64.powf(b as f64 / 10.0)
}

/// Distribution of idle-gap lengths on one GPU.
#[derive(Debug, Clone, Serialize)]
pub struct GapHistogram {
    pub count: Vec<u64>,
    pub idle_ns: Vec<u64>,
}

impl Default for GapHistogram {
    fn default() -> Self {
        Self { count: vec![0; GAP_BUCKETS], idle_ns: vec![0; GAP_BUCKETS] }
    }
}

impl GapHistogram {
    pub fn record(&mut self, ns: u64) {
        if ns == 0 {
            return;
        }
        let b = gap_bucket(ns);
        self.count[b] += 1;
        self.idle_ns[b] += ns;
    }
    pub fn total_count(&self) -> u64 {
        self.count.iter().sum()
    }
    pub fn total_idle_ns(&self) -> u64 {
        self.idle_ns.iter().sum()
    }
    /// Gap-length quantile read off the histogram (a bucket's upper edge), ms. The
    /// summary's percentiles come from [`GapLengths`] instead: the gaps themselves.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let n = self.total_count();
        if n == 0 {
            return 0.0;
        }
        let target = (q * n as f64).ceil().max(1.0) as u64;
        let mut acc = 0;
        for (b, &c) in self.count.iter().enumerate() {
            acc += c;
            if acc >= target {
                return gap_bucket_edge_ns(b) / 1e6;
            }
        }
        gap_bucket_edge_ns(GAP_BUCKETS - 1) / 1e6
    }
    /// Idle time in gaps no longer than `ms`, as a fraction of all idle time.
    pub fn idle_fraction_below_ms(&self, ms: f64) -> f64 {
        let total = self.total_idle_ns();
        if total == 0 {
            return 0.0;
        }
        let mut acc = 0;
        for (b, &t) in self.idle_ns.iter().enumerate() {
            if gap_bucket_edge_ns(b) <= ms * 1e6 * 1.0001 {
                acc += t;
            }
        }
        acc as f64 / total as f64
    }
}

/// Every idle gap's length on one GPU, kept compactly (u32 ns, the rare longer ones
/// aside), so the summary's gap percentiles are computed from the gaps themselves, not
/// read off histogram bin edges.
#[derive(Debug, Clone, Default)]
pub(crate) struct GapLengths {
    short: Vec<u32>,
    long: Vec<u64>,
    /// Set for a live loop, which idles for ever: the gaps go here instead.
    sketch: Option<crate::sketch::Sketch>,
}

impl GapLengths {
    /// Gaps kept in a [`crate::sketch::Sketch`] (quantiles within 0.1%), not one by one.
    pub fn bounded() -> Self {
        Self { sketch: Some(Default::default()), ..Default::default() }
    }

    pub fn record(&mut self, ns: u64) {
        if ns == 0 {
            return;
        }
        if let Some(s) = &mut self.sketch {
            return s.record(ns);
        }
        match u32::try_from(ns) {
            Ok(v) => self.short.push(v),
            Err(_) => self.long.push(ns),
        }
    }

    /// Nearest-rank quantiles (the definition the latency percentiles use), ms; 0 when
    /// the GPU never idled.
    pub fn quantiles_ms(&self, qs: &[f64]) -> Vec<f64> {
        if let Some(s) = &self.sketch {
            return qs.iter().map(|&q| s.quantile_ms(q)).collect();
        }
        let mut all: Vec<u64> = self.short.iter().map(|&v| v as u64).chain(self.long.iter().copied()).collect();
        qs.iter().map(|&q| quantile_ms(&mut all, q)).collect()
    }
}

/// Per-second counters over the replay.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TimeSeries {
    pub bucket_s: f64,
    /// The bucket the vectors start at: 0 in a replay; a live loop forgets the buckets
    /// history has ([`TimeSeries::forget_before`]).
    #[serde(skip)]
    pub first: usize,
    pub prompt_tokens: Vec<u64>,
    pub output_tokens: Vec<u64>,
    pub completed: Vec<u64>,
    pub violations: Vec<u64>,
    /// Per GPU, busy ns in each bucket.
    pub gpu_busy_ns: Vec<Vec<u64>>,
}

/// Adds to the bucket of `t`, unless it was forgotten already.
fn bump(v: &mut Vec<u64>, first: usize, t: u64, by: u64) {
    let Some(b) = ((t / SERIES_BUCKET_NS) as usize).checked_sub(first) else { return };
    if v.len() <= b {
        v.resize(b + 1, 0);
    }
    v[b] += by;
}

impl TimeSeries {
    pub fn new(gpus: usize) -> Self {
        Self { bucket_s: SERIES_BUCKET_NS as f64 / 1e9, gpu_busy_ns: vec![Vec::new(); gpus], ..Default::default() }
    }
    pub fn add_tokens(&mut self, t: u64, prompt: u64, output: u64) {
        if prompt > 0 {
            bump(&mut self.prompt_tokens, self.first, t, prompt);
        }
        if output > 0 {
            bump(&mut self.output_tokens, self.first, t, output);
        }
    }
    pub fn add_completion(&mut self, t: u64, violated: bool) {
        bump(&mut self.completed, self.first, t, 1);
        bump(&mut self.violations, self.first, t, violated as u64);
    }
    /// Adds a busy span to a GPU, split across the buckets it covers.
    pub fn add_busy(&mut self, gpu: usize, start: u64, end: u64) {
        let v = &mut self.gpu_busy_ns[gpu];
        let mut s = start;
        while s < end {
            let edge = (s / SERIES_BUCKET_NS + 1) * SERIES_BUCKET_NS;
            let e = end.min(edge);
            bump(v, self.first, s, e - s);
            s = e;
        }
    }
    fn all_mut(&mut self) -> impl Iterator<Item = &mut Vec<u64>> {
        [&mut self.prompt_tokens, &mut self.output_tokens, &mut self.completed, &mut self.violations]
            .into_iter()
            .chain(self.gpu_busy_ns.iter_mut())
    }
    /// Pads every series to `buckets` (counted from bucket 0) so plots share an axis.
    pub fn pad(&mut self, buckets: usize) {
        let n = buckets.saturating_sub(self.first);
        for v in self.all_mut() {
            v.resize(n.max(v.len()), 0);
        }
    }
    /// One past the last bucket held (counted from bucket 0).
    pub fn end(&self) -> usize {
        let all = [&self.prompt_tokens, &self.output_tokens, &self.completed, &self.violations];
        self.first + all.into_iter().chain(&self.gpu_busy_ns).map(Vec::len).max().unwrap_or(0)
    }
    /// Drops the buckets before `bucket`: what is added to them later is not counted.
    pub fn forget_before(&mut self, bucket: usize) {
        let k = bucket.saturating_sub(self.first);
        for v in self.all_mut() {
            v.drain(..k.min(v.len()));
        }
        self.first = self.first.max(bucket);
    }
}

/// Per-GPU figures of a replay.
#[derive(Debug, Clone, Serialize)]
pub struct GpuStats {
    pub gpu: u32,
    pub sku: String,
    pub busy_fraction: f64,
    pub busy_s: f64,
    pub idle_gaps: u64,
    pub idle_gap_p50_ms: f64,
    pub idle_gap_p90_ms: f64,
    pub idle_gap_p99_ms: f64,
    /// Share of idle time in gaps ≤ 1 ms, ≤ 10 ms, ≤ 100 ms, ≤ 1 s: slices only
    /// operator-level scheduling can use.
    pub idle_share_le_1ms: f64,
    pub idle_share_le_10ms: f64,
    pub idle_share_le_100ms: f64,
    pub idle_share_le_1s: f64,
    pub peak_memory_gb: f64,
    pub capacity_gb: f64,
    pub oom_events: u64,
    pub ops: u64,
    /// Busy time spent on ops of tenants whose home this GPU is not (borrowed slices).
    pub guest_busy_s: f64,
    /// Weights resident here: (tenant, layers, GB), the home first.
    pub weights: Vec<(String, (u32, u32), f64)>,
    pub kv_cache_gb: f64,
    pub gap_histogram: GapHistogram,
}

/// Per-tenant figures of a replay.
#[derive(Debug, Clone, Serialize)]
pub struct TenantStats {
    pub name: String,
    pub model: String,
    pub gpus: Vec<u32>,
    pub kv_blocks: u32,
    pub requests: u64,
    pub completed: u64,
    pub dropped: u64,
    pub violation_rate: f64,
    pub prompt_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p90_ms: f64,
    pub ttft_p99_ms: f64,
    pub tpot_p50_ms: f64,
    pub tpot_p90_ms: f64,
    pub tpot_p99_ms: f64,
    pub preemptions: u64,
    pub sla_ttft_ms: f64,
    pub sla_ttft_ms_per_1k: f64,
    pub sla_tpot_ms: f64,
}

/// Wall-clock figures: the only part of a summary that may differ between runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timing {
    pub sim_wall_s: f64,
    pub op_events_per_s: f64,
    /// Policy decision batches per wall-clock second (when measured).
    pub decisions_per_s: f64,
    /// Wall time of one decision batch (policy call with its view), µs.
    pub decision_p50_us: f64,
    pub decision_p99_us: f64,
    /// Wall time of the planner's what-if (`summary.plan`), before the replay.
    pub plan_whatif_s: f64,
}

/// A replica the planner placed: (tenant, GPUs, layers, with KV cache).
pub type ReplicaRow = (String, Vec<u32>, (u32, u32), bool);

/// How the scheduler placed ops.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scheduling {
    /// Policy calls (each with a batch of ready ops).
    pub decisions: u64,
    pub placements: u64,
    /// Ops the core placed with their producer (elementwise, collectives, attention),
    /// without asking the policy.
    pub followed_ops: u64,
    /// Ops that ran away from their home group.
    pub borrowed_ops: u64,
    /// Borrowed ops taken back home before they started, because their lender's owner
    /// queued work there (not counted in `borrowed_ops`).
    pub recalled_ops: u64,
    pub transfers: u64,
    pub transfer_gb: f64,
    /// Replicas the planner placed.
    pub replicas: Vec<ReplicaRow>,
    /// Concurrent iterations started beyond the first, per instance total.
    pub micro_batches: u64,
    /// Extra micro-batches the policy admitted that waited for an executing one to end:
    /// their activations did not fit the instance's reserve beside those executing.
    pub deferred_micro_batches: u64,
    /// Per tenant, the token budget of its home's iterations that carry decode steps
    /// (its engine's `decode_token_budget`, or the one derived from its TPOT target).
    pub decode_token_budgets: Vec<(String, u32)>,
    /// Requests whose KV moved to another instance of their tenant (`migrate.rs`), the
    /// bytes moved (over every GPU they left) and the time those requests paused.
    pub kv_migrations: u64,
    /// Of those, the moves that freed KV blocks a queue waited for (the rest shed the
    /// load of an instance that was behind).
    pub kv_migrations_for_memory: u64,
    pub kv_migrated_gb: f64,
    pub kv_migration_pause_ms: f64,
    /// `static` (the planned copies for the whole run) or `online` (`copies.rs`).
    pub replan: String,
    /// Online: copies whose weights were loaded, dropped (of those, for their
    /// lender's owner's KV), the weights copied (over every GPU they went to) and the
    /// link time the loads took.
    pub copies_loaded: u64,
    pub copies_dropped: u64,
    pub copies_dropped_for_memory: u64,
    pub copied_weights_gb: f64,
    pub copy_load_ms: f64,
    /// Owners' decode-only steps that waited for their paced launch while another
    /// tenant used their GPUs (`pace.rs`).
    pub paced_decode_steps: u64,
}

/// The replay's summary (`summary.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub policy: String,
    pub scenario: String,
    pub seed: u64,
    pub requests: u64,
    pub completed: u64,
    pub dropped: u64,
    pub dropped_by_reason: Vec<(String, u64)>,
    pub skipped_trace_rows: Vec<(String, u64)>,
    pub violation_rate: f64,
    pub duration_s: f64,
    pub prompt_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p90_ms: f64,
    pub ttft_p99_ms: f64,
    pub tpot_p50_ms: f64,
    pub tpot_p90_ms: f64,
    pub tpot_p99_ms: f64,
    pub oom_events: u64,
    pub op_events: u64,
    pub iterations: u64,
    pub preemptions: u64,
    /// Placements the core refused, by reason (the op then ran on its home group).
    pub rejected_placements: Vec<(String, u64)>,
    pub scheduling: Scheduling,
    pub gpu_busy_fraction: f64,
    pub tenants: Vec<TenantStats>,
    pub gpus: Vec<GpuStats>,
    pub timing: Timing,
    /// The plan the what-if chose among the planner's candidates, when it had a choice
    /// (`crate::plan_whatif`; set by the caller that planned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<crate::PlanChoice>,
}

/// Nearest-rank quantile of unsorted values, in ms.
pub(crate) fn quantile_ms(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_percentiles_are_the_gaps_own_lengths() {
        let mut g = GapLengths::default();
        for ns in [1_200_000, 300_000, 5_000_000_000, 700_000, 0] {
            g.record(ns);
        }
        // Four gaps (a zero gap is none): p50 is the second shortest, p99 the longest.
        assert_eq!(g.quantiles_ms(&[0.5, 0.99]), vec![0.7, 5_000.0]);
        assert_eq!(GapLengths::default().quantiles_ms(&[0.5]), vec![0.0]);
    }

    #[test]
    fn gap_buckets_are_log_spaced() {
        assert_eq!(gap_bucket(500), 0);
        assert_eq!(gap_bucket(1_000_000), 30);
        assert_eq!(gap_bucket(1_000_001), 31);
        let mut h = GapHistogram::default();
        h.record(500_000);
        h.record(5_000_000_000);
        assert!((h.quantile_ms(0.5) - 0.501).abs() < 0.01, "{}", h.quantile_ms(0.5));
        assert!(h.idle_fraction_below_ms(1.0) < 0.001);
    }

    #[test]
    fn busy_spans_split_over_buckets() {
        let mut s = TimeSeries::new(1);
        s.add_busy(0, 900_000_000, 2_100_000_000);
        assert_eq!(s.gpu_busy_ns[0], vec![100_000_000, 1_000_000_000, 100_000_000]);
    }

    #[test]
    fn quantiles() {
        let mut v: Vec<u64> = (1..=100).map(|x| x * 1_000_000).collect();
        assert_eq!(quantile_ms(&mut v, 0.99), 99.0);
        assert_eq!(quantile_ms(&mut v, 0.5), 50.0);
    }
}
