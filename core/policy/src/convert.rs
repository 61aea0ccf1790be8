//! The core's view in the plugin SDK's terms: what both the native adapter and the
//! Wasm host hand a policy. Buffers are refilled in place, so a decision allocates
//! nothing once they have grown.

use crate::{InstanceView, Probe, ProbeOutcome, ReadyOp, ReplicaMode, TenantDelay, Verdict, View, WhatIfHandle};
use slicesched_hw::LinkKind;
use slicesched_model::OpKind;
use slicesched_plugin_sdk as sdk;

/// Refills `out` from `view`: the run-constant part only when `view`'s epoch differs
/// from `*epoch` (which it then records), the rest always. On a replay's decisions that
/// spares copying the deployment and the `groups × groups` links every time.
/// `instances`: refill the engine instances too (`admit` and `route`); `place` keeps
/// those of the last `admit` or `route`, as a Wasm plugin's SDK does.
/// Returns whether it copied the run-constant part (the policy's `configure` is due).
pub fn fill_view(view: &View<'_>, out: &mut sdk::View, epoch: &mut u64, instances: bool) -> bool {
    fill_dynamic(view, out, instances);
    if *epoch != view.epoch || view.epoch == 0 {
        fill_static(view, out);
        *epoch = view.epoch;
        return true;
    }
    false
}

/// What changes between decisions: the clock, GPUs, tenants, and instances if asked.
pub fn fill_dynamic(view: &View<'_>, out: &mut sdk::View, instances: bool) {
    out.now_ns = view.now_ns;
    out.gpus.clear();
    out.gpus.extend(
        view.gpu_busy_until.iter().zip(view.gpu_queued_ns).zip(view.gpu_owner_need_ns).map(|((&b, &q), &o)| sdk::Gpu {
            busy_until_ns: b,
            queued_ns: q,
            owner_need_ns: o,
        }),
    );
    out.tenants.clear();
    out.tenants.extend(view.tenants.iter().map(|t| sdk::Tenant {
        home: t.home.0,
        layers: t.layers,
        slack_ns: t.slack_ns,
        tpot_target_ns: t.tpot_target_ns,
    }));
    if instances {
        out.instances.clear();
        out.instances.extend(view.instances.iter().map(instance));
    }
}

/// The run-constant part: homes and replicas, groups, links.
pub fn fill_static(view: &View<'_>, out: &mut sdk::View) {
    out.homes.clear();
    out.homes.extend(view.deployment.homes.iter().map(|h| sdk::Home {
        tenant: h.tenant.0,
        group: h.group.0,
        first_layer: h.layers.0,
        end_layer: h.layers.1,
        is_home: h.is_home,
        serves: h.serves,
    }));
    let groups = &view.deployment.groups;
    out.groups.truncate(groups.len());
    out.groups.resize_with(groups.len(), Vec::new);
    for (dst, g) in out.groups.iter_mut().zip(groups) {
        dst.clear();
        dst.extend(g.gpus.iter().map(|x| x.0));
    }
    out.links.clear();
    out.links.extend(view.group_links.iter().map(|l| sdk::Link {
        same_device: l.kind == LinkKind::SameDevice,
        latency_ns: l.latency_ns,
        bandwidth: l.bandwidth,
    }));
}

/// An engine instance in the SDK's terms.
pub fn instance(i: &InstanceView) -> sdk::Instance {
    sdk::Instance {
        index: i.index,
        tenant: i.tenant.0,
        group: i.group.0,
        is_home: i.is_home,
        waiting: i.waiting,
        running: i.running,
        inflight: i.inflight,
        kv_free_blocks: i.kv_free_blocks,
        kv_total_blocks: i.kv_total_blocks,
        prefill_tokens: i.prefill_tokens,
        batch_tokens: i.batch_tokens,
    }
}

/// A ready op in the SDK's terms (answers name it by its index in the batch).
pub fn ready_op(r: &ReadyOp) -> sdk::ReadyOp {
    sdk::ReadyOp {
        tenant: r.tenant.0,
        kind: op_kind(r.kind),
        layer: r.layer,
        predicted_ns: r.predicted_ns,
        home: r.home.0,
        ready_ns: r.ready_ns,
        input_group: r.input_group.map(|g| g.0),
        input_bytes: r.input_bytes,
        out_bytes: r.out_bytes,
        instance: r.instance,
        prefill_tokens: r.prefill_tokens,
        decodes: r.decodes,
    }
}

/// The plugin interface's op kinds are frozen per version: the mixture-of-experts kinds
/// reach policies as their cost class (expert GEMMs as MLP GEMMs, the router as a
/// QKV-like small GEMM, an all-to-all as an all-gather), so a policy places them like
/// any weight GEMM or collective.
pub fn op_kind(k: OpKind) -> sdk::OpKind {
    match k.cost_class() {
        OpKind::Embedding => sdk::OpKind::Embedding,
        OpKind::InputNorm => sdk::OpKind::InputNorm,
        OpKind::QkvProj => sdk::OpKind::QkvProj,
        OpKind::Rope => sdk::OpKind::Rope,
        OpKind::Attention => sdk::OpKind::Attention,
        OpKind::OProj => sdk::OpKind::OProj,
        OpKind::AllReduce => sdk::OpKind::AllReduce,
        OpKind::ResidualAdd => sdk::OpKind::ResidualAdd,
        OpKind::PostAttnNorm => sdk::OpKind::PostAttnNorm,
        OpKind::GateUpProj => sdk::OpKind::GateUpProj,
        OpKind::Activation => sdk::OpKind::Activation,
        OpKind::DownProj => sdk::OpKind::DownProj,
        OpKind::FinalNorm => sdk::OpKind::FinalNorm,
        OpKind::LmHead => sdk::OpKind::LmHead,
        OpKind::AllGather => sdk::OpKind::AllGather,
        OpKind::Transfer => sdk::OpKind::Transfer,
        // `cost_class` maps these to the kinds above.
        k @ (OpKind::Router | OpKind::ExpertUp | OpKind::ExpertDown | OpKind::AllToAll) => op_kind(k),
    }
}

