//! What `slicesched load` measured, in a replay's shapes: per-request records, the
//! per-second series and a `Summary` with the replay's definitions
//! (`slicesched_sim::RequestStats`), so `slicesched_report::write_replay` writes the
//! same `summary.json`, `requests.csv` and plots; and the side-by-side comparison with
//! a replay of the same load (`compare.json`).

use super::drive::{Outcome, Planned};
use serde_json::{json, Value};
use slicesched_sim::{
    dropped_by_reason, ReplayResult, RequestRecord, RequestStats, Scenario, Scheduling, Summary, TenantStats,
    TimeSeries, Timing,
};

fn ns(d: std::time::Duration) -> u64 {
    d.as_nanos() as u64
}

/// One record per planned request, judged against the scenario's SLA. A request's
/// arrival is when it was sent (its TTFT counts from there, as `benchmark_serving`'s
/// does); its output tokens are the token chunks that came back.
pub fn records(scn: &Scenario, plan: &[Planned], outcomes: &[Outcome]) -> Vec<RequestRecord> {
    plan.iter()
        .zip(outcomes)
        .enumerate()
        .map(|(i, (p, o))| {
            let sla = &scn.tenants[p.tenant as usize].sla;
            let done = o.finished && !o.tokens.is_empty();
            RequestRecord {
                id: i as u32,
                tenant: p.tenant,
                arrival_ns: ns(o.sent),
                prompt_tokens: p.prompt_tokens,
                output_tokens: if done { o.tokens.len() as u32 } else { p.output_tokens.max(1) },
                first_token_ns: o.tokens.first().map(|&t| ns(t)),
                finish_ns: done.then(|| ns(*o.tokens.last().expect("non-empty"))),
                preemptions: 0,
                dropped: if done { None } else { Some(o.failure.unwrap_or(super::drive::STREAM)) },
                ttft_target_ns: sla.ttft_target_ns(p.prompt_tokens),
                tpot_target_ns: sla.tpot_target_ns(),
            }
        })
        .collect()
}

/// Per-second series: prompt tokens when the first token came, each output token when
/// it came, completions when the last one did.
pub fn series(records: &[RequestRecord], outcomes: &[Outcome], end_ns: u64) -> TimeSeries {
    let mut s = TimeSeries::new(0);
    for (r, o) in records.iter().zip(outcomes) {
        if let Some(f) = r.first_token_ns {
            s.add_tokens(f, r.prompt_tokens as u64, 0);
        }
        for &t in &o.tokens {
            s.add_tokens(ns(t), 0, 1);
        }
        if let Some(e) = r.finish_ns {
            s.add_completion(e, r.violates());
        }
    }
    s.pad((end_ns / slicesched_sim::SERIES_BUCKET_NS + 1) as usize);
    s
}

/// The summary of a load. Figures a client cannot see (per-device busy time, op
/// events, placements) are left empty, `gpu_busy_fraction` is NaN (`null` in JSON);
/// `kv_blocks` and `preemptions` come from the live API when an admin token gave them.
pub fn summary(
    scn: &Scenario,
    policy: &str,
    records: &[RequestRecord],
    dur_s: f64,
    wall_s: f64,
    server: &[(u32, u64)],
) -> Summary {
    let all = RequestStats::of(records.iter(), dur_s);
    let tenants: Vec<TenantStats> = scn
        .tenants
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let s = RequestStats::of(records.iter().filter(|r| r.tenant as usize == i), dur_s);
            let (kv_blocks, preemptions) = server.get(i).copied().unwrap_or_default();
            TenantStats {
                name: t.name.clone(),
                model: t.model.name.clone(),
                gpus: t.gpus.iter().map(|g| g.0).collect(),
                kv_blocks,
                requests: s.requests,
                completed: s.completed,
                dropped: s.dropped,
                violation_rate: s.violation_rate,
                prompt_tokens_per_s: s.prompt_tokens_per_s,
                output_tokens_per_s: s.output_tokens_per_s,
                ttft_p50_ms: s.ttft_ms[0],
                ttft_p90_ms: s.ttft_ms[1],
                ttft_p99_ms: s.ttft_ms[2],
                tpot_p50_ms: s.tpot_ms[0],
                tpot_p90_ms: s.tpot_ms[1],
                tpot_p99_ms: s.tpot_ms[2],
                preemptions,
                sla_ttft_ms: t.sla.ttft_ms,
                sla_ttft_ms_per_1k: t.sla.ttft_ms_per_1k,
                sla_tpot_ms: t.sla.tpot_ms,
            }
        })
        .collect();
    Summary {
        policy: policy.to_string(),
        scenario: scn.spec.name.clone(),
        seed: scn.spec.seed,
        requests: all.requests,
        completed: all.completed,
        dropped: all.dropped,
        dropped_by_reason: dropped_by_reason(records),
        skipped_trace_rows: scn.skipped.clone(),
        violation_rate: all.violation_rate,
        duration_s: dur_s,
        prompt_tokens_per_s: all.prompt_tokens_per_s,
        output_tokens_per_s: all.output_tokens_per_s,
        ttft_p50_ms: all.ttft_ms[0],
        ttft_p90_ms: all.ttft_ms[1],
        ttft_p99_ms: all.ttft_ms[2],
        tpot_p50_ms: all.tpot_ms[0],
        tpot_p90_ms: all.tpot_ms[1],
        tpot_p99_ms: all.tpot_ms[2],
        oom_events: 0,
        op_events: 0,
        iterations: 0,
        preemptions: tenants.iter().map(|t| t.preemptions).sum(),
        rejected_placements: Vec::new(),
        scheduling: Scheduling::default(),
        gpu_busy_fraction: f64::NAN,
        tenants,
        gpus: Vec::new(),
        timing: Timing { sim_wall_s: wall_s, ..Timing::default() },
        plan: None,
    }
}

