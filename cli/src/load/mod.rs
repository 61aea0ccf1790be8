//! `slicesched load`: a scenario's arrivals replayed against a live server in wall
//! clock, like vLLM's `benchmark_serving` — the same request list the simulator builds
//! from the scenario (each tenant's trace: arrival times, prompt and output token
//! counts), one streamed completion per arrival, sent at its arrival time whatever the
//! server's pace. Writes replay's `summary.json`, `requests.csv` and plots (with a
//! `load` section) and, with `--compare-replay`, `compare.json`: a replay of the same
//! load set against what was measured.

mod drive;
pub mod report;
pub mod server;

pub use drive::{one, Outcome, Planned, Route};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use slicesched_sim::{ReplayOptions, RequestRecord, Scenario};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// The live server's base URL (`slicesched serve`'s address), e.g. http://127.0.0.1:8080.
    #[arg(long)]
    url: String,
    /// Scenario TOML file: its tenants' traces are the load; its SLAs judge it.
    #[arg(long)]
    scenario: PathBuf,
    /// Each scenario tenant's API key: `tenant=KEY,...` (a tenant's key reaches its model).
    #[arg(long, value_parser = parse_keys)]
    keys: Keys,
    /// Arrival-rate scale (1 sends the traces as they are).
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::positive)]
    rate_scale: f64,
    /// Send only the arrivals of the first S seconds (after the rate scale).
    #[arg(long, value_parser = crate::args::positive)]
    duration_s: Option<f64>,
    /// Output directory for summary.json, requests.csv, plots and compare.json.
    #[arg(long)]
    out: PathBuf,
    /// Also replay the same load in the simulator and compare (compare.json).
    #[arg(long)]
    compare_replay: bool,
    /// Policy of the replay (default: the server's, when the admin token can read it,
    /// else dedicated).
    #[arg(long)]
    policy: Option<String>,
    /// Fit the replay's cost model on this profile folder (from `slicesched profile`)
    /// instead of the built-in A100 profiles.
    #[arg(long)]
    cost_profile: Option<PathBuf>,
    /// Admin token, to read the live cluster (policy, KV blocks, preemptions) from
    /// `GET /api/v1/live`; default $SLICESCHED_ADMIN_TOKEN.
    #[arg(long)]
    admin_token: Option<String>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Clone)]
pub struct Keys(pub Vec<(String, String)>);

fn parse_keys(s: &str) -> Result<Keys, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (t, k) = part.split_once('=').ok_or_else(|| format!("`{part}` is not tenant=KEY"))?;
        let (t, k) = (t.trim(), k.trim());
        if t.is_empty() || k.is_empty() {
            return Err(format!("`{part}`: both the tenant and the key are needed"));
        }
        if out.iter().any(|(o, _)| o == t) {
            return Err(format!("tenant `{t}` is given twice"));
        }
        out.push((t.to_string(), k.to_string()));
    }
    if out.is_empty() {
        return Err("at least one tenant=KEY".into());
    }
    Ok(Keys(out))
}

/// The scenario's requests after the rate scale and the duration cut, in arrival order.
pub fn load_scenario(path: &Path, rate_scale: f64, duration_s: Option<f64>) -> Result<Scenario> {
    let mut scn = Scenario::from_file(path).with_context(|| format!("loading scenario {}", path.display()))?;
    if rate_scale != 1.0 {
        scn = scn.with_rate_scale(rate_scale);
    }
    if let Some(d) = duration_s {
        let cut = (d * 1e9) as u64;
        scn.requests.retain(|(_, r)| r.arrival_ns < cut);
    }
    if scn.requests.is_empty() {
        bail!("{}: no request arrives in the window to send", path.display());
    }
    Ok(scn)
}

pub fn plan(scn: &Scenario) -> Vec<Planned> {
    scn.requests
        .iter()
        .map(|(t, r)| Planned {
            tenant: *t,
            arrival: Duration::from_nanos(r.arrival_ns),
            prompt_tokens: r.prompt_tokens.max(1),
            output_tokens: r.output_tokens.max(1),
        })
        .collect()
}