pub fn replica_mode(m: sdk::ReplicaMode) -> ReplicaMode {
    match m {
        sdk::ReplicaMode::None => ReplicaMode::None,
        sdk::ReplicaMode::Weights => ReplicaMode::Weights,
        sdk::ReplicaMode::Serving => ReplicaMode::Serving,
        sdk::ReplicaMode::Both => ReplicaMode::Both,
    }
}

/// Buffers reused to answer a policy's probes (a decision allocates nothing once they
/// have grown).
#[derive(Debug, Default)]
pub struct ProbeBuffers {
    probes: Vec<Probe>,
    /// For each probe sent to the core, its index among the policy's probes.
    from: Vec<u32>,
    outcomes: Vec<ProbeOutcome>,
    delays: Vec<TenantDelay>,
}

/// Answers a policy's probes, which name ops by their index in `ready`, with the
/// core's what-if, in the SDK's terms. An index outside the batch is `NotOffered`.
pub fn answer_probes(
    what_if: WhatIfHandle<'_>,
    ready: &[ReadyOp],
    probes: &[sdk::Probe],
    bufs: &mut ProbeBuffers,
    answer: &mut sdk::WhatIfAnswer,
) {
    bufs.probes.clear();
    bufs.from.clear();
    for (k, p) in probes.iter().enumerate() {
        if let Some(r) = ready.get(p.op as usize) {
            bufs.probes.push(Probe { op: r.op, group: slicesched_gmg::GroupId(p.group), priority: p.priority });
            bufs.from.push(k as u32);
        }
    }
    bufs.outcomes.clear();
    bufs.delays.clear();
    what_if.ask(&bufs.probes, &mut bufs.outcomes, &mut bufs.delays);
    answer.outcomes.clear();
    let mut asked = bufs.outcomes.iter();
    answer.outcomes.extend(probes.iter().map(|p| match ready.get(p.op as usize).and_then(|_| asked.next()) {
        Some(o) => outcome(o),
        None => outcome(&ProbeOutcome::empty(Verdict::NotOffered)),
    }));
    answer.delays.clear();
    answer.delays.extend(bufs.delays.iter().map(|d| sdk::Delay {
        probe: bufs.from[d.probe as usize],
        tenant: d.tenant.0,
        delay_ns: d.delay_ns,
    }));
}

pub fn outcome(o: &ProbeOutcome) -> sdk::Outcome {
    sdk::Outcome {
        verdict: o.verdict,
        start_ns: o.start_ns,
        finish_ns: o.finish_ns,
        transfer_ns: o.transfer_ns,
        transfer_bytes: o.transfer_bytes,
        peak_bytes: o.peak_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slicesched_gmg::Deployment;
    use slicesched_hw::{Cluster, GpuId};

    fn view<'a>(cluster: &'a Cluster, dep: &'a Deployment, epoch: u64) -> View<'a> {
        View {
            now_ns: 7,
            cluster,
            deployment: dep,
            gpu_busy_until: &[1, 2],
            gpu_queued_ns: &[0, 0],
            gpu_owner_need_ns: &[u64::MAX, 3],
            tenants: &[],
            instances: &[],
            group_links: &[],
            epoch,
            what_if: Default::default(),
        }
    }

    #[test]
    fn the_run_constant_part_is_copied_once_per_epoch() {
        let cluster = Cluster::uniform("A100-80GB", 2).unwrap();
        let mut one = Deployment::default();
        one.group_for(&[GpuId(0)]);
        let mut two = one.clone();
        two.group_for(&[GpuId(1)]);
        let (mut out, mut epoch) = (sdk::View::default(), 0);
        let first = crate::new_epoch();
        fill_view(&view(&cluster, &one, first), &mut out, &mut epoch, true);
        assert_eq!((out.groups.len(), epoch, out.gpus.len()), (1, first, 2));
        // Same epoch: the static part is trusted to be unchanged (the caller's promise),
        // the dynamic part is refreshed.
        fill_view(&view(&cluster, &two, first), &mut out, &mut epoch, true);
        assert_eq!(out.groups.len(), 1);
        assert_eq!(out.gpus[1].owner_need_ns, 3);
        // A new epoch, or epoch 0 (unknown), copies it again.
        fill_view(&view(&cluster, &two, crate::new_epoch()), &mut out, &mut epoch, true);
        assert_eq!(out.groups.len(), 2);
        fill_view(&view(&cluster, &one, 0), &mut out, &mut epoch, false);
        assert_eq!(out.groups.len(), 1);
    }
}
