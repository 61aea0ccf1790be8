//! Building a live cluster (scenario, models, policy, executor) and its serving loop: one
//! thread owns the backend, the executor and the simulator's loop, advanced to the wall
//! clock; requests, cancellations and the stop come in through one channel, whose
//! length the handle bounds.

use super::config::DeviceKind;
use super::exec::{Event, LiveExec, Requests, Served};
use super::history::Sink;
use super::sample::SamplingParams;
use super::{LiveConfig, Snapshot, TenantSnapshot};
use slicesched_cost::{CostModel, CpuOverhead};
use slicesched_exec::cuda::CudaBackend;
use slicesched_exec::model::{ExecModel, HostWeights};
use slicesched_exec::{Backend, CpuBackend, CpuDeviceSpec};
use slicesched_policy::{Policy, SwitchHandle, Switchable};
use slicesched_sim::{End, LiveSim, ReplayOptions, Scenario, ScenarioSpec};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// A request for the loop.
pub struct Submit {
    pub tenant: u32,
    pub prompt: Vec<i32>,
    pub params: SamplingParams,
    pub events: UnboundedSender<Event>,
    /// The handle's id of the request (for cancelling it).
    pub client: u64,
}

pub enum Cmd {
    Submit(Box<Submit>),
    /// The client went away.
    Cancel(u64),
    /// A tenant's SLA changed: its new requests are judged against this one.
    Sla(u32, slicesched_engine::Sla),
    /// Finish in-flight work (for at most the drain time), fail the rest, end.
    Stop,
}

/// What the loop is built from (resolved by the handle, with the database).
pub struct Plan {
    pub config: LiveConfig,
    pub scenario: Scenario,
    pub models: Vec<(ExecModel, HostWeights)>,
    pub policy: Box<dyn Policy>,
    pub switch: SwitchHandle,
    /// Where what ends goes, for the history tables.
    pub history: Sink,
}

/// The scenario of a live cluster: its devices as nominal A100s (the cost model's
/// predictions; the executor measures what really happens), its tenants with their
/// SLAs; no trace (requests come over HTTP).
pub fn scenario(
    cfg: &LiveConfig,
    devices: u32,
    models: &[(String, slicesched_engine::Sla)],
) -> Result<Scenario, String> {
    let mut tenants = Vec::new();
    for (t, (model, sla)) in cfg.tenants.iter().zip(models) {
        let mut engine = slicesched_engine::EngineConfig::default();
        if let Some(v) = t.engine.max_num_seqs {
            engine.max_num_seqs = v;
        }
        if let Some(v) = t.engine.max_num_batched_tokens {
            engine.max_batched_tokens = v;
        }
        if let Some(v) = t.engine.enable_chunked_prefill {
            engine.chunked_prefill = v;
        }
        tenants.push(serde_json::json!({
            "name": t.name,
            "model": model,
            "gpus": t.gpus,
            "sla": {"ttft_ms": sla.ttft_ms, "ttft_ms_per_1k": sla.ttft_ms_per_1k, "tpot_ms": sla.tpot_ms},
            "engine": engine,
            // Never read: the loop takes its requests from HTTP.
            "trace": {"kind": "poisson", "rate": 1e-9, "prompt": {"dist": "fixed", "value": 1},
                      "output": {"dist": "fixed", "value": 1}},
        }));
    }
    let spec = serde_json::json!({
        "name": "live",
        "seed": 0,
        "duration_s": 1.0,
        "drain_s": 0.0,
        "cluster": {"name": "live", "nodes": [{"gpu": "A100-80GB", "gpus": devices}]},
        "memory": {"gpu_memory_utilization": cfg.gpu_memory_utilization},
        "tenants": tenants,
    });
    let spec: ScenarioSpec = serde_json::from_value(spec).map_err(|e| e.to_string())?;
    let path = std::path::Path::new("live");
    let mut scn = Scenario::from_spec(spec, path, std::path::Path::new(".")).map_err(|e| e.to_string())?;
    scn.requests.clear();
    Ok(scn)
}

/// Shared between the loop and the handle.
pub struct Shared {
    /// Commands sent and not yet taken.
    pub queued: AtomicU32,
    pub snapshot: Mutex<Snapshot>,
}