/// Sends the plan, showing progress; returns each request's outcome (in plan order)
/// and the wall time.
pub fn send(
    url: &str,
    routes: &[Route],
    plan: &[Planned],
    drain_s: f64,
    bar: &ProgressBar,
) -> Result<(Vec<Outcome>, f64)> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("tokio runtime")?;
    rt.block_on(async {
        let client = server::client()?;
        let last = plan.iter().map(|p| p.arrival).max().unwrap_or_default();
        let t0 = tokio::time::Instant::now() + Duration::from_millis(50);
        let deadline = t0 + last + Duration::from_secs_f64(drain_s);
        let mut set = tokio::task::JoinSet::new();
        for (i, p) in plan.iter().enumerate() {
            let (c, u, r) = (client.clone(), url.to_string(), routes[p.tenant as usize].clone());
            let p = p.clone();
            set.spawn(async move { (i, one(c, u, r, p, i as u64, t0, deadline).await) });
        }
        let mut out = vec![Outcome::default(); plan.len()];
        let (mut done, mut failed, mut limited) = (0u64, 0u64, 0u64);
        loop {
            match tokio::time::timeout(Duration::from_millis(200), set.join_next()).await {
                Ok(None) => break,
                Ok(Some(r)) => {
                    let (i, o) = r.context("a request's task failed")?;
                    done += 1;
                    failed += o.failure.is_some() as u64;
                    limited += (o.status == 429) as u64;
                    out[i] = o;
                }
                Err(_) => {}
            }
            let now = tokio::time::Instant::now().saturating_duration_since(t0);
            let sent = plan.partition_point(|p| p.arrival <= now) as u64;
            bar.set_position(done);
            bar.set_message(format!(
                "{:.0} s, {sent} sent, {} in flight, {failed} failed ({limited} × 429)",
                now.as_secs_f64(),
                sent.saturating_sub(done)
            ));
        }
        Ok::<_, anyhow::Error>((out, t0.elapsed().as_secs_f64()))
    })
}

fn count<'a>(items: impl Iterator<Item = &'a str>) -> Value {
    let mut m = serde_json::Map::new();
    for k in items {
        let n = m.get(k).and_then(Value::as_u64).unwrap_or(0);
        m.insert(k.to_string(), json!(n + 1));
    }
    Value::Object(m)
}

fn quantiles_ms(mut v: Vec<f64>) -> Value {
    let n = v.len();
    json!({
        "p50": slicesched_exec::bench::quantile(&mut v, 0.5),
        "p99": slicesched_exec::bench::quantile(&mut v, 0.99),
        "max": v.iter().copied().fold(0.0, f64::max),
        "n": n,
    })
}

/// What the client measured beyond the replay's schema.
fn load_section(
    a: &Args,
    plan: &[Planned],
    outs: &[Outcome],
    records: &[RequestRecord],
    window_s: f64,
    wall_s: f64,
) -> Value {
    let lag: Vec<f64> =
        plan.iter().zip(outs).map(|(p, o)| o.sent.saturating_sub(p.arrival).as_secs_f64() * 1e3).collect();
    let g = report::goodput(records.iter(), window_s);
    let finished: Vec<_> = plan.iter().zip(outs).filter(|(_, o)| o.finished).collect();
    let short = finished.iter().filter(|(p, o)| (o.tokens.len() as u32) < p.output_tokens).count();
    json!({
        "kind": "live",
        "url": a.url,
        "rate_scale": a.rate_scale,
        "duration_s": a.duration_s,
        "window_s": window_s,
        "wall_s": wall_s,
        "sent": plan.len(),
        "completed": records.iter().filter(|r| r.finish_ns.is_some()).count(),
        "failed": records.iter().filter(|r| r.finish_ns.is_none()).count(),
        "http_status": count(outs.iter().map(|o| match o.status { 0 => "none", 200 => "200", 400 => "400", 429 => "429", 503 => "503", _ => "other" })),
        "failures": count(outs.iter().filter_map(|o| o.failure)),
        "first_failure": outs.iter().find_map(|o| o.message.clone()),
        "finish_reasons": count(outs.iter().filter_map(|o| o.finish_reason.as_deref())),
        "short_outputs": short,
        "short_outputs_note": "the server stops a completion only at max_tokens or a stop sequence (none is sent): \
            every stream should bring exactly the scenario's output tokens (benchmark_serving's ignore_eos); a \
            shorter one is counted here and its TPOT is over the tokens that came",
        "schedule_lag_ms": quantiles_ms(lag),
        "goodput_rps": g.rps,
        "sla_attainment": g.attainment,
        "goodput": "requests completed within both of the scenario's SLA targets per second of the arrival window",
    })
}