pub fn result(summary: Summary, records: Vec<RequestRecord>, series: TimeSeries) -> ReplayResult {
    ReplayResult {
        summary,
        records,
        series,
        dependency_violations: 0,
        ops: Vec::new(),
        decisions: Vec::new(),
        busy: None,
        cancelled: false,
        violation_at_stop: None,
        fast_iterations: 0,
    }
}

/// Goodput: requests that completed within both SLA targets per second of the arrival
/// window (vLLM's request goodput), and SLA attainment, their share of all requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Goodput {
    pub rps: f64,
    pub attainment: f64,
}

pub fn goodput<'a>(recs: impl Iterator<Item = &'a RequestRecord>, window_s: f64) -> Goodput {
    let s = RequestStats::of(recs, 1.0);
    Goodput {
        rps: s.within_sla as f64 / window_s.max(1e-9),
        attainment: if s.requests > 0 { s.within_sla as f64 / s.requests as f64 } else { 0.0 },
    }
}

fn figures(records: &[RequestRecord], tenant: Option<u32>, window_s: f64) -> Value {
    let pick = || records.iter().filter(move |r| tenant.is_none_or(|t| r.tenant == t));
    let s = RequestStats::of(pick(), 1.0);
    let g = goodput(pick(), window_s);
    json!({
        "requests": s.requests, "completed": s.completed, "dropped": s.dropped,
        "ttft_p50_ms": s.ttft_ms[0], "ttft_p90_ms": s.ttft_ms[1],
        "tpot_p50_ms": s.tpot_ms[0], "tpot_p90_ms": s.tpot_ms[1],
        "goodput_rps": g.rps, "sla_attainment": g.attainment,
    })
}

/// Predicted (a replay) against measured (the load), overall and per tenant.
pub fn compare(
    scn: &Scenario,
    measured: &[RequestRecord],
    predicted: &[RequestRecord],
    window_s: f64,
    policy: &str,
    cost: &str,
) -> Value {
    let side = |recs: &[RequestRecord]| {
        let mut per = serde_json::Map::new();
        for (i, t) in scn.tenants.iter().enumerate() {
            per.insert(t.name.clone(), figures(recs, Some(i as u32), window_s));
        }
        json!({"all": figures(recs, None, window_s), "tenants": per})
    };
    json!({
        "policy": policy,
        "cost_model": cost,
        "cost_model_note": "the replay prices every op with this cost model: the A100 one prices a tiny model's \
            ops as on an A100 (microseconds), not as on the server's CPU devices (milliseconds), so its latencies \
            are those of the same load on A100s; a profile of the server's machine (slicesched profile, then \
            --cost-profile DIR) prices them as there",
        "window_s": window_s,
        "goodput": "requests completed within both SLA targets per second of the arrival window",
        "measured": side(measured),
        "predicted": side(predicted),
    })
}

