//! Interface 0.2.0: GPU figures as one flat `list<u64>`, tenants' slack as a
//! `list<s64>`, tenants' fixed figures in the deployment, and the `what-if` import.

use crate::bindings::v2::slicesched::policy::host as wh;
use crate::bindings::v2::wit;
use slicesched_plugin_sdk as sdk;
use slicesched_policy::{ReadyOp, View};

super::shared_conversions!();

/// An instance as 0.1.0 and 0.2.0 carry it (no prefill backlog).
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
    }
}

/// The 0.2.0 view and batch, refilled in place per call.
pub struct Wire {
    pub view: wit::View,
    pub ready: Vec<wit::ReadyOp>,
    pub instances: Vec<wit::Instance>,
}

impl Default for Wire {
    fn default() -> Self {
        let view = wit::View { now_ns: 0, gpu_figures: Vec::new(), slack_ns: Vec::new(), instances: Vec::new() };
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
            out.instances.extend(v.instances.iter().map(|i| instance(&slicesched_policy::convert::instance(i))));
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
        delays: a.delays.iter().map(|d| wh::Delay { probe: d.probe, tenant: d.tenant, delay_ns: d.delay_ns }).collect(),
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
