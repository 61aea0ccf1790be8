//! `slicesched plugin bench`: what running a policy as a sandboxed plugin costs, Wasm
//! against native (the same source): the bare call, each policy's decisions inside a
//! real replay, and the whole replay's wall time. Also checks that both give the same
//! summary.

use anyhow::{bail, Context, Result};
use slicesched_hw::Cluster;
use slicesched_plugin_host::{PluginOptions, WasmPolicy};
use slicesched_policy::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};
use slicesched_sim::{ReplayOptions, Scenario};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Scenario to replay.
    #[arg(long, default_value = "scenarios/azure-code-4t.toml")]
    scenario: PathBuf,
    /// Shipped policies to measure (default: all).
    #[arg(long)]
    policy: Vec<String>,
    /// Replay only the first this many seconds of the scenario's traces.
    #[arg(long, value_parser = crate::args::positive)]
    duration_s: Option<f64>,
    /// Calls for the bare-call measurement.
    #[arg(long, default_value_t = 200_000, value_parser = crate::args::at_least_one::<u32>)]
    calls: u32,
    /// Another component of the (single) policy measured in the same run, on its own
    /// row: an older build, or one built for an older interface version.
    #[arg(long, value_name = "PATH.wasm")]
    also: Option<PathBuf>,
}

/// Times a policy's `place` calls (admit and route pass through untimed).
struct Timed<'a> {
    inner: &'a mut dyn Policy,
    calls: u64,
    spent: Duration,
}

impl Policy for Timed<'_> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        let t = Instant::now();
        self.inner.place(view, ready, out);
        self.spent += t.elapsed();
        self.calls += 1;
    }
    fn reads_view(&self) -> bool {
        self.inner.reads_view()
    }
    fn context_switch_ns(&self) -> u64 {
        self.inner.context_switch_ns()
    }
    fn spatial_sharing(&self) -> bool {
        self.inner.spatial_sharing()
    }
    fn replicas(&self) -> ReplicaMode {
        self.inner.replicas()
    }
    fn admit(&mut self, view: &View<'_>, inst: &InstanceView) -> bool {
        self.inner.admit(view, inst)
    }
    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        self.inner.route(view, instances)
    }
}

struct Run {
    wall_s: f64,
    decisions: u64,
    policy_s: f64,
    summary: serde_json::Value,
    op_rate: f64,
}

fn run_one(scn: &Scenario, pol: &mut dyn Policy) -> Result<Run> {
    let mut timed = Timed { inner: pol, calls: 0, spent: Duration::ZERO };
    let r = crate::policies::replay_with(scn, &mut timed, ReplayOptions::default(), &mut |_| {})?;
    let mut summary = serde_json::to_value(&r.summary)?;
    summary.as_object_mut().map(|o| o.remove("timing"));
    Ok(Run {
        wall_s: r.summary.timing.sim_wall_s,
        decisions: timed.calls,
        policy_s: timed.spent.as_secs_f64(),
        summary,
        op_rate: r.summary.op_events as f64 / r.summary.duration_s.max(1e-9),
    })
}

fn wasm(name: &str) -> Result<WasmPolicy> {
    let path = crate::policies::plugin_dir().join(format!("{name}.wasm"));
    let bytes = std::fs::read(&path)
        .with_context(|| format!("reading {} (build it: slicesched plugin build plugins/{name})", path.display()))?;
    Ok(WasmPolicy::new(&bytes, &PluginOptions::default())?)
}

/// Mean ns of a `place` call with an empty view and batch: the crossing alone.
fn bare_call(pol: &mut dyn Policy, calls: u32) -> f64 {
    let cluster = Cluster::uniform("A100-80GB", 1).expect("a catalog GPU");
    let deployment = Default::default();
    let view = View {
        now_ns: 0,
        cluster: &cluster,
        deployment: &deployment,
        gpu_busy_until: &[],
        gpu_queued_ns: &[],
        gpu_owner_need_ns: &[],
        tenants: &[],
        instances: &[],
        group_links: &[],
        epoch: slicesched_policy::new_epoch(),
        what_if: Default::default(),
    };
    let mut out = Vec::new();
    let t = Instant::now();
    for _ in 0..calls {
        out.clear();
        pol.place(&view, &[], &mut out);
    }
    t.elapsed().as_nanos() as f64 / calls as f64
}

