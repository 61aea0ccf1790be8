//! `slicesched bench live`: what serving live costs, against a running `slicesched
//! serve` (an admin token starts and stops its live cluster): per token, the live path
//! (HTTP, engine, policy call, core checks, recording) against the executor alone on
//! the same tiny model and batch; the requests/s the service sustains on tiny models
//! with both cores; and `slicesched load` on a two-tenant scenario, measured against
//! predicted goodput. The cluster serves the scenario's tenants (its models, homes and
//! memory), registered for the bench under unique names and removed after.

use crate::load::{self, report, Outcome, Planned, Route};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use slicesched_exec::{CpuBackend, CpuDeviceSpec};
use slicesched_sim::Scenario;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Admin token (default $SLICESCHED_ADMIN_TOKEN).
    #[arg(long)]
    admin_token: Option<String>,
    /// The two-tenant scenario the cluster serves and `load` sends.
    #[arg(long, default_value = "scenarios/tiny-live-2t.toml")]
    scenario: PathBuf,
    /// Prompt tokens and decode steps of the per-token comparison.
    #[arg(long, default_value_t = 128, value_parser = crate::args::at_least_one::<u32>)]
    prompt: u32,
    #[arg(long, default_value_t = 128, value_parser = crate::args::at_least_one::<u32>)]
    steps: u32,
    /// Seconds of each closed-loop requests/s measurement.
    #[arg(long, default_value_t = 10.0, value_parser = crate::args::positive)]
    seconds: f64,
    /// Also write every figure as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

struct Bench {
    c: reqwest::Client,
    url: String,
    admin: String,
    rt: tokio::runtime::Runtime,
}

impl Bench {
    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<(u16, Value)> {
        self.rt.block_on(async {
            let mut r = self.c.request(method, format!("{}{path}", self.url)).bearer_auth(&self.admin);
            if let Some(b) = body {
                r = r.json(&b);
            }
            let resp = r.send().await.with_context(|| format!("{path}: the server did not answer"))?;
            let s = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            Ok((s, serde_json::from_str(&text).unwrap_or(Value::String(text))))
        })
    }
}

/// The live cluster serving the scenario's tenants (presets with seeded weights).
fn cluster_config(scn: &Scenario, names: &[String]) -> Value {
    let tenants: Vec<Value> = scn
        .tenants
        .iter()
        .zip(names)
        .enumerate()
        .map(|(i, (t, name))| {
            json!({
                "name": name, "model": t.model.name, "seed": i + 1,
                "gpus": t.gpus.iter().map(|g| g.0).collect::<Vec<_>>(),
                "engine": {"max_num_seqs": t.engine.max_num_seqs, "max_num_batched_tokens": t.engine.max_batched_tokens},
            })
        })
        .collect();
    json!({
        "devices": format!("cpu:{}", scn.cluster.gpus.len()),
        "policy": "dedicated",
        "gpu_memory_utilization": scn.memory.gpu_memory_utilization,
        "drain_s": 5,
        "tenants": tenants,
    })
}

/// `n` streams of one tenant at once; (decode tokens/s of the batch, outcomes).
fn streams(b: &Bench, route: &Route, n: u32, prompt: u32, steps: u32, salt: u64) -> Result<(f64, Vec<Outcome>)> {
    let outs: Vec<Outcome> = b.rt.block_on(async {
        let t0 = tokio::time::Instant::now();
        let deadline = t0 + Duration::from_secs(600);
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let p = Planned { tenant: 0, arrival: Duration::ZERO, prompt_tokens: prompt, output_tokens: steps + 1 };
                tokio::spawn(load::one(b.c.clone(), b.url.clone(), route.clone(), p, salt + i as u64, t0, deadline))
            })
            .collect();
        let mut outs = Vec::new();
        for t in tasks {
            outs.push(t.await.expect("a stream task"));
        }
        outs
    });
    if let Some(o) = outs.iter().find(|o| !o.finished) {
        bail!("a benchmark stream failed: {:?} {:?}", o.failure, o.message);
    }
    // Decode tokens/s while every stream decodes: from the last first token to the first
    // last token (the streams' prefills, staggered by their arrival, are not decode time).
    let from = outs.iter().filter_map(|o| o.tokens.first()).max().copied().unwrap_or_default();
    let to = outs.iter().filter_map(|o| o.tokens.last()).min().copied().unwrap_or_default();
    let inside: usize = outs.iter().map(|o| o.tokens.iter().filter(|&&t| t > from && t <= to).count()).sum();
    if to <= from || inside == 0 {
        bail!("the {n} streams never decoded at the same time (raise --steps)");
    }
    Ok((inside as f64 / (to - from).as_secs_f64(), outs))
}

