//! A live loop serves for as long as its caller lets it: what it holds per request must
//! follow what is in service, not how many requests it has served, and retiring what
//! ended must not change a figure beyond the sketches' 0.1%.

mod common;
use common::*;
use slicesched_sim::{LiveSim, ReplayOptions, RequestStats, Scenario};

const SCENARIO: &str = r#"
name = "live-bound"
seed = 3
duration_s = 1
[cluster]
[[cluster.nodes]]
gpu = "A100-80GB"
gpus = 2
[[tenants]]
name = "chat"
model = "llama-2-7b"
gpus = [0]
sla = { ttft_ms = 200, tpot_ms = 40 }
trace = { kind = "poisson", rate = 1.0 }
[[tenants]]
name = "code"
model = "mistral-7b"
gpus = [1]
sla = { ttft_ms = 200, tpot_ms = 40 }
trace = { kind = "poisson", rate = 1.0 }
"#;

const REQUESTS: u64 = 6_000;
/// One arrival every 20 ms, alternating tenants (25 requests/s each, within what one
/// A100 serves: the queues stay short).
const GAP_NS: u64 = 20_000_000;

/// A live loop over `scn` under `policy`, priced by the A100 model, no executor.
fn live<'a>(scn: &'a Scenario, policy: &'a mut dyn slicesched_policy::Policy) -> LiveSim<'a> {
    LiveSim::new(scn, policy, slicesched_cost::CostModel::default_a100(), ReplayOptions::default(), None)
}

/// Serves the same arrivals, retiring what ended every simulated second when `retire`;
/// returns the most records and engine sequences held at once, and the loop.
fn serve<'a>(
    scn: &'a Scenario,
    policy: &'a mut dyn slicesched_policy::Policy,
    retire: bool,
) -> ((usize, usize), LiveSim<'a>) {
    let mut sim = live(scn, policy);
    let mut most = (0, 0);
    for k in 0..REQUESTS {
        let t = k * GAP_NS;
        sim.advance(t, u64::MAX);
        // Lengths that vary, so requests end out of arrival order.
        let (prompt, output) = (64 + (k * 37 % 300) as u32, 1 + (k * 13 % 120) as u32);
        sim.arrive((k % 2) as u32, prompt, output).expect("fits");
        if retire && t.is_multiple_of(1_000_000_000) {
            sim.retire(|_| false);
        }
        let (r, s) = sim.held();
        most = (most.0.max(r), most.1.max(s));
    }
    let mut t = REQUESTS * GAP_NS;
    while sim.busy() {
        t += 100_000_000;
        sim.advance(t, u64::MAX);
    }
    if retire {
        sim.retire(|_| false);
    }
    (most, sim)
}

#[test]
fn a_live_loop_holds_what_is_in_service_and_still_counts_every_request() {
    let scn = scenario(SCENARIO);
    let (mut p1, mut p2) =
        (slicesched_policy::builtin("dedicated").unwrap(), slicesched_policy::builtin("dedicated").unwrap());
    let (most, retiring) = serve(&scn, p1.as_mut(), true);
    let (all, keeping) = serve(&scn, p2.as_mut(), false);
    // 50 arrivals a second, retired each second: what arrived over the last second and
    // over the oldest open request's life (a few seconds), never the 6,000.
    assert!(most.0 < 400 && most.1 < 400, "held at most {most:?} of {REQUESTS}");
    assert_eq!(retiring.held(), (0, 0), "everything ended and retired");
    assert_eq!(all.0 as u64, REQUESTS, "without retiring, every record stays");

    let (a, b) = (retiring.summary(), keeping.summary());
    assert_eq!((a.requests, a.completed, a.dropped), (REQUESTS, REQUESTS, 0));
    assert_eq!(
        (a.requests, a.completed, a.dropped, a.violation_rate),
        (b.requests, b.completed, b.dropped, b.violation_rate)
    );
    assert_eq!(retiring.counts(), keeping.counts());
    // Both read latency off the same sketches: the same figures, retired or held.
    assert_eq!((a.ttft_p50_ms, a.ttft_p99_ms, a.tpot_p90_ms), (b.ttft_p50_ms, b.ttft_p99_ms, b.tpot_p90_ms));
    for (x, y) in a.tenants.iter().zip(&b.tenants) {
        assert_eq!(
            (x.requests, x.ttft_p90_ms, x.output_tokens_per_s),
            (y.requests, y.ttft_p90_ms, y.output_tokens_per_s)
        );
    }
    // And the sketches are within 0.1% of the exact nearest-rank figures.
    let dur_s = keeping.now() as f64 / 1e9;
    let exact = RequestStats::of(keeping.records(), dur_s);
    let close = |got: f64, want: f64| (got - want).abs() <= want * 1e-3;
    for (got, want) in [a.ttft_p50_ms, a.ttft_p90_ms, a.ttft_p99_ms].iter().zip(exact.ttft_ms) {
        assert!(close(*got, want), "TTFT {got} ms against {want} ms");
    }
    for (got, want) in [a.tpot_p50_ms, a.tpot_p90_ms, a.tpot_p99_ms].iter().zip(exact.tpot_ms) {
        assert!(close(*got, want), "TPOT {got} ms against {want} ms");
    }
}