fn load_scenario(path: &std::path::Path, duration_s: Option<f64>) -> Result<Scenario> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut spec: slicesched_sim::ScenarioSpec =
        toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
    if duration_s.is_some() {
        spec.duration_s = duration_s;
    }
    let base = path.parent().unwrap_or(std::path::Path::new("."));
    Ok(Scenario::from_spec(spec, path, base)?)
}

pub fn run(a: Args) -> Result<()> {
    let mut template = wasm("template")?;
    let wasm_ns = bare_call(&mut template, a.calls);
    let mut native = slicesched_policy::Native::new(slicesched_plugin_template::Template);
    let native_ns = bare_call(&mut native, a.calls);
    let fuel = template.stats().fuel_used / template.stats().calls.max(1);
    println!(
        "bare call (template plugin, empty view and batch): wasm {wasm_ns:.0} ns ({fuel} fuel), native {native_ns:.0} ns"
    );

    let scn = load_scenario(&a.scenario, a.duration_s)?;
    let policies = crate::policies::resolve(&a.policy)?;
    println!(
        "{:<16} {:>10} {:>12} {:>12} {:>10} {:>10} {:>7} {:>13} {:>11} {:>9} {:>9} {:>9}",
        "policy",
        "decisions",
        "native µs/d",
        "wasm µs/d",
        "native s",
        "wasm s",
        "ratio",
        "wasm dec/s",
        "ops/sim s",
        "identical",
        "max fuel",
        "mean fuel"
    );
    if a.also.is_some() && policies.len() != 1 {
        bail!("--also compares another component of one policy: name exactly one --policy");
    }
    let mut differ = Vec::new();
    for name in &policies {
        let mut n = slicesched_policy::builtin(name).context("a shipped policy")?;
        let nr = run_one(&scn, n.as_mut())?;
        let mut w = wasm(name)?;
        let label = format!("{name}@{}", w.interface_version());
        row(&label, &nr, &mut w, &scn, &mut differ)?;
        if let Some(path) = &a.also {
            let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let mut w = WasmPolicy::new(&bytes, &PluginOptions::default())?;
            let label = format!("{name}@{}", w.interface_version());
            row(&label, &nr, &mut w, &scn, &mut differ)?;
        }
    }
    if !differ.is_empty() {
        bail!("native and Wasm replays differ for: {}", differ.join(", "));
    }
    Ok(())
}

/// Replays `w` and prints its row against the native run `nr`.
fn row(name: &str, nr: &Run, w: &mut WasmPolicy, scn: &Scenario, differ: &mut Vec<String>) -> Result<()> {
    let wr = run_one(scn, w)?;
    let same = nr.summary == wr.summary;
    if !same {
        differ.push(name.to_string());
    }
    println!(
        "{:<16} {:>10} {:>12.2} {:>12.2} {:>10.2} {:>10.2} {:>7.2} {:>13.0} {:>11.0} {:>9} {:>9} {:>9.0}",
        name,
        wr.decisions,
        nr.policy_s * 1e6 / nr.decisions.max(1) as f64,
        wr.policy_s * 1e6 / wr.decisions.max(1) as f64,
        nr.wall_s,
        wr.wall_s,
        wr.wall_s / nr.wall_s.max(1e-9),
        wr.decisions as f64 / wr.policy_s.max(1e-9),
        wr.op_rate,
        if same { "yes" } else { "NO" },
        w.stats().max_fuel,
        w.stats().fuel_used as f64 / w.stats().calls.max(1) as f64
    );
    println!(
        "           {} admit/route calls besides the decisions (each lowers every instance)",
        w.stats().calls.saturating_sub(wr.decisions)
    );
    if w.stats().failures > 0 {
        bail!("plugin `{name}` failed {} times: {:?}", w.stats().failures, w.stats().errors);
    }
    Ok(())
}
