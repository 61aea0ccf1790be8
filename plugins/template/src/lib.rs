//! A policy plugin to copy. Every hook is the SDK's default (each op on its home
//! group, one micro-batch at a time, new requests to the home instance), so it also
//! measures the bare cost of a call across the sandbox.
//!
//! To write your own: copy this folder, rename the package, override the hooks of
//! [`slicesched_plugin_sdk::Policy`] you need (`place`, or `place_with_what_if` to ask
//! the core what candidate placements would get first: see `plugins/earliest`), then
//! `slicesched plugin build DIR` and `slicesched plugin validate FILE`.

use slicesched_plugin_sdk::{Info, Policy};

#[derive(Default)]
pub struct Template;

impl Policy for Template {
    fn info(&self) -> Info {
        Info::new("template", env!("CARGO_PKG_VERSION"))
    }
}

slicesched_plugin_sdk::export_policy!(Template);
