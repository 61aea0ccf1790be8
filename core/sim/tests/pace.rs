//! Decode pacing (`pace.rs`): an owner's decode-only steps keep to half its TPOT target
//! while another tenant uses its GPUs, and nothing changes where no one can.

mod common;
use common::*;
use slicesched_policy::ReplicaMode;
use slicesched_sim::{plan, replay, ReplayOptions, ReplayResult, Scenario};

/// `a` bursts onto its GPU and gets a serving copy on `b`'s; `b` decodes steadily.
const TEXT: &str = r#"
name = "pace"
seed = 7
duration_s = 120
drain_s = 120
[cluster]
[[cluster.nodes]]
gpu = "H100-80GB"
gpus = 2
[[tenants]]
name = "a"
model = "llama-3-8b"
gpus = [0]
sla = { ttft_ms = 500, ttft_ms_per_1k = 150, tpot_ms = 60 }
trace = { kind = "onoff", rate_on = 40.0, rate_off = 0.2, mean_on_s = 20.0, mean_off_s = 40.0, prompt = { dist = "uniform", min = 1000, max = 6000 }, output = { dist = "uniform", min = 20, max = 300 } }
[[tenants]]
name = "b"
model = "mistral-7b"
gpus = [1]
sla = { ttft_ms = 500, ttft_ms_per_1k = 150, tpot_ms = 60 }
trace = { kind = "poisson", rate = 1.0, prompt = { dist = "uniform", min = 100, max = 800 }, output = { dist = "uniform", min = 100, max = 400 } }
"#;

fn run_policy(scn: &Scenario, policy: &str, decode_pacing: bool) -> ReplayResult {
    let mut p = slicesched_policy::builtin(policy).expect("built-in");
    let opts = ReplayOptions { decode_pacing, ..checked() };
    replay(scn, p.as_mut(), slicesched_cost::CostModel::default_a100(), opts, &mut |_| {})
}

fn tpot_p50(r: &ReplayResult, tenant: usize) -> f64 {
    r.summary.tenants[tenant].tpot_p50_ms
}

#[test]
fn an_owner_paces_its_decodes_while_a_guest_serves_on_its_gpu() {
    for (policy, mode) in [("pooled", ReplicaMode::Serving), ("slice", ReplicaMode::Both)] {
        let scn = plan(&scenario(TEXT), mode).unwrap();
        assert!(scn.deployment.replicas(slicesched_gmg::TenantId(0)).next().is_some(), "{policy}: `a` has a copy");
        let on = run_policy(&scn, policy, true);
        let off = run_policy(&scn, policy, false);
        for r in [&on, &off] {
            assert_eq!(r.dependency_violations, 0);
            assert!(r.summary.gpus.iter().all(|g| g.oom_events == 0), "{policy}");
            assert!(
                r.records.iter().all(|x| x.finish_ns.is_some() || x.dropped.is_some()),
                "{policy}: every request ends"
            );
        }
        let paced = on.summary.scheduling.paced_decode_steps;
        assert!(paced > 0, "{policy}: no step was paced");
        assert_eq!(off.summary.scheduling.paced_decode_steps, 0);
        // `b`'s steps wait for their turn, up to half its 60 ms target: slower than
        // back to back, inside the target.
        let (b_on, b_off) = (tpot_p50(&on, 1), tpot_p50(&off, 1));
        assert!(b_on > b_off && b_on < 60.0 * 0.75, "{policy}: b's TPOT p50 {b_off:.1} -> {b_on:.1} ms");
        // Deterministic like every replay.
        let again = run_policy(&scn, policy, true);
        assert_eq!(format!("{:?}", again.records), format!("{:?}", on.records), "{policy}");
    }
}

#[test]
fn without_copies_nothing_is_paced_and_nothing_changes() {
    let scn = scenario(TEXT);
    let on = run_policy(&scn, "dedicated", true);
    let off = run_policy(&scn, "dedicated", false);
    assert_eq!(on.summary.scheduling.paced_decode_steps, 0);
    assert_eq!(format!("{:?}", on.records), format!("{:?}", off.records));
}