/// Runs the loop on this thread until a stop (or every sender is gone). `ready` hears
/// whether the cluster was built.
pub fn run(
    plan: Plan,
    rx: Receiver<Cmd>,
    shared: Arc<Shared>,
    ready: tokio::sync::oneshot::Sender<Result<(), String>>,
) -> Option<super::Stopped> {
    let Plan { config, scenario: scn, models, policy, switch, history: mut sink } = plan;
    let planned = match slicesched_sim::plan(&scn, policy.replicas()) {
        Ok(p) => p,
        Err(e) => {
            let _ = ready.send(Err(format!("planning: {e}")));
            return None;
        }
    };
    let specs: Vec<CpuDeviceSpec> =
        planned.cluster.gpus.iter().map(|g| CpuDeviceSpec { memory_bytes: g.sku.memory, cores: 1 }).collect();
    // The scenario's GPUs are the backend's devices in order: cpu:i, or the GPU of ordinal i.
    let backend: Box<dyn Backend> = match config.device_kind() {
        Ok((DeviceKind::Cuda, _)) => match CudaBackend::try_new(&(0..specs.len()).collect::<Vec<_>>()) {
            Ok(b) => Box::new(b),
            Err(e) => {
                let _ = ready.send(Err(format!("starting the CUDA backend: {e}")));
                return None;
            }
        },
        _ => Box::new(CpuBackend::new(&specs)),
    };
    let reqs: Requests = Default::default();
    let mut exec = match LiveExec::new(backend.as_ref(), &planned, &models, reqs.clone()) {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(format!("loading the tenants: {e}")));
            return None;
        }
    };
    drop(models);
    let mut pol = Switchable::with_handle(policy, switch);
    let cost = CostModel::default_a100();
    // The engines' CPU time is real here: the loop spends it, nothing is simulated.
    // Operators are sampled for the run's timeline (handed to the writer each flush).
    let opts = ReplayOptions {
        cpu_overhead: CpuOverhead::ZERO,
        time_decisions: true,
        record_ops: Some(config.op_sample.window()),
        ..ReplayOptions::default()
    };
    let mut sim = LiveSim::new(&planned, &mut pol, cost, opts, Some(&mut exec));
    let _ = ready.send(Ok(()));
    let t0 = Instant::now();
    let wall = || t0.elapsed().as_nanos() as u64;
    let mut clients: HashMap<u64, u32> = HashMap::new();
    let mut stop_by: Option<Instant> = None;
    let mut published = Instant::now() - Duration::from_secs(1);
    let drain = Duration::from_secs_f64(config.drain_s);
    loop {
        let idle = Duration::from_millis(if stop_by.is_some() { 5 } else { 100 });
        let wait = sim.next_event_ns().map_or(idle, |t| Duration::from_nanos(t.saturating_sub(wall())).min(idle));
        let first = match rx.recv_timeout(wait) {
            Ok(c) => Some(c),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                stop_by.get_or_insert_with(|| Instant::now() + drain);
                None
            }
        };
        sim.advance(wall(), 256);
        for cmd in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok())) {
            match cmd {
                Cmd::Submit(s) => {
                    shared.queued.fetch_sub(1, Ordering::Relaxed);
                    if stop_by.is_some() {
                        let _ = s
                            .events
                            .send(Event::Rejected { status: 503, message: "the live cluster is shutting down".into() });
                        continue;
                    }
                    admit(&mut sim, &reqs, &mut clients, &mut sink, *s);
                }
                Cmd::Cancel(c) => {
                    if let Some(req) = clients.remove(&c) {
                        if let Some(p) = reqs.borrow_mut().get_mut(&req) {
                            p.done = true;
                        }
                        sim.end(req, End::Dropped("cancelled: the client went away"));
                    }
                }
                Cmd::Sla(t, sla) => sim.set_sla(t, sla),
                Cmd::Stop => {
                    stop_by.get_or_insert_with(|| Instant::now() + drain);
                }
            }
        }
        // Bounded, so commands (a cancellation above all) are read between batches of work.
        sim.advance(wall(), 256);
        if published.elapsed() >= Duration::from_millis(50) {
            clients.retain(|_, r| reqs.borrow().contains_key(r));
            let serving: Vec<u32> = reqs.borrow().values().map(|p| p.tenant).collect();
            publish(&sim, &shared, &planned, &serving, t0);
            published = Instant::now();
        }
        if sink.due() {
            sink.flush(&mut sim);
        }
        if let Some(by) = stop_by {
            let working = reqs.borrow().values().any(|p| !p.done);
            if !working || Instant::now() >= by {
                let ids: Vec<u32> = reqs.borrow().keys().copied().collect();
                for id in ids {
                    if let Some(p) = reqs.borrow_mut().get_mut(&id) {
                        p.fail("the server shut down before the request finished");
                    }
                    sim.end(id, End::Dropped("the server shut down"));
                }
                break;
            }
        }
    }
    // The stop stores what is left at once; the writer only finishes what it holds.
    let (records, ops, windows) = sink.finish(&mut sim);
    sim.drop_unfinished("the server shut down");
    publish(&sim, &shared, &planned, &[], t0);
    let mut result = sim.finish("the server shut down");
    result.ops.splice(0..0, ops);
    result.records.splice(0..0, records);
    Some(super::Stopped { result, windows })
}

