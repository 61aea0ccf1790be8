//! The replay's summary: per-request, per-tenant and per-GPU figures.

use crate::metrics::{GpuStats, RequestRecord, Scheduling, Summary, TenantStats, Timing};
use crate::replay::Sim;
use crate::totals::{RunTotals, Totals};
use slicesched_hw::GpuId;

/// The request figures of a summary (whole run or one tenant), from the records alone:
/// what a replay computes and what a load generator measuring a live server reports, by
/// one definition.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestStats {
    pub requests: u64,
    pub completed: u64,
    pub dropped: u64,
    /// Completed within both SLA targets.
    pub within_sla: u64,
    /// Dropped requests count as violations.
    pub violation_rate: f64,
    pub prompt_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    /// p50, p90, p99 (nearest rank), ms.
    pub ttft_ms: [f64; 3],
    pub tpot_ms: [f64; 3],
}

impl RequestStats {
    /// Token rates are over `dur_s` seconds.
    pub fn of<'a>(recs: impl Iterator<Item = &'a RequestRecord>, dur_s: f64) -> Self {
        let mut t = Totals::exact();
        recs.for_each(|r| t.add(r));
        t.stats(dur_s)
    }
}

/// Unfinished requests counted by why they were dropped, in first-seen order.
pub fn dropped_by_reason<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Vec<(String, u64)> {
    let mut reasons: Vec<(String, u64)> = Vec::new();
    for r in records {
        if let (Some(why), None) = (r.dropped, r.finish_ns) {
            crate::totals::count_reason(&mut reasons, why);
        }
    }
    reasons
}

