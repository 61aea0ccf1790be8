//! Each interface version's side of a call: the view and the batch in that version's
//! WIT types (buffers refilled in place), the call, and the answer in the SDK's terms.
//! What the versions share is written once ([`shared_conversions`]).

pub mod v1;
pub mod v2;
pub mod v3;

use crate::bindings::{v1 as b1, v2 as b2, v3 as b3};
use crate::sandbox::HostState;
use slicesched_plugin_sdk as sdk;
use slicesched_policy::{InstanceView, ReadyOp, View};
use wasmtime::Store;

/// A live plugin instance with the buffers of its interface version.
pub enum Bound {
    V1(b1::Plugin, v1::Wire),
    V2(b2::Plugin, v2::Wire),
    V3(b3::Plugin, v3::Wire),
}

/// A hook's result: Err, the call failed (trap, fuel, memory); Ok(Err), the plugin
/// answered an error.
pub type Answer<T> = wasmtime::Result<Result<T, String>>;

impl Bound {
    pub fn describe(&self, store: &mut Store<HostState>) -> wasmtime::Result<sdk::Info> {
        match self {
            Bound::V1(p, _) => p.slicesched_policy_policy().call_describe(store).map(v1::info),
            Bound::V2(p, _) => p.slicesched_policy_policy().call_describe(store).map(v2::info),
            Bound::V3(p, _) => p.slicesched_policy_policy().call_describe(store).map(v3::info),
        }
    }

    /// Sends the run-constant part: `deployment` holds it in the SDK's terms, `view`
    /// the tenants.
    pub fn configure(&mut self, store: &mut Store<HostState>, view: &View<'_>, deployment: &sdk::View) -> Answer<()> {
        match self {
            Bound::V1(p, _) => p.slicesched_policy_policy().call_configure(store, &v1::deployment(deployment)),
            Bound::V2(p, _) => p.slicesched_policy_policy().call_configure(store, &v2::deployment(view, deployment)),
            Bound::V3(p, _) => p.slicesched_policy_policy().call_configure(store, &v3::deployment(view, deployment)),
        }
    }

    /// Asks for placements of `ready`, lending the core's what-if for the call (0.2.0).
    pub fn place(
        &mut self,
        store: &mut Store<HostState>,
        view: &View<'_>,
        ready: &[ReadyOp],
        out: &mut Vec<sdk::Placement>,
    ) -> Answer<()> {
        match self {
            Bound::V1(p, w) => {
                w.load(view, false, ready);
                let a = p.slicesched_policy_policy().call_place(&mut *store, &w.view, &w.ready);
                a.map(|a| a.map(|list| out.extend(list.iter().map(v1::placement))))
            }
            Bound::V2(p, w) => {
                w.load(view, false, ready);
                store.data_mut().lend(view.what_if, ready);
                let a = p.slicesched_policy_policy().call_place(&mut *store, &w.view, &w.ready);
                store.data_mut().unlend();
                a.map(|a| a.map(|list| out.extend(list.iter().map(v2::placement))))
            }
            Bound::V3(p, w) => {
                w.load(view, false, ready);
                store.data_mut().lend(view.what_if, ready);
                let a = p.slicesched_policy_policy().call_place(&mut *store, &w.view, &w.ready);
                store.data_mut().unlend();
                a.map(|a| a.map(|list| out.extend(list.iter().map(v3::placement))))
            }
        }
    }

    pub fn admit(&mut self, store: &mut Store<HostState>, view: &View<'_>, inst: &InstanceView) -> Answer<bool> {
        let inst = slicesched_policy::convert::instance(inst);
        match self {
            Bound::V1(p, w) => {
                w.load(view, true, &[]);
                p.slicesched_policy_policy().call_admit(store, &w.view, v1::instance(&inst))
            }
            Bound::V2(p, w) => {
                w.load(view, true, &[]);
                p.slicesched_policy_policy().call_admit(store, &w.view, v2::instance(&inst))
            }
            Bound::V3(p, w) => {
                w.load(view, true, &[]);
                p.slicesched_policy_policy().call_admit(store, &w.view, v3::instance(&inst))
            }
        }
    }

