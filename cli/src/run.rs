//! `slicesched run`: the replay loop (engines, GMG, policy, core checks, memory ledger)
//! with every op executed for real on the executor's backend; the simulator's clock
//! advances by the measured op times. Writes replay's files plus `ops.csv` (per-op
//! predicted and actual) and an `executor` section in `summary.json`; with
//! `--compare-replay`, also `fidelity.json`: a pure replay under the same cost model
//! set against what ran.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use slicesched_cost::CostModel;
use slicesched_exec::cuda::CudaBackend;
use slicesched_exec::drive::{Driver, ExecRecord};
use slicesched_exec::{bench, Backend, CpuBackend, CpuDeviceSpec};
use slicesched_model::OpKind;
use slicesched_sim::{ReplayOptions, ReplayResult, RequestRecord, Scenario};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Scenario TOML file.
    #[arg(long)]
    scenario: PathBuf,
    /// Policy: a shipped name (its Wasm build when built), `native:NAME`, or a .wasm plugin.
    #[arg(long, default_value = "dedicated")]
    policy: String,
    /// Executor backend: cpu, or cuda (the scenario's GPUs are this machine's GPUs 0..n).
    #[arg(long, default_value = "cpu")]
    executor: String,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Fit the cost model on this profile folder (from `slicesched profile`) instead of
    /// the built-in A100 profiles.
    #[arg(long)]
    cost_profile: Option<PathBuf>,
    /// Keep the cost model's predictions as fitted (no online correction).
    #[arg(long)]
    no_correction: bool,
    /// Also replay the scenario under the same cost model and compare (fidelity.json).
    #[arg(long)]
    compare_replay: bool,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// How `run` keeps time, for `summary.json`.
const CLOCK: &str = "Each op runs on the executor when the simulator starts it, alone on the host, and its \
measured duration becomes its duration on the simulated timeline, where ops of different devices and streams \
overlap as they would on separate devices. Not the wall clock: the simulator's loop takes an op's duration when \
it starts it (OpExecutor::run_op), so overlapping real execution needs an asynchronous seam (launch at start, \
OpDone at the real completion); and on a host with fewer free cores than devices, concurrent streams would \
measure contention for the host's cores, not the devices being modelled.";

pub(crate) fn cost_model(scn: &Scenario, profile: Option<&Path>) -> Result<CostModel> {
    match profile {
        None => Ok(CostModel::default_a100().clone()),
        Some(dir) => CostModel::fit_dir(dir, &scn.cluster.gpus[0].sku)
            .with_context(|| format!("fitting the cost model on {}", dir.display())),
    }
}

fn ttft_tpot(r: &RequestRecord) -> (Option<f64>, Option<f64>) {
    let ttft = r.first_token_ns.map(|f| (f - r.arrival_ns) as f64);
    let tpot = match (r.first_token_ns, r.finish_ns) {
        (Some(f), Some(e)) if r.output_tokens > 1 => Some((e - f) as f64 / (r.output_tokens - 1) as f64),
        _ => None,
    };
    (ttft, tpot)
}

/// Median and p90 of relative errors |pred − actual| / actual.
fn errors(pairs: impl Iterator<Item = (f64, f64)>) -> serde_json::Value {
    let mut e: Vec<f64> = pairs.filter(|(_, a)| *a > 0.0).map(|(p, a)| (p - a).abs() / a).collect();
    let n = e.len();
    serde_json::json!({"n": n, "median": bench::quantile(&mut e, 0.5), "p90": bench::quantile(&mut e, 0.9)})
}

