//! Interface 0.2.0: GPU figures as one flat `list<u64>`, tenants' slack as a
//! `list<s64>`, tenants' fixed figures in the deployment, and the `what-if` import.

use crate::bindings::v2::slicesched::policy::host as wh;
use crate::bindings::v2::wit;
use slicesched_plugin_sdk as sdk;
use slicesched_policy::{ReadyOp, View};

super::shared_conversions!();
super::instance_conversion!();
super::since_v0_2_conversions!();