    pub fn route(&mut self, store: &mut Store<HostState>, view: &View<'_>, instances: &[InstanceView]) -> Answer<u32> {
        let sdk_inst = instances.iter().map(slicesched_policy::convert::instance);
        match self {
            Bound::V1(p, w) => {
                w.load(view, true, &[]);
                w.instances.clear();
                w.instances.extend(sdk_inst.map(|i| v1::instance(&i)));
                p.slicesched_policy_policy().call_route(store, &w.view, &w.instances)
            }
            Bound::V2(p, w) => {
                w.load(view, true, &[]);
                w.instances.clear();
                w.instances.extend(sdk_inst.map(|i| v2::instance(&i)));
                p.slicesched_policy_policy().call_route(store, &w.view, &w.instances)
            }
            Bound::V3(p, w) => {
                w.load(view, true, &[]);
                w.instances.clear();
                w.instances.extend(sdk_inst.map(|i| v3::instance(&i)));
                p.slicesched_policy_policy().call_route(store, &w.view, &w.instances)
            }
        }
    }
}

/// The conversions whose WIT types are the same in every version, for the version
/// module `wit` names (`instance` gained fields in 0.3.0: each version has its own).
macro_rules! shared_conversions {
    () => {
        pub fn placement(p: &wit::Placement) -> sdk::Placement {
            sdk::Placement { op: p.op, group: p.group, priority: p.priority }
        }

        fn homes(v: &sdk::View) -> Vec<wit::Home> {
            v.homes
                .iter()
                .map(|h| wit::Home {
                    tenant: h.tenant,
                    group: h.group,
                    first_layer: h.first_layer,
                    end_layer: h.end_layer,
                    is_home: h.is_home,
                    serves: h.serves,
                })
                .collect()
        }

        fn links(v: &sdk::View) -> Vec<wit::Link> {
            v.links
                .iter()
                .map(|l| wit::Link { same_device: l.same_device, latency_ns: l.latency_ns, bandwidth: l.bandwidth })
                .collect()
        }

        pub fn ready_op(r: &slicesched_policy::ReadyOp) -> wit::ReadyOp {
            use slicesched_model::OpKind as K;
            use wit::OpKind as W;
            let kind = match r.kind {
                K::Embedding => W::Embedding,
                K::InputNorm => W::InputNorm,
                K::QkvProj => W::QkvProj,
                K::Rope => W::Rope,
                K::Attention => W::Attention,
                K::OProj => W::OProj,
                K::AllReduce => W::AllReduce,
                K::ResidualAdd => W::ResidualAdd,
                K::PostAttnNorm => W::PostAttnNorm,
                K::GateUpProj => W::GateUpProj,
                K::Activation => W::Activation,
                K::DownProj => W::DownProj,
                K::FinalNorm => W::FinalNorm,
                K::LmHead => W::LmHead,
                K::AllGather => W::AllGather,
                K::Transfer => W::Transfer,
                // The interface's kinds are frozen: new kinds go as their cost class
                // (`OpKind::cost_class`).
                K::Router => W::QkvProj,
                K::ExpertUp => W::GateUpProj,
                K::ExpertDown => W::DownProj,
                K::AllToAll => W::AllGather,
            };
            wit::ReadyOp {
                tenant: r.tenant.0,
                kind,
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

        pub fn info(i: wit::Info) -> sdk::Info {
            let replicas = match i.replicas {
                wit::ReplicaMode::None => sdk::ReplicaMode::None,
                wit::ReplicaMode::Weights => sdk::ReplicaMode::Weights,
                wit::ReplicaMode::Serving => sdk::ReplicaMode::Serving,
                wit::ReplicaMode::Both => sdk::ReplicaMode::Both,
            };
            sdk::Info {
                name: i.name,
                version: i.version,
                replicas,
                context_switch_ns: i.context_switch_ns,
                spatial_sharing: i.spatial_sharing,
                reads_view: i.reads_view,
            }
        }
    };
}
pub(crate) use shared_conversions;

/// What 0.2.0 and later share (flat per-GPU figures, tenants in the deployment, the
/// `what-if` import), for the version module `wit` and `wh` (its host interface) name.
macro_rules! since_v0_2_conversions {
    () => {
        /// The view and batch, refilled in place per call.
        pub struct Wire {
            pub view: wit::View,
            pub ready: Vec<wit::ReadyOp>,
            pub instances: Vec<wit::Instance>,
        }

        impl Default for Wire {
            fn default() -> Self {
                let view =
                    wit::View { now_ns: 0, gpu_figures: Vec::new(), slack_ns: Vec::new(), instances: Vec::new() };
                Self { view, ready: Vec::new(), instances: Vec::new() }
            }
        }

        impl Wire {
            /// What changes between decisions (see `v1::Wire::load`).
            pub fn load(&mut self, v: &View<'_>, instances: bool, ready: &[ReadyOp]) {
                let out = &mut self.view;
                out.now_ns = v.now_ns;
                out.gpu_figures.clear();
                for ((&b, &q), &o) in v.gpu_busy_until.iter().zip(v.gpu_queued_ns).zip(v.gpu_owner_need_ns) {
                    out.gpu_figures.extend_from_slice(&[b, q, o]);
                }
                out.slack_ns.clear();
                out.slack_ns.extend(v.tenants.iter().map(|t| t.slack_ns));
                out.instances.clear();
                if instances {
                    out.instances
                        .extend(v.instances.iter().map(|i| instance(&slicesched_policy::convert::instance(i))));
                }
                self.ready.clear();
                self.ready.extend(ready.iter().map(ready_op));
            }
        }

        /// The run-constant part, for `configure`: the deployment from `d`, the tenants'
        /// fixed figures from `v`.
        pub fn deployment(v: &View<'_>, d: &sdk::View) -> wit::Deployment {
            wit::Deployment {
                homes: homes(d),
                groups: d.groups.clone(),
                links: links(d),
                tenants: v
                    .tenants
                    .iter()
                    .map(|t| wit::Tenant { home: t.home.0, layers: t.layers, tpot_target_ns: t.tpot_target_ns })
                    .collect(),
            }
        }

        /// The `what-if` import's answer in this version's types.
        pub fn what_if_answer(a: &sdk::WhatIfAnswer) -> wh::WhatIfAnswer {
            wh::WhatIfAnswer {
                outcomes: a
                    .outcomes
                    .iter()
                    .map(|o| wh::Outcome {
                        verdict: verdict(o.verdict),
                        start_ns: o.start_ns,
                        finish_ns: o.finish_ns,
                        transfer_ns: o.transfer_ns,
                        transfer_bytes: o.transfer_bytes,
                        peak_bytes: o.peak_bytes,
                    })
                    .collect(),
                delays: a
                    .delays
                    .iter()
                    .map(|d| wh::Delay { probe: d.probe, tenant: d.tenant, delay_ns: d.delay_ns })
                    .collect(),
            }
        }

        fn verdict(v: sdk::Verdict) -> wh::Verdict {
            use sdk::Verdict as V;
            match v {
                V::Accepted => wh::Verdict::Accepted,
                V::NotOffered => wh::Verdict::NotOffered,
                V::NoSuchGroup => wh::Verdict::NoSuchGroup,
                V::AttentionAway => wh::Verdict::AttentionAway,
                V::WeightsMissing => wh::Verdict::WeightsMissing,
                V::GuestMemory => wh::Verdict::GuestMemory,
                V::OwnerGuard => wh::Verdict::OwnerGuard,
                V::MemoryOverCapacity => wh::Verdict::MemoryOverCapacity,
                V::DelaysOwner => wh::Verdict::DelaysOwner,
                V::TimelineRefused => wh::Verdict::TimelineRefused,
                V::OverBudget => wh::Verdict::OverBudget,
            }
        }
    };
}
pub(crate) use since_v0_2_conversions;

/// An engine instance in a version's `instance` record: the fields every version has,
/// and those a later version added (0.3.0: `prefill_tokens`, `batch_tokens`), named by
/// the version module.
macro_rules! instance_conversion {
    ($($added:ident),*) => {
        /// An instance as this version carries it.
        pub fn instance(i: &sdk::Instance) -> wit::Instance {
            wit::Instance {
                index: i.index,
                tenant: i.tenant,
                group: i.group,
                is_home: i.is_home,
                waiting: i.waiting,
                running: i.running,
                inflight: i.inflight,
                kv_free_blocks: i.kv_free_blocks,
                kv_total_blocks: i.kv_total_blocks,
                $($added: i.$added,)*
            }
        }
    };
}
pub(crate) use instance_conversion;