pub fn run(a: Args) -> Result<()> {
    let scn = load_scenario(&a.scenario, a.rate_scale, a.duration_s)?;
    let url = a.url.trim_end_matches('/').to_string();
    let admin =
        a.admin_token.clone().or_else(|| std::env::var("SLICESCHED_ADMIN_TOKEN").ok()).filter(|t| !t.is_empty());
    let probe = server::probe(&url, &scn, &a.keys.0, admin.as_deref())?;
    for w in &probe.warnings {
        eprintln!("warning: {w}");
    }
    let plan = plan(&scn);
    let bar = if a.quiet { ProgressBar::hidden() } else { ProgressBar::new(plan.len() as u64) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .expect("static template"),
    );
    let (outs, wall_s) = send(&url, &probe.routes, &plan, scn.spec.drain_s, &bar)?;
    bar.finish_and_clear();
    let after = admin.as_deref().and_then(|t| server::live_tenants(&url, t, &probe).ok());
    let server_figures: Vec<(u32, u64)> = match (&probe.live_before, &after) {
        (Some(before), Some(after)) => before.iter().zip(after).map(|(b, a)| (a.0, a.1.saturating_sub(b.1))).collect(),
        _ => Vec::new(),
    };

    let records = report::records(&scn, &plan, &outs);
    let end_ns = records.iter().filter_map(|r| r.finish_ns.or(Some(r.arrival_ns))).max().unwrap_or(0).max(1);
    let window_s = (plan.last().map_or(0.0, |p| p.arrival.as_secs_f64())).max(1e-3);
    let policy = probe.policy.clone().unwrap_or_else(|| "unknown (live server)".into());
    let summary = report::summary(&scn, &policy, &records, end_ns as f64 / 1e9, wall_s, &server_figures);
    let series = report::series(&records, &outs, end_ns);
    let section = load_section(&a, &plan, &outs, &records, window_s, wall_s);
    let result = report::result(summary, records, series);
    let names: Vec<String> = scn.tenants.iter().map(|t| t.name.clone()).collect();
    let mut files = slicesched_report::write_replay(&a.out, &result, &names).context("writing the report")?;
    // A client sees no device: an empty busy timeline would read as idle GPUs.
    let timeline = a.out.join("gpu_timeline.svg");
    let _ = std::fs::remove_file(&timeline);
    files.retain(|f| *f != timeline);
    let summary_path = a.out.join("summary.json");
    let mut summary: Value = serde_json::from_slice(&std::fs::read(&summary_path)?)?;
    summary["load"] = section;
    summary["load"]["server"] = probe.live.clone().unwrap_or(Value::Null);
    summary["clock"] = json!({
        "kind": "wall clock",
        "why": "latencies are what the client saw: TTFT from sending the request to its first token chunk, TPOT \
                (last - first) / (tokens - 1), e2e to the last token; per-device figures (gpus, busy fraction, op \
                events) are the server's, not visible to a client",
        "wall_s": wall_s,
    });
    slicesched_report::write_atomic(&summary_path, &serde_json::to_vec_pretty(&summary)?)?;

    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", table(&summary))?;
    if a.compare_replay {
        let policy = a.policy.clone().or(probe.policy.clone()).unwrap_or_else(|| "dedicated".into());
        let (c, p) = compare(&a, &scn, &result.records, window_s, &policy)?;
        write!(out, "{}", report::compare_table(&c, &names))?;
        slicesched_report::write_atomic(&p, &serde_json::to_vec_pretty(&c)?)?;
        files.push(p);
    }
    for f in files {
        writeln!(out, "wrote {}", f.display())?;
    }
    Ok(())
}

/// The replay of the same load, and the comparison's path.
fn compare(
    a: &Args,
    scn: &Scenario,
    measured: &[RequestRecord],
    window_s: f64,
    policy: &str,
) -> Result<(Value, PathBuf)> {
    let (predicted, cost_name) = replay_same_load(scn, policy, a.cost_profile.as_deref())?;
    let c = report::compare(scn, measured, &predicted, window_s, policy, &cost_name);
    Ok((c, a.out.join("compare.json")))
}

