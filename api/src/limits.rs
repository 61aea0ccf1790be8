//! Budgets before work: what a request or a run would cost, estimated from what it
//! asks for before anything is built, and refused (a 422 naming the field, the limit and
//! the value) when over a configured limit. A run's estimated memory is also what it
//! holds of the service's memory budget while it executes (`jobs`), so runs that fit
//! one by one cannot together exhaust the service.

use crate::error::ApiError;
use serde::Deserialize;
use slicesched_hw::ClusterSpec;
use slicesched_sim::ScenarioSpec;
use slicesched_trace::{TraceKind, TraceSpec};

/// The service's limits (`[limits]` of the configuration file).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// GPUs one cluster may have (nodes × count × gpus).
    pub max_gpus_per_cluster: u64,
    /// Requests one tenant's trace may produce.
    pub max_requests_per_tenant: u64,
    /// Requests one replay may hold (all tenants).
    pub max_requests_per_run: u64,
    /// Memory the runs executing at once may hold between them, bytes; a run estimated
    /// over it is refused, one under it waits until enough is free.
    pub memory_budget_bytes: u64,
    /// Longest a run may be estimated to execute, wall-clock seconds.
    pub max_run_wall_s: f64,
    /// Largest request head (request line and headers), bytes.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_gpus_per_cluster: 1024,
            max_requests_per_tenant: 1_000_000,
            max_requests_per_run: 2_000_000,
            memory_budget_bytes: 4 << 30,
            max_run_wall_s: 4.0 * 3600.0,
            max_header_bytes: 16 * 1024,
        }
    }
}

// Measured with `/usr/bin/time -v slicesched replay` (README, "Limits"): a replay's
// memory and time grow with its requests and with the simulated seconds its tenants
// receive arrivals over (every engine iterates while it has work, however few requests
// that is). Each constant is about twice the largest measured value.

/// Bytes a replay holds per request, all told: the request, its engine state, its
/// latency record and its row in the bulk insert (measured: ~220 B in the replay on
/// `azure-code-4t`, 34,826 requests, against `smoke`'s 171).
pub const BYTES_PER_REQUEST: u64 = 2048;
/// Bytes per tenant per simulated second of arrivals: per-second series, the policy's
/// state (measured: 4.1 KiB under the Wasm `slice` on `uniform-4t` between 0.25× and
/// 2×; 0.25 KiB under `dedicated` on `azure-code-4t`).
pub const BYTES_PER_TENANT_SECOND: u64 = 8 << 10;
/// Bytes per GPU: device lanes, the memory ledger, idle-gap histograms. The whole-run
/// busy rows are counted apart, every (GPU, tenant) pair at its bucket width
/// (`slicesched_sim::busy_max_bytes`).
pub const BYTES_PER_GPU: u64 = 1 << 20;
/// A replay's fixed cost: cost model, policy, what-if timeline, buffers (measured: the
/// whole process at 20 MiB on `smoke`).
pub const BYTES_PER_RUN: u64 = 64 << 20;
/// Bytes per recorded op of the timeline.
pub const BYTES_PER_RECORDED_OP: u64 = 128;
/// Wall seconds per tenant per simulated second of arrivals under the slowest shipped
/// policy (the Wasm `slice`; measured on `uniform-4t`, four TP-2 tenants on 8 H100s:
/// 23–31 ms at 2×–0.25×, 302 s for its 600 s at 0.25×).
pub const WALL_S_PER_TENANT_SECOND: f64 = 0.035;
/// Wall seconds per request on top: admission, prefill, records (measured: the
/// intercept of the fit above, 1.4 ms).
pub const WALL_S_PER_REQUEST: f64 = 0.002;
/// Replays one sweep search takes, at most (bracketing and bisection).
pub const REPLAYS_PER_SEARCH: u64 = 12;

/// What a run is estimated to cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub gpus: u64,
    pub requests: u64,
    pub memory_bytes: u64,
    pub wall_s: f64,
}

fn over(field: &str, what: &str, limit: f64, value: f64) -> ApiError {
    ApiError::OverLimit {
        field: field.to_string(),
        detail: format!("{what}: {value} over the limit of {limit}"),
        limit,
        value,
    }
}

