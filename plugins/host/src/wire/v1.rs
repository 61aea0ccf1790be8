//! Interface 0.1.0: GPU and tenant figures as lists of records, no what-if.

use crate::bindings::v1::wit;
use slicesched_plugin_sdk as sdk;
use slicesched_policy::{ReadyOp, View};

super::shared_conversions!();
super::instance_conversion!();

/// The 0.1.0 view and batch, refilled in place per call.
pub struct Wire {
    pub view: wit::View,
    pub ready: Vec<wit::ReadyOp>,
    pub instances: Vec<wit::Instance>,
}

impl Default for Wire {
    fn default() -> Self {
        let view = wit::View { now_ns: 0, gpus: Vec::new(), tenants: Vec::new(), instances: Vec::new() };
        Self { view, ready: Vec::new(), instances: Vec::new() }
    }
}

impl Wire {
    /// What changes between decisions. `instances`: send the engine instances too
    /// (`admit`, `route`); `place` sends none (lowering them per op decision was a
    /// fifth of a replay's time, RATIONALE.md).
    pub fn load(&mut self, v: &View<'_>, instances: bool, ready: &[ReadyOp]) {
        let out = &mut self.view;
        out.now_ns = v.now_ns;
        out.gpus.clear();
        out.gpus.extend(
            v.gpu_busy_until.iter().zip(v.gpu_queued_ns).zip(v.gpu_owner_need_ns).map(|((&b, &q), &o)| wit::Gpu {
                busy_until_ns: b,
                queued_ns: q,
                owner_need_ns: o,
            }),
        );
        out.tenants.clear();
        out.tenants.extend(v.tenants.iter().map(|t| wit::Tenant {
            home: t.home.0,
            layers: t.layers,
            slack_ns: t.slack_ns,
            tpot_target_ns: t.tpot_target_ns,
        }));
        out.instances.clear();
        if instances {
            out.instances.extend(v.instances.iter().map(|i| instance(&slicesched_policy::convert::instance(i))));
        }
        self.ready.clear();
        self.ready.extend(ready.iter().map(ready_op));
    }
}

/// The run-constant part, for `configure`.
pub fn deployment(v: &sdk::View) -> wit::Deployment {
    wit::Deployment { homes: homes(v), groups: v.groups.clone(), links: links(v) }
}