impl Sim<'_> {
    /// Over every record, exactly (a replay).
    pub(crate) fn summarize(&self, end: u64) -> Summary {
        let mut totals = RunTotals::new(self.scn.tenants.len(), false);
        self.records.iter().for_each(|r| totals.add(r));
        self.summarize_with(end, totals)
    }

    /// A live loop's summary: the `retired` requests' totals and the ended ones still
    /// held (one still in service is not yet a drop nor a violation).
    pub(crate) fn summarize_retired(&self, end: u64, mut retired: RunTotals) -> Summary {
        self.records.iter().filter(|r| r.ended()).for_each(|r| retired.add(r));
        self.summarize_with(end, retired)
    }

    /// The summary whose request figures are `totals` (a live server passes those of
    /// the requests that ended, retired or not: one still in service is not yet a drop
    /// nor a violation).
    pub(crate) fn summarize_with(&self, end: u64, mut totals: RunTotals) -> Summary {
        let dur_s = end as f64 / 1e9;
        let tenants: Vec<TenantStats> = self
            .scn
            .tenants
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let st = totals.tenants[i].stats(dur_s);
                TenantStats {
                    name: t.name.clone(),
                    model: t.model.name.clone(),
                    gpus: t.gpus.iter().map(|g| g.0).collect(),
                    kv_blocks: t.kv_blocks,
                    requests: st.requests,
                    completed: st.completed,
                    dropped: st.dropped,
                    violation_rate: st.violation_rate,
                    prompt_tokens_per_s: st.prompt_tokens_per_s,
                    output_tokens_per_s: st.output_tokens_per_s,
                    ttft_p50_ms: st.ttft_ms[0],
                    ttft_p90_ms: st.ttft_ms[1],
                    ttft_p99_ms: st.ttft_ms[2],
                    tpot_p50_ms: st.tpot_ms[0],
                    tpot_p90_ms: st.tpot_ms[1],
                    tpot_p99_ms: st.tpot_ms[2],
                    preemptions: self.tenant_insts[i]
                        .iter()
                        .map(|&k| self.insts[k as usize].engine.preemptions())
                        .sum(),
                    sla_ttft_ms: t.sla.ttft_ms,
                    sla_ttft_ms_per_1k: t.sla.ttft_ms_per_1k,
                    sla_tpot_ms: t.sla.tpot_ms,
                }
            })
            .collect();
        let gpus: Vec<GpuStats> = self
            .dev
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| (i, g, g.gap_lengths.quantiles_ms(&[0.5, 0.9, 0.99])))
            .map(|(i, g, gq)| GpuStats {
                gpu: i as u32,
                sku: self.scn.cluster.gpus[i].sku.name.clone(),
                busy_fraction: g.busy_ns as f64 / end as f64,
                busy_s: g.busy_ns as f64 / 1e9,
                idle_gaps: g.gaps.total_count(),
                idle_gap_p50_ms: gq[0],
                idle_gap_p90_ms: gq[1],
                idle_gap_p99_ms: gq[2],
                idle_share_le_1ms: g.gaps.idle_fraction_below_ms(1.0),
                idle_share_le_10ms: g.gaps.idle_fraction_below_ms(10.0),
                idle_share_le_100ms: g.gaps.idle_fraction_below_ms(100.0),
                idle_share_le_1s: g.gaps.idle_fraction_below_ms(1000.0),
                peak_memory_gb: g.ledger.peak as f64 / 1e9,
                capacity_gb: g.ledger.capacity as f64 / 1e9,
                oom_events: g.ledger.oom_events,
                ops: g.ops,
                guest_busy_s: self.stats.guest_busy_ns[i] as f64 / 1e9,
                weights: {
                    let dep = &self.scn.deployment;
                    let mut w: Vec<_> = dep
                        .homes
                        .iter()
                        .filter(|h| dep.group(h.group).gpus.contains(&GpuId(i as u32)))
                        .map(|h| {
                            (
                                !h.is_home,
                                self.scn.tenants[h.tenant.index()].name.clone(),
                                h.layers,
                                h.weight_bytes_per_gpu as f64 / 1e9,
                            )
                        })
                        .collect();
                    w.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
                    w.into_iter().map(|(_, n, l, gb)| (n, l, gb)).collect()
                },
                kv_cache_gb: self.scn.kv_bytes_on(GpuId(i as u32)) as f64 / 1e9,
                gap_histogram: g.gaps.clone(),
            })
            .collect();
        let st = totals.all.stats(dur_s);
        Summary {
            policy: self.policy.name().to_string(),
            scenario: self.scn.spec.name.clone(),
            seed: self.scn.spec.seed,
            requests: st.requests,
            completed: st.completed,
            dropped: st.dropped,
            dropped_by_reason: std::mem::take(&mut totals.dropped_by_reason),
            skipped_trace_rows: self.scn.skipped.clone(),
            violation_rate: st.violation_rate,
            duration_s: dur_s,
            prompt_tokens_per_s: st.prompt_tokens_per_s,
            output_tokens_per_s: st.output_tokens_per_s,
            ttft_p50_ms: st.ttft_ms[0],
            ttft_p90_ms: st.ttft_ms[1],
            ttft_p99_ms: st.ttft_ms[2],
            tpot_p50_ms: st.tpot_ms[0],
            tpot_p90_ms: st.tpot_ms[1],
            tpot_p99_ms: st.tpot_ms[2],
            oom_events: gpus.iter().map(|g| g.oom_events).sum(),
            op_events: self.op_events,
            iterations: self.iterations,
            preemptions: self.insts.iter().map(|t| t.engine.preemptions()).sum(),
            rejected_placements: self.rejected.clone(),
            scheduling: Scheduling {
                decisions: self.stats.decisions,
                placements: self.stats.placed,
                followed_ops: self.stats.followed,
                borrowed_ops: self.stats.borrowed,
                recalled_ops: self.stats.recalled,
                transfers: self.stats.transfers,
                transfer_gb: self.stats.transfer_bytes as f64 / 1e9,
                replicas: self
                    .scn
                    .deployment
                    .homes
                    .iter()
                    .filter(|h| !h.is_home)
                    .map(|h| {
                        let gpus = self.scn.deployment.group(h.group).gpus.iter().map(|g| g.0).collect();
                        (self.scn.tenants[h.tenant.index()].name.clone(), gpus, h.layers, h.serves)
                    })
                    .collect(),
                micro_batches: self.iterations.saturating_sub(self.single_iterations),
                deferred_micro_batches: self.deferred_batches,
                decode_token_budgets: self
                    .insts
                    .iter()
                    .filter(|i| i.is_home)
                    .map(|i| {
                        let name = self.scn.tenants[i.tenant.index()].name.clone();
                        (name, i.engine.config().decode_token_budget)
                    })
                    .collect(),
                kv_migrations: self.moves.count,
                kv_migrations_for_memory: self.moves.for_memory,
                kv_migrated_gb: self.moves.bytes as f64 / 1e9,
                kv_migration_pause_ms: self.moves.pause_ns as f64 / 1e6,
                replan: if self.copies.on { "online" } else { "static" }.into(),
                copies_loaded: self.copies.loaded,
                copies_dropped: self.copies.dropped,
                copies_dropped_for_memory: self.copies.dropped_for_memory,
                copied_weights_gb: self.copies.bytes as f64 / 1e9,
                copy_load_ms: self.copies.load_ns as f64 / 1e6,
                paced_decode_steps: self.paced_steps,
            },
            gpu_busy_fraction: gpus.iter().map(|g| g.busy_fraction).sum::<f64>() / gpus.len().max(1) as f64,
            tenants,
            gpus,
            timing: {
                let (d, total) = (&self.stats.decision_wall, self.stats.decision_wall_total_ns);
                Timing {
                    decisions_per_s: if total > 0 { d.count() as f64 / (total as f64 / 1e9) } else { 0.0 },
                    decision_p50_us: d.quantile_ms(0.5) * 1e3,
                    decision_p99_us: d.quantile_ms(0.99) * 1e3,
                    ..Timing::default()
                }
            },
            plan: None,
        }
    }
}
