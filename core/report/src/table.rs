//! Terminal tables.

use slicesched_sim::Summary;
use std::fmt::Write;

/// The summary as a human-readable table.
pub fn summary_table(s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "scenario {}  policy {}  seed {}", s.scenario, s.policy, s.seed);
    let _ = writeln!(
        o,
        "requests {}  completed {}  dropped {}  violation rate {:.2}%  OOM events {}",
        s.requests,
        s.completed,
        s.dropped,
        100.0 * s.violation_rate,
        s.oom_events
    );
    let _ = writeln!(
        o,
        "throughput: prompt {:.0} tok/s, output {:.1} tok/s over {:.1} s; GPU busy {:.1}%",
        s.prompt_tokens_per_s,
        s.output_tokens_per_s,
        s.duration_s,
        100.0 * s.gpu_busy_fraction
    );
    let _ = writeln!(
        o,
        "TTFT p50/p90/p99 {:.1}/{:.1}/{:.1} ms   TPOT p50/p90/p99 {:.2}/{:.2}/{:.2} ms",
        s.ttft_p50_ms, s.ttft_p90_ms, s.ttft_p99_ms, s.tpot_p50_ms, s.tpot_p90_ms, s.tpot_p99_ms
    );
    let _ = writeln!(
        o,
        "\n{:<14} {:<12} {:>6} {:>6} {:>5} {:>7} {:>9} {:>8} {:>9} {:>9} {:>8}",
        "tenant", "model", "reqs", "done", "drop", "viol%", "prompt/s", "out/s", "TTFTp99", "TPOTp99", "preempt"
    );
    for t in &s.tenants {
        let _ = writeln!(
            o,
            "{:<14} {:<12} {:>6} {:>6} {:>5} {:>7.2} {:>9.0} {:>8.1} {:>9.1} {:>9.2} {:>8}",
            t.name,
            t.model,
            t.requests,
            t.completed,
            t.dropped,
            100.0 * t.violation_rate,
            t.prompt_tokens_per_s,
            t.output_tokens_per_s,
            t.ttft_p99_ms,
            t.tpot_p99_ms,
            t.preemptions
        );
    }
    let _ = writeln!(
        o,
        "\n{:<5} {:<11} {:>6} {:>9} {:>10} {:>10} {:>10} {:>8} {:>8} {:>9}",
        "gpu", "sku", "busy%", "gaps", "gap p50", "gap p90", "gap p99", "≤10ms%", "≤1s%", "peak GB"
    );
    for g in &s.gpus {
        let _ = writeln!(
            o,
            "{:<5} {:<11} {:>6.1} {:>9} {:>8.2}ms {:>8.2}ms {:>8.1}ms {:>8.1} {:>8.1} {:>9.1}",
            g.gpu,
            g.sku,
            100.0 * g.busy_fraction,
            g.idle_gaps,
            g.idle_gap_p50_ms,
            g.idle_gap_p90_ms,
            g.idle_gap_p99_ms,
            100.0 * g.idle_share_le_10ms,
            100.0 * g.idle_share_le_1s,
            g.peak_memory_gb
        );
    }
    for (why, n) in &s.dropped_by_reason {
        let _ = writeln!(o, "dropped: {n} × {why}");
    }
    for (why, n) in &s.rejected_placements {
        let _ = writeln!(o, "rejected placements: {n} × {why}");
    }
    o
}

/// One row per (policy, target) of a goodput sweep.
pub fn sweep_table(r: &crate::SweepReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<12} {:>7} {:>10} {:>12} {:>11} {:>7} {:>4} {:>11}  note",
        "policy", "target", "rate scale", "prompt tok/s", "output tok/s", "viol%", "OOM", "×dedicated"
    );
    for row in &r.results {
        let ratio = r
            .ratios
            .iter()
            .find(|x| x.policy == row.policy && x.target == row.target)
            .and_then(|x| x.goodput_vs_dedicated)
            .map_or_else(|| "-".to_string(), |x| format!("{x:.2}×"));
        let note = match row.status.as_str() {
            "violates_at_min_scale" if row.target < r.refused_share => {
                format!("no goodput: {:.2}% of the requests are refused for their length", 100.0 * r.refused_share)
            }
            "violates_at_min_scale" => format!("violates even at scale {}", r.min_scale),
            "capped_at_max_scale" => format!("meets the target at the max scale {}; boundary is higher", r.max_scale),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "{:<12} {:>6.1}% {:>10.3} {:>12.0} {:>12.1} {:>7.2} {:>4} {:>11}  {}",
            row.policy,
            100.0 * row.target,
            row.rate_scale,
            row.prompt_tokens_per_s,
            row.output_tokens_per_s,
            100.0 * row.violation_rate,
            row.oom_events,
            ratio,
            note
        );
    }
    o
}