fn admit(sim: &mut LiveSim, reqs: &Requests, clients: &mut HashMap<u64, u32>, sink: &mut Sink, s: Submit) {
    let id = sim.next_id();
    // Refused or served, the request has a record from here on.
    sink.opened(id);
    let (prompt, max_tokens) = (s.prompt.len() as u32, s.params.max_tokens);
    let events = s.events.clone();
    reqs.borrow_mut().insert(id, Served::new(s.tenant, s.prompt, s.params, s.events));
    let _ = events.send(Event::Admitted { prompt_tokens: prompt });
    match sim.arrive(s.tenant, prompt, max_tokens) {
        Ok(got) => {
            debug_assert_eq!(got, id);
            clients.insert(s.client, id);
        }
        Err(r) => {
            let message = format!("refused: {}", r.dropped.unwrap_or("the request can never fit the model's KV cache"));
            reqs.borrow_mut().remove(&id);
            let _ = events.send(Event::Rejected { status: 400, message });
        }
    }
}

/// What the loop shows the handle: each tenant's queues, KV and counts, and what it holds.
fn publish(sim: &LiveSim, shared: &Shared, scn: &Scenario, serving: &[u32], t0: Instant) {
    let loads: Vec<_> = (0..scn.tenants.len() as u32).map(|i| sim.load(i)).collect();
    let mut tenants: Vec<TenantSnapshot> = scn
        .tenants
        .iter()
        .zip(loads)
        .map(|(t, l)| TenantSnapshot {
            name: t.name.clone(),
            waiting: l.waiting,
            running: l.running,
            kv_blocks_total: l.kv_blocks_total,
            kv_blocks_free: l.kv_blocks_free,
            preemptions: l.preemptions,
            ..Default::default()
        })
        .collect();
    for (t, c) in tenants.iter_mut().zip(sim.counts()) {
        (t.requests, t.completed, t.dropped, t.sla_violations) = (c.requests, c.completed, c.dropped, c.sla_violations);
    }
    for (i, t) in tenants.iter_mut().enumerate() {
        let o = sim.offered(i as u32);
        (t.offered_requests_per_s, t.offered_prompt_tokens_per_s, t.offered_output_tokens_per_s) =
            (o.average.requests, o.average.prompt_tokens, o.average.output_tokens);
        (t.forecast_requests_per_s, t.forecast_prompt_tokens_per_s, t.forecast_output_tokens_per_s) =
            (o.forecast.requests, o.forecast.prompt_tokens, o.forecast.output_tokens);
    }
    for &p in serving {
        tenants[p as usize].in_service += 1;
    }
    let mut s = shared.snapshot.lock().unwrap_or_else(|e| e.into_inner());
    s.uptime_s = t0.elapsed().as_secs_f64();
    s.clock_s = sim.now() as f64 / 1e9;
    s.tenants = tenants;
    let (records, sequences) = sim.held();
    (s.held_records, s.held_sequences) = (records as u64, sequences as u64);
}