/// Each op against the median of its own shape in this run — (that median, its time) —
/// for the shapes that ran at least [`FLOOR_MIN_RUNS`] times: the error a predictor
/// that knew every shape's time on this host exactly would still make, op by op. What
/// the cost model cannot do better than, on a host whose ops vary this much between
/// runs of one shape. Attention is left out: its time follows the KV length, which
/// `ops.csv` does not key it by.
fn noise_floor(ops: &[ExecRecord]) -> Vec<(f64, f64)> {
    let mut shapes: std::collections::BTreeMap<_, Vec<f64>> = std::collections::BTreeMap::new();
    for o in ops.iter().filter(|o| o.kind != OpKind::Attention && o.actual_ns > 0) {
        shapes.entry((o.tenant, o.kind, o.tokens, o.group)).or_default().push(o.actual_ns as f64);
    }
    let mut out = Vec::new();
    for mut times in shapes.into_values().filter(|v| v.len() >= FLOOR_MIN_RUNS) {
        let median = bench::quantile(&mut times, 0.5);
        out.extend(times.iter().map(|&t| (median, t)));
    }
    out
}

const FLOOR_MIN_RUNS: usize = 3;

fn fidelity(ran: &ReplayResult, sim: &ReplayResult, ops: &[ExecRecord]) -> serde_json::Value {
    let mut per_op = serde_json::Map::new();
    let mut kinds: Vec<_> = ops.iter().map(|o| o.kind).collect();
    kinds.sort();
    kinds.dedup();
    for k in kinds {
        let v = errors(ops.iter().filter(|o| o.kind == k).map(|o| (o.model_ns as f64, o.actual_ns as f64)));
        per_op.insert(k.name().into(), v);
    }
    let pairs: Vec<_> = ran.records.iter().zip(&sim.records).map(|(a, s)| (ttft_tpot(a), ttft_tpot(s))).collect();
    let ms = |v: Option<f64>| v.map(|v| (v / 1e3).round() / 1e3);
    let requests: Vec<_> = ran
        .records
        .iter()
        .zip(&sim.records)
        .zip(&pairs)
        .map(|((r, _), ((ta, pa), (ts, ps)))| {
            serde_json::json!({"id": r.id, "ttft_ms_run": ms(*ta), "ttft_ms_replay": ms(*ts), "tpot_ms_run": ms(*pa), "tpot_ms_replay": ms(*ps)})
        })
        .collect();
    serde_json::json!({
        "requests": requests,
        "op": errors(ops.iter().map(|o| (o.model_ns as f64, o.actual_ns as f64))),
        "op_online": errors(ops.iter().map(|o| (o.predicted_ns as f64, o.actual_ns as f64))),
        "op_noise_floor": errors(noise_floor(ops).into_iter()),
        "op_by_kind": per_op,
        "ttft": errors(pairs.iter().filter_map(|((a, _), (s, _))| Some(((*s)?, (*a)?)))),
        "tpot": errors(pairs.iter().filter_map(|((_, a), (_, s))| Some(((*s)?, (*a)?)))),
    })
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

fn ops_csv(ops: &[ExecRecord]) -> String {
    let mut s = String::from(
        "serial,tenant,op,layer,group,tokens,model_us,predicted_us,actual_us,overhead_us,copy_bytes,home,wall_us\n",
    );
    for o in ops {
        s += &format!(
            "{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{},{:.3}\n",
            o.serial,
            o.tenant,
            o.kind.name(),
            o.layer.map(|l| l.to_string()).unwrap_or_default(),
            o.group,
            o.tokens,
            o.model_ns as f64 / 1e3,
            o.predicted_ns as f64 / 1e3,
            o.actual_ns as f64 / 1e3,
            o.overhead_ns as f64 / 1e3,
            o.copy_bytes,
            o.home as u8,
            o.wall_ns as f64 / 1e3
        );
    }
    s
}

/// The first requests' TTFT and TPOT, run against replay (all in fidelity.json).
fn print_requests(out: &mut impl Write, reqs: &serde_json::Value) -> Result<()> {
    const SHOWN: usize = 12;
    let Some(reqs) = reqs.as_array() else { return Ok(()) };
    let ms = |v: &serde_json::Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.2}"));
    writeln!(
        out,
        "  per request (ms): {:>6} {:>10} {:>10} {:>9} {:>9}",
        "id", "ttft run", "replay", "tpot run", "replay"
    )?;
    for r in reqs.iter().take(SHOWN) {
        writeln!(
            out,
            "                    {:>6} {:>10} {:>10} {:>9} {:>9}",
            r["id"].to_string(),
            ms(&r["ttft_ms_run"]),
            ms(&r["ttft_ms_replay"]),
            ms(&r["tpot_ms_run"]),
            ms(&r["tpot_ms_replay"])
        )?;
    }
    if reqs.len() > SHOWN {
        writeln!(out, "                    ... {} more in fidelity.json", reqs.len() - SHOWN)?;
    }
    Ok(())
}

