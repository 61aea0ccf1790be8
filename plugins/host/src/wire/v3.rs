//! Interface 0.3.0: 0.2.0's wire, and an instance's prefill backlog and batch budget.

use crate::bindings::v3::slicesched::policy::host as wh;
use crate::bindings::v3::wit;
use slicesched_plugin_sdk as sdk;
use slicesched_policy::{ReadyOp, View};

super::shared_conversions!();
super::since_v0_2_conversions!();

/// An instance with its prefill backlog and batch budget (new in 0.3.0).
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
        prefill_tokens: i.prefill_tokens,
        batch_tokens: i.batch_tokens,
    }
}