/// GPUs of a cluster spec, checked against the limit without building one.
pub fn cluster_gpus(spec: &ClusterSpec, field: &str, limits: &Limits) -> Result<u64, ApiError> {
    let mut total: u64 = 0;
    for (i, n) in spec.nodes.iter().enumerate() {
        let node = u64::from(n.gpus) * u64::from(n.count);
        total = total.saturating_add(node);
        if total > limits.max_gpus_per_cluster {
            return Err(over(
                &format!("{field}.nodes[{i}]"),
                "GPUs in the cluster (gpus × count)",
                limits.max_gpus_per_cluster as f64,
                total as f64,
            ));
        }
    }
    Ok(total)
}

/// How a file trace's rows are counted: (data rows, one loop's length in ns).
pub type FileRows<'a> = dyn Fn(&TraceSpec) -> Result<(u64, u64), ApiError> + 'a;

/// Requests one tenant's trace will produce, from its parameters alone (synthetic
/// kinds: rate × window; file kinds: rows × loops of the window).
pub fn trace_requests(t: &TraceSpec, duration_s: f64, field: &str, rows: &FileRows) -> Result<f64, ApiError> {
    let scale = t.rate_scale.unwrap_or(1.0);
    let need = |name: &str, v: Option<f64>| {
        v.filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| ApiError::invalid(format!("{field}.{name}"), "required: a finite number >= 0"))
    };
    if !(scale.is_finite() && scale > 0.0) {
        return Err(ApiError::invalid(format!("{field}.rate_scale"), "must be finite and > 0"));
    }
    let window = t.window_s.unwrap_or(duration_s);
    if !(window.is_finite() && window >= 0.0) {
        return Err(ApiError::invalid(format!("{field}.window_s"), "must be finite and >= 0"));
    }
    let n = match t.kind {
        TraceKind::Poisson | TraceKind::Gamma => need("rate", t.rate)? * scale * window,
        // Upper bound: the whole window at the higher rate.
        TraceKind::Onoff => need("rate_on", t.rate_on)?.max(t.rate_off.unwrap_or(0.0)) * scale * window,
        TraceKind::Azure | TraceKind::Burstgpt | TraceKind::Mooncake => {
            let (rows, period_ns) = rows(t)?;
            let window_ns = t.window_s.unwrap_or(duration_s * scale) * 1e9;
            let offset_ns = t.offset_s.unwrap_or(0.0) * 1e9;
            let loops = ((offset_ns % period_ns.max(1) as f64 + window_ns) / period_ns.max(1) as f64).ceil();
            rows as f64 * loops.max(1.0)
        }
    };
    Ok(if n.is_finite() { n } else { f64::MAX })
}

/// Simulated seconds over which a tenant's trace delivers arrivals, at the recorded
/// rate (a synthetic trace's window; a file trace's window, compressed by its own rate
/// scale), at most the scenario's duration.
pub fn trace_span_s(t: &TraceSpec, duration_s: f64) -> f64 {
    let scale = t.rate_scale.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(1.0);
    let window = match t.kind {
        TraceKind::Poisson | TraceKind::Gamma | TraceKind::Onoff => t.window_s,
        TraceKind::Azure | TraceKind::Burstgpt | TraceKind::Mooncake => t.window_s.map(|w| w / scale),
    };
    let span = window.unwrap_or(duration_s).min(duration_s);
    if span.is_finite() && span > 0.0 {
        span
    } else {
        0.0
    }
}

/// What the whole-run busy rows of a replay lasting `horizon_s` may hold (every GPU and
/// tenant pair filled).
fn busy_bytes(horizon_s: f64, gpus: u64, tenants: u64) -> u64 {
    let horizon_ns = (horizon_s * 1e9).clamp(0.0, u64::MAX as f64 / 2.0) as u64;
    slicesched_sim::busy_max_bytes(horizon_ns, gpus.saturating_mul(tenants))
}