pub fn run(a: Args) -> Result<()> {
    match a.executor.as_str() {
        "cpu" => {}
        // Fail before planning: without a driver or its libraries this is one line.
        "cuda" => slicesched_exec::cuda::require_libraries().map_err(|e| anyhow::anyhow!("--executor cuda: {e}"))?,
        e => bail!("unknown executor `{e}` (known: cpu, cuda)"),
    }
    let scenario =
        Scenario::from_file(&a.scenario).with_context(|| format!("loading scenario {}", a.scenario.display()))?;
    let cost = cost_model(&scenario, a.cost_profile.as_deref())?;
    let mut pol = crate::policies::by_name(&a.policy)?;
    // Loads are priced, and the planner's candidate plans replayed (`choose_plan`), by
    // the model the run predicts with: on a profiled device a tiny model's load is heavy
    // where the A100's figures would call it idle.
    let mut make = || crate::policies::by_name(&a.policy).map_err(|e| format!("{e:#}"));
    let t0 = std::time::Instant::now();
    let (planned, plan_choice) =
        slicesched_sim::choose_plan(&scenario, pol.replicas(), &cost, &ReplayOptions::default(), &mut make)
            .context("planning replicas")?;
    let whatif_s = t0.elapsed().as_secs_f64();
    let specs: Vec<CpuDeviceSpec> =
        planned.cluster.gpus.iter().map(|g| CpuDeviceSpec { memory_bytes: g.sku.memory, cores: 1 }).collect();
    // The scenario's GPUs are the backend's devices in order: cpu:i, or the GPU of
    // ordinal i.
    let backend: Box<dyn Backend> = match a.executor.as_str() {
        "cuda" => Box::new(
            CudaBackend::try_new(&(0..specs.len()).collect::<Vec<_>>())
                .map_err(|e| anyhow::anyhow!("--executor cuda: {e}"))?,
        ),
        _ => Box::new(CpuBackend::new(&specs)),
    };
    let mut driver =
        Driver::new(backend.as_ref(), &planned, a.seed).context("loading the tenants onto the executor")?;
    driver.correct = !a.no_correction;
    let bar = if a.quiet { ProgressBar::hidden() } else { ProgressBar::new(1000) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {msg}").expect("static template"),
    );
    let opts = ReplayOptions { progress_every: 2000, ..ReplayOptions::default() };
    let started = std::time::Instant::now();
    let mut result =
        slicesched_sim::replay_with(&planned, pol.as_mut(), &cost, opts.clone(), Some(&mut driver), &mut |p| {
            bar.set_position(1000 * p.sim_ns.min(p.horizon_ns) / p.horizon_ns.max(1));
            bar.set_message(format!(
                "{:.1} s run, {}/{} requests done",
                p.sim_ns as f64 / 1e9,
                p.completed,
                p.requests
            ));
        });
    bar.finish_and_clear();
    let wall = started.elapsed().as_secs_f64();
    result.summary.timing.sim_wall_s = wall;
    result.summary.timing.op_events_per_s = result.summary.op_events as f64 / wall.max(1e-9);
    (result.summary.plan, result.summary.timing.plan_whatif_s) = (plan_choice, whatif_s);

    let names: Vec<String> = planned.tenants.iter().map(|t| t.name.clone()).collect();
    let mut files = slicesched_report::write_replay(&a.out, &result, &names).context("writing the report")?;
    let exec = driver.summary();
    let summary_path = a.out.join("summary.json");
    let mut summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary_path)?)?;
    summary["executor"] = serde_json::to_value(&exec)?;
    summary["clock"] = serde_json::json!({
        "kind": "measured op times on the simulated timeline",
        "why": CLOCK,
        "wall_s": wall,
        "simulated_s": result.summary.duration_s,
        "kernel_s": exec.kernel_s,
    });
    write_atomic(&summary_path, &serde_json::to_vec_pretty(&summary)?)?;
    let ops_path = a.out.join("ops.csv");
    write_atomic(&ops_path, ops_csv(&driver.records).as_bytes())?;
    files.push(ops_path);
    let mut out = std::io::stdout().lock();
    write!(out, "{}", slicesched_report::summary_table(&result.summary))?;
    writeln!(
        out,
        "executor: {} ops on {} devices, {:.2} s of kernels, {:.1} µs launch overhead per op, {:.1} MB copied; {:.1} s wall",
        exec.ops,
        exec.devices.len(),
        exec.kernel_s,
        exec.launch_overhead_us_mean,
        exec.bytes_copied as f64 / 1e6,
        wall
    )?;
    if a.compare_replay {
        let mut pol = crate::policies::by_name(&a.policy)?;
        let sim = slicesched_sim::replay(&planned, pol.as_mut(), &cost, opts, &mut |_| {});
        let f = fidelity(&result, &sim, &driver.records);
        let p = a.out.join("fidelity.json");
        write_atomic(&p, &serde_json::to_vec_pretty(&f)?)?;
        files.push(p);
        let pct = |v: &serde_json::Value| format!("{:.1}%", v.as_f64().unwrap_or(f64::NAN) * 100.0);
        writeln!(out, "fidelity (replay under the same cost model vs run): median / p90 relative error")?;
        for (k, label) in [
            ("op", "op"),
            ("op_online", "op, as the what-if saw it (online correction)"),
            ("op_noise_floor", "op, its shape's median in this run (host noise)"),
            ("ttft", "ttft"),
            ("tpot", "tpot"),
        ] {
            let (m, p) = (pct(&f[k]["median"]), pct(&f[k]["p90"]));
            writeln!(out, "  {label:<48} {m:>7} / {p:>7}  (n = {})", f[k]["n"])?;
        }
        if let Some(kinds) = f["op_by_kind"].as_object() {
            writeln!(out, "  by op (model vs measured):")?;
            for (k, v) in kinds {
                writeln!(out, "    {k:<18} {:>7} / {:>7}  (n = {})", pct(&v["median"]), pct(&v["p90"]), v["n"])?;
            }
        }
        print_requests(&mut out, &f["requests"])?;
    }
    for f in files {
        writeln!(out, "wrote {}", f.display())?;
    }
    if !exec.errors.is_empty() {
        bail!("the executor failed on {} ops, first: {}", exec.errors.len(), exec.errors[0]);
    }
    if result.summary.oom_events > 0 {
        bail!("{} OOM events: the memory-safety invariant was broken", result.summary.oom_events);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: OpKind, tokens: u64, actual_ns: u64) -> ExecRecord {
        ExecRecord {
            serial: 0,
            tenant: 0,
            kind,
            layer: None,
            group: 0,
            home: true,
            tokens,
            model_ns: 0,
            predicted_ns: 0,
            actual_ns,
            wall_ns: actual_ns,
            overhead_ns: 0,
            copy_bytes: 0,
        }
    }

    #[test]
    fn the_noise_floor_sets_each_op_against_its_own_shapes_median() {
        let ops = [
            op(OpKind::QkvProj, 4, 10),
            op(OpKind::QkvProj, 4, 12),
            op(OpKind::QkvProj, 4, 11),
            // Too few runs of its shape to have a median worth the name.
            op(OpKind::QkvProj, 8, 30),
            op(OpKind::QkvProj, 8, 90),
            // Keyed by KV length, which the record lacks.
            op(OpKind::Attention, 4, 10),
            op(OpKind::Attention, 4, 20),
            op(OpKind::Attention, 4, 40),
        ];
        let mut floor = noise_floor(&ops);
        floor.sort_by(|a, b| a.1.total_cmp(&b.1));
        assert_eq!(floor, vec![(11.0, 10.0), (11.0, 11.0), (11.0, 12.0)]);
    }
}