/// The comparison as a terminal table.
pub fn compare_table(c: &Value, names: &[String]) -> String {
    let mut o = format!(
        "predicted (replay under {}, {} cost model) / measured (live):\n{:<12} {:>19} {:>19} {:>19} {:>19} {:>17} {:>15}\n",
        c["policy"].as_str().unwrap_or(""),
        c["cost_model"].as_str().unwrap_or(""),
        "tenant",
        "TTFT p50 ms",
        "TTFT p90 ms",
        "TPOT p50 ms",
        "TPOT p90 ms",
        "goodput req/s",
        "SLA met"
    );
    let rows = std::iter::once(("all".to_string(), "/all".to_string()))
        .chain(names.iter().map(|n| (n.clone(), format!("/tenants/{}", n.replace('~', "~0").replace('/', "~1")))));
    for (name, ptr) in rows {
        let (p, m) = (&c["predicted"], &c["measured"]);
        let get =
            |side: &Value, k: &str| side.pointer(&format!("{ptr}/{k}")).and_then(Value::as_f64).unwrap_or(f64::NAN);
        let pair = |k: &str, prec: usize| format!("{:.*} / {:.*}", prec, get(p, k), prec, get(m, k));
        let pct = format!("{:.0}% / {:.0}%", 100.0 * get(p, "sla_attainment"), 100.0 * get(m, "sla_attainment"));
        o += &format!(
            "{:<12} {:>19} {:>19} {:>19} {:>19} {:>17} {:>15}\n",
            name,
            pair("ttft_p50_ms", 1),
            pair("ttft_p90_ms", 1),
            pair("tpot_p50_ms", 2),
            pair("tpot_p90_ms", 2),
            pair("goodput_rps", 2),
            pct
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rec(tenant: u32, ttft_ms: u64, done: bool) -> RequestRecord {
        RequestRecord {
            id: 0,
            tenant,
            arrival_ns: 0,
            prompt_tokens: 10,
            output_tokens: 3,
            first_token_ns: Some(ttft_ms * 1_000_000),
            finish_ns: done.then_some(ttft_ms * 1_000_000 + 20_000_000),
            preemptions: 0,
            dropped: (!done).then_some("x"),
            ttft_target_ns: 100_000_000,
            tpot_target_ns: 50_000_000,
        }
    }

    #[test]
    fn goodput_counts_only_requests_within_both_targets() {
        let r = [rec(0, 50, true), rec(0, 150, true), rec(1, 10, false), rec(1, 10, true)];
        let g = goodput(r.iter(), 2.0);
        assert_eq!(g, Goodput { rps: 1.0, attainment: 0.5 });
        assert_eq!(goodput(r.iter().filter(|x| x.tenant == 1), 1.0).attainment, 0.5);
    }

    #[test]
    fn a_failed_stream_is_dropped_with_its_reason_and_tpot_is_over_the_gaps() {
        let scn = Scenario::from_file(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/tiny-live-2t.toml"),
        )
        .unwrap();
        let ms = Duration::from_millis;
        let plan = vec![
            Planned { tenant: 0, arrival: ms(0), prompt_tokens: 8, output_tokens: 3 },
            Planned { tenant: 1, arrival: ms(5), prompt_tokens: 8, output_tokens: 3 },
        ];
        let ok = Outcome {
            sent: ms(1),
            tokens: vec![ms(11), ms(21), ms(41)],
            finished: true,
            status: 200,
            ..Default::default()
        };
        let bad = Outcome {
            sent: ms(6),
            status: 429,
            failure: Some(super::super::drive::RATE_LIMITED),
            ..Default::default()
        };
        let r = records(&scn, &plan, &[ok.clone(), bad.clone()]);
        assert_eq!(r[0].ttft_ns(), Some(10_000_000));
        assert_eq!(r[0].tpot_ns(), Some(15_000_000), "(41 - 11) / (3 - 1) ms");
        assert_eq!(r[1].dropped, Some("rate limited (429)"));
        let s = summary(&scn, "dedicated", &r, 1.0, 1.0, &[]);
        assert_eq!((s.requests, s.completed, s.dropped), (2, 1, 1));
        assert_eq!(s.dropped_by_reason, vec![("rate limited (429)".to_string(), 1)]);
        assert_eq!(series(&r, &[ok, bad], 1_000_000_000).output_tokens[0], 3);
    }
}