/// Estimates a replay at `rate_scale` (or a sweep of `searches` searches, each replay
/// counted at the recorded rate, where searches start; `draws` of the scenario held at
/// once and each replayed at every scale) of `spec` and checks it against every limit.
/// `cluster` is the scenario's cluster spec (inline or read from its file).
#[allow(clippy::too_many_arguments)]
pub fn estimate(
    spec: &ScenarioSpec,
    cluster: &ClusterSpec,
    rows: &FileRows,
    searches: u64,
    draws: u64,
    rate_scale: f64,
    record_ops: u64,
    limits: &Limits,
) -> Result<Estimate, ApiError> {
    let gpus = cluster_gpus(cluster, "scenario.cluster", limits)?;
    let duration = spec.duration_s.unwrap_or(f64::INFINITY);
    let scale = if searches == 0 && rate_scale.is_finite() && rate_scale > 0.0 { rate_scale } else { 1.0 };
    let (mut requests, mut tenant_s, mut horizon_s) = (0f64, 0f64, 0f64);
    for (i, t) in spec.tenants.iter().enumerate() {
        let field = format!("scenario.tenants[{i}].trace");
        let n = trace_requests(&t.trace, duration, &field, rows)?;
        if n > limits.max_requests_per_tenant as f64 {
            return Err(over(&field, "requests estimated", limits.max_requests_per_tenant as f64, n.round()));
        }
        requests += n;
        // A slower replay spreads the same arrivals over longer.
        let span = trace_span_s(&t.trace, duration) / scale;
        tenant_s += span;
        horizon_s = horizon_s.max(span);
    }
    if requests > limits.max_requests_per_run as f64 {
        let all = "requests estimated over all tenants";
        return Err(over("scenario.tenants", all, limits.max_requests_per_run as f64, requests.round()));
    }
    let requests = requests.ceil() as u64;
    let draws = draws.max(1);
    let memory_bytes = BYTES_PER_RUN
        .saturating_add(requests.saturating_mul(draws).saturating_mul(BYTES_PER_REQUEST))
        .saturating_add(gpus.saturating_mul(BYTES_PER_GPU))
        .saturating_add((tenant_s * BYTES_PER_TENANT_SECOND as f64).min(u64::MAX as f64) as u64)
        .saturating_add(busy_bytes(horizon_s + spec.drain_s.max(0.0), gpus, spec.tenants.len() as u64))
        .saturating_add(record_ops.saturating_mul(BYTES_PER_RECORDED_OP));
    if memory_bytes > limits.memory_budget_bytes {
        let what = "estimated memory of the run, bytes";
        return Err(over("scenario", what, limits.memory_budget_bytes as f64, memory_bytes as f64));
    }
    let replays = if searches == 0 { 1 } else { searches.saturating_mul(REPLAYS_PER_SEARCH).saturating_mul(draws) };
    let wall_s = (requests as f64 * WALL_S_PER_REQUEST + tenant_s * WALL_S_PER_TENANT_SECOND) * replays as f64;
    if wall_s > limits.max_run_wall_s {
        return Err(over("scenario", "estimated run time, wall seconds", limits.max_run_wall_s, wall_s.round()));
    }
    Ok(Estimate { gpus, requests, memory_bytes, wall_s })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_files(_: &TraceSpec) -> Result<(u64, u64), ApiError> {
        unreachable!("no file traces here")
    }

    fn spec(text: &str) -> ScenarioSpec {
        toml::from_str(text).unwrap()
    }

    const HEAD: &str = "name = \"x\"\nseed = 1\nduration_s = 3600\n[cluster]\n[[cluster.nodes]]\ngpu = \"A100-80GB\"\n";

    #[test]
    fn a_huge_cluster_is_refused_by_arithmetic() {
        let c: ClusterSpec = toml::from_str("[[nodes]]\ngpu = \"A100-80GB\"\ngpus = 64\ncount = 4294967295\n").unwrap();
        let e = cluster_gpus(&c, "spec", &Limits::default()).unwrap_err();
        match e {
            ApiError::OverLimit { field, limit, value, .. } => {
                assert_eq!((field.as_str(), limit, value), ("spec.nodes[0]", 1024.0, 274877906880.0))
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn thirteen_thousand_requests_a_second_for_an_hour_is_refused() {
        let t = "[[tenants]]\nname = \"a\"\nmodel = \"llama-2-7b\"\ngpus = [0]\nsla = { ttft_ms = 1, tpot_ms = 1 }\n\
                 trace = { kind = \"poisson\", rate = 13000.0 }\n";
        let s = spec(&format!("{HEAD}gpus = 1\n{t}"));
        let ClusterRefSpec(c) = inline(&s);
        let e = estimate(&s, &c, &no_files, 0, 1, 1.0, 0, &Limits::default()).unwrap_err();
        match e {
            ApiError::OverLimit { field, limit, value, .. } => {
                assert_eq!((field.as_str(), limit, value), ("scenario.tenants[0].trace", 1e6, 46.8e6))
            }
            other => panic!("{other}"),
        }
        let small = spec(&format!("{HEAD}gpus = 1\n{}", t.replace("13000.0", "2.0")));
        let est = estimate(&small, &c, &no_files, 0, 1, 1.0, 200_000, &Limits::default()).unwrap();
        assert_eq!((est.gpus, est.requests), (1, 7200));
    }

    #[test]
    fn a_slower_replay_of_the_same_requests_is_estimated_longer_as_measured() {
        // `uniform-4t`'s shape: four tenants at 6 req/s for 600 s on 8 GPUs. Measured
        // under the Wasm `slice`: 302 s at 0.25×, 70 s at 1×, 28 s at 2×.
        let t = |i: usize| {
            format!("[[tenants]]\nname = \"t{i}\"\nmodel = \"llama-3-8b\"\ngpus = [{a}, {b}]\nsla = {{ ttft_ms = 300, tpot_ms = 40 }}\ntrace = {{ kind = \"poisson\", rate = 6.0 }}\n", a = 2 * i, b = 2 * i + 1)
        };
        let text = format!("{}gpus = 8\n{}", HEAD.replace("3600", "600"), (0..4).map(t).collect::<String>());
        let s = spec(&text);
        let ClusterRefSpec(c) = inline(&s);
        let at = |scale| estimate(&s, &c, &no_files, 0, 1, scale, 0, &Limits::default()).unwrap();
        let (slow, one, fast) = (at(0.25), at(1.0), at(2.0));
        assert_eq!((slow.requests, one.requests), (14_400, 14_400), "the same requests");
        for (e, measured) in [(&slow, 302.0), (&one, 70.0), (&fast, 28.0)] {
            assert!(e.wall_s >= measured && e.wall_s <= 3.0 * measured, "{} s against {measured} s measured", e.wall_s);
        }
        assert!(slow.memory_bytes > one.memory_bytes);
        // A sweep counts its replays at the recorded rate, whatever scale was asked.
        let sweep = estimate(&s, &c, &no_files, 2, 1, 0.25, 0, &Limits::default()).unwrap();
        assert!((sweep.wall_s - 2.0 * REPLAYS_PER_SEARCH as f64 * one.wall_s).abs() < 1e-6);
        // Three draws: every replay three times, and the three draws' requests held at once.
        let drawn = estimate(&s, &c, &no_files, 2, 3, 0.25, 0, &Limits::default()).unwrap();
        assert!((drawn.wall_s - 3.0 * sweep.wall_s).abs() < 1e-6);
        assert_eq!(drawn.memory_bytes - sweep.memory_bytes, 2 * 14_400 * BYTES_PER_REQUEST);
    }

    #[test]
    fn the_whole_run_busy_rows_of_every_gpu_and_tenant_are_counted() {
        let t = |i: usize| {
            format!("[[tenants]]\nname = \"t{i}\"\nmodel = \"llama-3-8b\"\ngpus = [{i}]\nsla = {{ ttft_ms = 300, tpot_ms = 40 }}\ntrace = {{ kind = \"poisson\", rate = 0.1 }}\n")
        };
        let text = format!("{}gpus = 1024\n{}", HEAD.replace("3600", "1800"), (0..16).map(t).collect::<String>());
        let s = spec(&text);
        let ClusterRefSpec(c) = inline(&s);
        let e = estimate(&s, &c, &no_files, 0, 1, 1.0, 0, &Limits::default()).unwrap();
        let busy = slicesched_sim::busy_max_bytes(1800 * 1_000_000_000, 1024 * 16);
        assert!(busy > 100 << 20, "{busy}");
        assert!(e.memory_bytes >= busy + BYTES_PER_RUN + 1024 * BYTES_PER_GPU, "{} < {busy}", e.memory_bytes);
    }

    struct ClusterRefSpec(ClusterSpec);

    fn inline(s: &ScenarioSpec) -> ClusterRefSpec {
        match toml::Value::try_from(&s.cluster).unwrap() {
            v @ toml::Value::Table(_) => ClusterRefSpec(v.try_into().unwrap()),
            _ => panic!("inline cluster expected"),
        }
    }
}