/// Closed loop: `clients` per tenant send short requests back to back for `secs`.
fn closed_loop(b: &Bench, routes: &[Route], clients: u32, secs: f64) -> Value {
    let (done, limited, failed, tokens, mut e2e) = b.rt.block_on(async {
        let t0 = tokio::time::Instant::now();
        let stop = t0 + Duration::from_secs_f64(secs);
        let mut tasks = Vec::new();
        for (ti, r) in routes.iter().enumerate() {
            for ci in 0..clients {
                let (c, url, r) = (b.c.clone(), b.url.clone(), r.clone());
                tasks.push(tokio::spawn(async move {
                    let (mut done, mut limited, mut failed, mut tokens, mut e2e) = (0u64, 0u64, 0u64, 0u64, Vec::new());
                    let mut k = 0u64;
                    while tokio::time::Instant::now() < stop {
                        let p = Planned { tenant: 0, arrival: Duration::ZERO, prompt_tokens: 16, output_tokens: 4 };
                        let salt = (ti as u64) << 40 | (ci as u64) << 20 | k;
                        let at = tokio::time::Instant::now();
                        let o =
                            load::one(c.clone(), url.clone(), r.clone(), p, salt, at, stop + Duration::from_secs(30))
                                .await;
                        k += 1;
                        if o.finished {
                            done += 1;
                            tokens += o.tokens.len() as u64;
                            e2e.push(o.tokens.last().map_or(0.0, |l| (*l - o.sent).as_secs_f64() * 1e3));
                        } else if o.status == 429 {
                            limited += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        } else {
                            failed += 1;
                        }
                    }
                    (done, limited, failed, tokens, e2e)
                }));
            }
        }
        let mut acc = (0u64, 0u64, 0u64, 0u64, Vec::new());
        for t in tasks {
            let (d, l, f, tk, e) = t.await.expect("a client task");
            acc.0 += d;
            acc.1 += l;
            acc.2 += f;
            acc.3 += tk;
            acc.4.extend(e);
        }
        acc
    });
    json!({
        "clients_per_tenant": clients, "seconds": secs, "completed": done, "rate_limited": limited, "failed": failed,
        "requests_per_s": done as f64 / secs, "tokens_per_s": tokens as f64 / secs,
        "e2e_ms_p50": slicesched_exec::bench::quantile(&mut e2e, 0.5),
        "e2e_ms_p99": slicesched_exec::bench::quantile(&mut e2e, 0.99),
    })
}

pub fn run(a: Args) -> Result<()> {
    let admin =
        a.admin_token.clone().or_else(|| std::env::var("SLICESCHED_ADMIN_TOKEN").ok()).context(
            "an admin token is needed (--admin-token or SLICESCHED_ADMIN_TOKEN) to start the bench's cluster",
        )?;
    let scn = load::load_scenario(&a.scenario, 1.0, None)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("tokio runtime")?;
    let b = Bench { c: load::server::client()?, url: a.url.trim_end_matches('/').to_string(), admin, rt };
    let tag = format!("bench-live-{}", std::process::id());
    let names: Vec<String> = scn.tenants.iter().map(|t| format!("{tag}-{}", t.name)).collect();
    let mut ids = Vec::new();
    let mut keys = Vec::new();
    let result = (|| {
        for (t, name) in scn.tenants.iter().zip(&names) {
            let sla =
                json!({"ttft_ms": t.sla.ttft_ms, "ttft_ms_per_1k": t.sla.ttft_ms_per_1k, "tpot_ms": t.sla.tpot_ms});
            let (s, v) = b.call(reqwest::Method::POST, "/api/v1/tenants", Some(json!({"name": name, "sla": sla})))?;
            if s != 201 {
                bail!("registering tenant {name}: {s} {v}");
            }
            ids.push(v["tenant"]["id"].as_str().unwrap_or_default().to_string());
            keys.push((t.name.clone(), v["api_key"].as_str().unwrap_or_default().to_string()));
        }
        let (s, v) = b.call(reqwest::Method::POST, "/api/v1/live", Some(cluster_config(&scn, &names)))?;
        match s {
            201 => {}
            409 => bail!("a live cluster is running on {}: stop it (DELETE /api/v1/live) to bench", b.url),
            _ => bail!("starting the bench's live cluster: {s} {v}"),
        }
        measure(&a, &b, &scn, &keys)
    })();
    // Whatever happened: the bench leaves no cluster and no tenant behind.
    let _ = b.call(reqwest::Method::DELETE, "/api/v1/live", None);
    for id in &ids {
        let _ = b.call(reqwest::Method::DELETE, &format!("/api/v1/tenants/{id}"), None);
    }
    let figures = result?;
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_vec_pretty(&figures)?).with_context(|| format!("writing {}", p.display()))?;
        println!("wrote {}", p.display());
    }
    Ok(())
}