#[test]
fn a_retired_request_can_still_be_ended_and_ids_keep_counting() {
    let scn = scenario(SCENARIO);
    let mut p = slicesched_policy::builtin("dedicated").unwrap();
    let mut sim = live(&scn, p.as_mut());
    let first = sim.arrive(0, 100, 2).unwrap();
    sim.advance(2_000_000_000, u64::MAX);
    assert!(sim.record(first).is_some_and(|r| r.finish_ns.is_some()));
    // The caller still wants the record: it stays.
    assert_eq!(sim.retire(|id| id == first), 0);
    assert_eq!(sim.retire(|_| false), 1);
    assert!(sim.record(first).is_none());
    // Ending a request that is gone (a late client cancel) is a no-op, not a panic.
    sim.end(first, slicesched_sim::End::Dropped("cancelled"));
    assert_eq!(sim.next_id(), 1);
    let second = sim.arrive(1, 100, 2).unwrap();
    assert_eq!(second, 1);
    sim.advance(4_000_000_000, u64::MAX);
    sim.forget_series_before(1);
    assert_eq!(sim.series().first, 1);
    let r = sim.finish("stopped");
    assert_eq!((r.summary.requests, r.summary.completed), (2, 2));
    assert_eq!(r.records.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1], "the result holds what was not retired");
}

#[test]
fn a_live_loop_meters_each_tenants_offered_load_as_a_replay_does() {
    let scn = scenario(SCENARIO);
    let mut p = slicesched_policy::builtin("dedicated").unwrap();
    let mut sim = live(&scn, p.as_mut());
    // Two minutes: `chat` 10 requests/s of 200 + 20 tokens, `code` quiet until a 10-s
    // burst of 40/s in the last minute.
    for k in 0..1_200u64 {
        let t = k * 100_000_000;
        sim.advance(t, u64::MAX);
        sim.arrive(0, 200, 20).expect("fits");
        if (90_000..100_000).contains(&(t / 1_000_000)) {
            for _ in 0..4 {
                sim.arrive(1, 100, 2).expect("fits");
            }
        }
    }
    sim.advance(120_000_000_000, u64::MAX);
    let chat = sim.offered(0);
    // The moving average has closed 12 windows of 10/s: within a few % of it.
    assert!((chat.average.requests - 10.0).abs() < 1.0, "{chat:?}");
    assert!((chat.average.prompt_tokens / chat.average.requests - 200.0).abs() < 1e-6);
    assert!((chat.forecast.requests - 10.0).abs() < 1.0, "{chat:?}");
    // The burst: the forecast keeps its peak window, the average has spread it thin.
    let code = sim.offered(1);
    assert!((code.forecast.requests - 40.0).abs() < 1e-6, "{code:?}");
    assert!(code.average.requests < 15.0 && code.average.requests > 0.0, "{code:?}");
    // A minute of silence later the burst has left the forecast's window.
    sim.advance(200_000_000_000, u64::MAX);
    assert!(sim.offered(1).forecast.requests < 5.0, "{:?}", sim.offered(1));
    assert_eq!(sim.offered(9), slicesched_sim::OfferedLoad::default(), "no such tenant: nothing offered");
}