/// The simulator's records of the load `scn` holds (`slicesched_sim::plan_with` +
/// `replay`, as `run` does), in the same order as [`plan`]'s, and what priced its ops.
pub fn replay_same_load(
    scn: &Scenario,
    policy: &str,
    cost_profile: Option<&Path>,
) -> Result<(Vec<RequestRecord>, String)> {
    let cost = crate::run::cost_model(scn, cost_profile)?;
    let cost_name = match cost_profile {
        None => "A100 (built-in profiles)".to_string(),
        Some(d) => format!("fitted on {}", d.display()),
    };
    let mut pol = crate::policies::by_name(policy).with_context(|| {
        format!("the replay's policy `{policy}` (the server's, unless --policy names one this command can load)")
    })?;
    let planned = slicesched_sim::plan_with(scn, pol.replicas(), &cost).context("planning replicas")?;
    let sim = slicesched_sim::replay(&planned, pol.as_mut(), &cost, ReplayOptions::default(), &mut |_| {});
    Ok((sim.records, cost_name))
}

fn table(s: &Value) -> String {
    let l = &s["load"];
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let mut o = format!(
        "scenario {}  policy {}  sent {}  completed {}  failed {}  ({:.1} s wall)\n\
         TTFT p50/p90/p99 {:.1}/{:.1}/{:.1} ms   TPOT p50/p90/p99 {:.2}/{:.2}/{:.2} ms\n\
         goodput {:.2} req/s, SLA met {:.1}%; output {:.1} tok/s; send lag p99 {:.1} ms; failures {}\n",
        s["scenario"].as_str().unwrap_or(""),
        s["policy"].as_str().unwrap_or(""),
        l["sent"],
        l["completed"],
        l["failed"],
        f(&l["wall_s"]),
        f(&s["ttft_p50_ms"]),
        f(&s["ttft_p90_ms"]),
        f(&s["ttft_p99_ms"]),
        f(&s["tpot_p50_ms"]),
        f(&s["tpot_p90_ms"]),
        f(&s["tpot_p99_ms"]),
        f(&l["goodput_rps"]),
        100.0 * f(&l["sla_attainment"]),
        f(&s["output_tokens_per_s"]),
        f(&l["schedule_lag_ms"]["p99"]),
        l["failures"],
    );
    o += &format!(
        "{:<12} {:<10} {:>5} {:>5} {:>5} {:>7} {:>9} {:>9}\n",
        "tenant", "model", "reqs", "done", "drop", "viol%", "TTFTp90", "TPOTp90"
    );
    for t in s["tenants"].as_array().into_iter().flatten() {
        let u = |k: &str| t[k].as_u64().unwrap_or(0);
        o += &format!(
            "{:<12} {:<10} {:>5} {:>5} {:>5} {:>7.1} {:>9.1} {:>9.2}\n",
            t["name"].as_str().unwrap_or(""),
            t["model"].as_str().unwrap_or(""),
            u("requests"),
            u("completed"),
            u("dropped"),
            100.0 * f(&t["violation_rate"]),
            f(&t["ttft_p90_ms"]),
            f(&t["tpot_p90_ms"]),
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_each_tenant_once() {
        let k = parse_keys("chat=sk-1, code=sk-2").unwrap();
        assert_eq!(k.0, vec![("chat".into(), "sk-1".into()), ("code".into(), "sk-2".into())]);
        for bad in ["", "chat", "chat=", "=k", "a=1,a=2"] {
            assert!(parse_keys(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_plan_is_the_scenarios_request_list_cut_to_the_duration() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/tiny-live-2t.toml");
        let scn = load_scenario(&path, 1.0, None).unwrap();
        let all = plan(&scn);
        assert_eq!(all.len(), scn.requests.len());
        assert!((20..=80).contains(&all.len()), "a few dozen requests: {}", all.len());
        assert!(all.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        let cut = plan(&load_scenario(&path, 2.0, Some(5.0)).unwrap());
        assert!(cut.iter().all(|p| p.arrival < Duration::from_secs(5)));
        assert!(cut.len() < all.len() && !cut.is_empty());
    }
}