fn measure(a: &Args, b: &Bench, scn: &Scenario, keys: &[(String, String)]) -> Result<Value> {
    let probe = load::server::probe(&b.url, scn, keys, Some(&b.admin))?;
    let mut figures = json!({"per_token": [], "sustained": [], "load": null});

    println!("per token: the live path (HTTP, engine, policy, checks, recording) against the executor alone");
    println!(
        "(prompt {} tokens, {} decode steps; one device = one core; live: every stream at once)",
        a.prompt, a.steps
    );
    println!(
        "{:<10} {:>6} {:>16} {:>16} {:>14} {:>14} {:>12}",
        "model", "batch", "exec decode t/s", "live decode t/s", "exec ms/tok", "live ms/tok", "live/exec"
    );
    for (ti, t) in scn.tenants.iter().enumerate() {
        for batch in [1u32, 4] {
            // Interleaved, so both sides see the same contention for the host's cores.
            let (mut execs, mut live) = (Vec::new(), Vec::new());
            for rep in 0..3u64 {
                let backend = CpuBackend::new(&[CpuDeviceSpec { memory_bytes: 8 << 30, cores: 1 }]);
                let shape = (batch as usize, a.prompt as usize, a.steps as usize);
                let e = slicesched_exec::bench::tokens(&backend, &t.model.name, shape)
                    .with_context(|| format!("the executor alone on {}", t.model.name))?;
                execs.push(e.decode_tok_s);
                drop(backend);
                live.push(streams(b, &probe.routes[ti], batch, a.prompt, a.steps, rep * 100)?.0);
            }
            execs.sort_by(f64::total_cmp);
            live.sort_by(f64::total_cmp);
            let (exec_tok_s, live_tok_s) = (execs[1], live[1]);
            // Time per generated token, per sequence: what a client waits for.
            let (e_ms, l_ms) = (1e3 * batch as f64 / exec_tok_s, 1e3 * batch as f64 / live_tok_s);
            println!(
                "{:<10} {:>6} {:>16.1} {:>16.1} {:>14.2} {:>14.2} {:>11.2}×",
                t.model.name,
                batch,
                exec_tok_s,
                live_tok_s,
                e_ms,
                l_ms,
                l_ms / e_ms
            );
            figures["per_token"].as_array_mut().expect("array").push(json!({
                "model": t.model.name, "batch": batch, "prompt": a.prompt, "steps": a.steps,
                "exec_decode_tok_s": exec_tok_s, "exec_decode_tok_s_runs": execs, "live_decode_tok_s": live_tok_s,
                "live_decode_tok_s_runs": live, "live_over_exec_time_per_token": l_ms / e_ms,
            }));
        }
    }

    println!(
        "\nsustained: closed loop, both tenants at once (16-token prompts, 4 output tokens), {} s each",
        a.seconds
    );
    println!(
        "{:>16} {:>10} {:>10} {:>8} {:>8} {:>12} {:>12}",
        "clients/tenant", "req/s", "tok/s", "done", "429", "e2e p50 ms", "e2e p99 ms"
    );
    for clients in [1u32, 4, 16] {
        let v = closed_loop(b, &probe.routes, clients, a.seconds);
        let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        let u = |k: &str| v[k].as_u64().unwrap_or(0);
        println!(
            "{:>16} {:>10.1} {:>10.1} {:>8} {:>8} {:>12.1} {:>12.1}",
            clients,
            f("requests_per_s"),
            f("tokens_per_s"),
            u("completed"),
            u("rate_limited"),
            f("e2e_ms_p50"),
            f("e2e_ms_p99")
        );
        figures["sustained"].as_array_mut().expect("array").push(v);
    }

    println!("\nslicesched load on {} (measured against a replay under the same policy):", scn.spec.name);
    let plan = load::plan(scn);
    let (outs, wall_s) = load::send(&b.url, &probe.routes, &plan, scn.spec.drain_s, &indicatif::ProgressBar::hidden())?;
    let measured = report::records(scn, &plan, &outs);
    let window_s = plan.last().map_or(1e-3, |p| p.arrival.as_secs_f64().max(1e-3));
    let (predicted, cost) = load::replay_same_load(scn, "dedicated", None)?;
    let c = report::compare(scn, &measured, &predicted, window_s, "dedicated", &cost);
    let names: Vec<String> = scn.tenants.iter().map(|t| t.name.clone()).collect();
    print!("{}", report::compare_table(&c, &names));
    println!("({} requests in {:.1} s wall)", plan.len(), wall_s);
    figures["load"] = c;
    Ok(figures)
}
