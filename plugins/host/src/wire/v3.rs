//! Interface 0.3.0: 0.2.0's wire, and an instance's prefill backlog and batch budget.

use crate::bindings::v3::slicesched::policy::host as wh;
use crate::bindings::v3::wit;
use slicesched_plugin_sdk as sdk;
use slicesched_policy::{ReadyOp, View};

super::shared_conversions!();
super::since_v0_2_conversions!();

// An instance's prefill backlog and batch budget are new in 0.3.0.
super::instance_conversion!(prefill_tokens, batch_tokens);
