//! Where each GPU's time went over a window of a replay: busy milliseconds per tenant,
//! its own ops and those borrowed in, and each tenant's iterations by where they ran.
//!
//! `cargo run --release -p slicesched-sim --example ops -- SCENARIO SCALE DURATION_S POLICY FROM_S TO_S`
//! (POLICY: a built-in name, e.g. `slice`; the run is planned as `slicesched replay` plans it)

use slicesched_cost::CostModel;
use slicesched_sim::{plan, replay, OpWindow, ReplayOptions, Scenario};
use std::collections::BTreeMap;
use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [path, scale, dur, policy, from, to] = a.as_slice() else {
        return Err("usage: ops SCENARIO SCALE DURATION_S POLICY FROM_S TO_S".into());
    };
    let scn = Scenario::from_file_for(std::path::Path::new(path), Some(dur.parse()?))?.with_rate_scale(scale.parse()?);
    let mut pol = slicesched_policy::builtin(policy).ok_or(format!("no built-in policy {policy}"))?;
    let planned = plan(&scn, pol.replicas())?;
    let ns = |s: &str| -> Result<u64, Box<dyn std::error::Error>> { Ok((s.parse::<f64>()? * 1e9) as u64) };
    let window = OpWindow { from_ns: ns(from)?, to_ns: ns(to)?, max_ops: 50_000_000, every_ns: 0 };
    let opts = ReplayOptions { record_ops: Some(window), ..ReplayOptions::default() };
    let r = replay(&planned, pol.as_mut(), CostModel::default_a100(), opts, &mut |_| {});
    let name = |t: u32| planned.tenants[t as usize].name.clone();
    // (gpu, tenant, borrowed) -> busy ns, ops
    let mut busy: BTreeMap<(u32, u32, bool), (u64, u64)> = BTreeMap::new();
    // (tenant, set of gpus its iteration touched) -> iterations
    let mut iters: BTreeMap<u64, (u32, Vec<u32>)> = BTreeMap::new();
    for o in &r.ops {
        let e = busy.entry((o.gpu, o.tenant, o.borrowed)).or_default();
        e.0 += o.end_ns - o.start_ns;
        e.1 += 1;
        let it = iters.entry(o.iteration).or_insert((o.tenant, Vec::new()));
        if !it.1.contains(&o.gpu) {
            it.1.push(o.gpu);
        }
    }
    let mut out = std::io::stdout().lock();
    for h in &planned.deployment.homes {
        let g: Vec<u32> = planned.deployment.group(h.group).gpus.iter().map(|g| g.0).collect();
        writeln!(
            out,
            "{:<22} home {:<5} serves {:<5} gpus {g:?} layers {:?}",
            name(h.tenant.0),
            h.is_home,
            h.serves,
            h.layers
        )?;
    }
    writeln!(out, "{} ops recorded in [{from}, {to}) s", r.ops.len())?;
    writeln!(out, "gpu  tenant                  borrowed   busy ms      ops")?;
    for ((g, t, b), (n, k)) in &busy {
        writeln!(out, "{g:>3}  {:<22} {:>9} {:>9.1} {k:>8}", name(*t), b, *n as f64 / 1e6)?;
    }
    let mut by: BTreeMap<(u32, Vec<u32>), u64> = BTreeMap::new();
    for (t, mut g) in iters.into_values() {
        g.sort();
        *by.entry((t, g)).or_default() += 1;
    }
    writeln!(out, "\ntenant                  gpus of an iteration   iterations")?;
    for ((t, g), n) in by {
        writeln!(out, "{:<22} {:<22} {n:>10}", name(t), format!("{g:?}"))?;
    }
    writeln!(out, "\nviolation rate {:.2}%", r.summary.violation_rate * 100.0)?;
    Ok(())
}
