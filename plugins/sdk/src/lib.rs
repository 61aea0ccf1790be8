//! Guest SDK for SliceScheduler policy plugins.
//!
//! A policy is a type implementing [`Policy`]: [`Policy::info`] is required, every
//! other hook has a safe default. The same source builds two ways:
//!
//! - natively, as an `rlib` the core calls through its adapter (this is how the
//!   shipped policies run when the scheduler is asked for `native:NAME`);
//! - for `wasm32-unknown-unknown` with the `guest` feature, where [`export_policy!`]
//!   wires the type to the exports of `plugins/wit/since_v0.3.0/policy.wit` and
//!   `slicesched plugin build` turns the module into a component.
//!
//! The data types mirror the WIT records (the view's per-GPU figures, which cross as
//! one flat list, are unpacked into [`Gpu`] records). Ops are named by their index in
//! the `ready` slice, groups and GPUs by their index in the view. A policy that wants
//! to ask the core's committed timeline about candidate placements before answering
//! implements [`Policy::place_with_what_if`] and batches its [`Probe`]s.
//!
//! ```
//! use slicesched_plugin_sdk::{Info, Placement, Policy, ReadyOp, View};
//!
//! #[derive(Default)]
//! struct Home;
//!
//! impl Policy for Home {
//!     fn info(&self) -> Info {
//!         Info::new("home", "0.1.0")
//!     }
//!     fn place(&mut self, _view: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
//!         out.extend(ready.iter().enumerate().map(|(i, r)| Placement { op: i as u32, group: r.home, priority: 0 }));
//!         Ok(())
//!     }
//! }
//! // slicesched_plugin_sdk::export_policy!(Home);
//! ```

// Lets the generated bindings name this crate by its path from inside it too.
#[cfg(feature = "guest")]
extern crate self as slicesched_plugin_sdk;

mod types;
mod view;

pub use types::*;

#[cfg(feature = "guest")]
pub mod guest;

pub mod alloc;

#[cfg(all(feature = "guest", target_family = "wasm"))]
#[global_allocator]
static ALLOCATOR: alloc::SizeClasses = alloc::SizeClasses::new();

/// The WIT interface version this SDK implements.
pub const INTERFACE_VERSION: &str = "0.3.0";

/// A placement policy. Only [`Policy::info`] is required; each other hook defaults to
/// what the `dedicated` baseline does, which is always safe.
pub trait Policy {
    /// Name, version and the core services the policy uses.
    fn info(&self) -> Info;

    /// Called before the first decision and whenever the deployment (homes and
    /// replicas, groups, links) changes, with the view holding it: precompute here what
    /// depends only on it, so that each `place` does not redo it. An error fails the
    /// decision that needed it (its ops go home).
    fn configure(&mut self, _view: &View) -> Result<(), String> {
        Ok(())
    }

    /// Places a batch of ready ops by pushing to `out` (which arrives empty). Ops left
    /// out run on their home group.
    fn place(&mut self, _view: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
        out.extend(ready.iter().enumerate().map(|(i, r)| Placement { op: i as u32, group: r.home, priority: 0 }));
        Ok(())
    }

    /// What the scheduler calls to place a batch: `place`, unless the policy wants to
    /// ask the core's what-if about candidate placements first, in which case it
    /// implements this hook instead. Each [`WhatIf::ask`] is a call into the core
    /// (across the sandbox for a Wasm plugin): batch the probes.
    fn place_with_what_if(
        &mut self,
        view: &View,
        ready: &[ReadyOp],
        _what_if: &mut dyn WhatIf,
        out: &mut Vec<Placement>,
    ) -> Result<(), String> {
        self.place(view, ready, out)
    }

    /// Whether `inst` may start another micro-batch while `inst.inflight` execute.
    fn admit(&mut self, _view: &View, inst: &Instance) -> Result<bool, String> {
        Ok(inst.inflight == 0)
    }

    /// Which of a tenant's instances (home first) takes a new request.
    fn route(&mut self, _view: &View, _instances: &[Instance]) -> Result<u32, String> {
        Ok(0)
    }

    /// True only if `place` answers every op with its home group at priority 0 in the
    /// order offered (asking no what-if: the core then keeps no timeline to answer
    /// one), `admit` is the default (one iteration per instance at a time), and
    /// neither keeps state: the core may then run an iteration on GPUs no other
    /// instance uses as one event, without asking (its results are identical). Native
    /// builds only: a Wasm plugin is always asked op by op.
    fn home_only(&self) -> bool {
        false
    }

    /// True only if `place` answers an op with its home group whenever the view shows
    /// that group free (its GPUs idle, nothing queued, `group_free_at(home) <= now`),
    /// at any priority, and keeps no state; `admit` and `route` may keep state, but
    /// none that depends on how often `place` is called. The core may then run an
    /// iteration as one event while nothing else can reach its GPUs and no request of
    /// its tenant arrives (its results are identical). Native builds only.
    fn home_when_free(&self) -> bool {
        false
    }
}

/// Wires a type implementing [`Policy`] and `Default` to the component's exports.
///
/// On a native build this expands to nothing: the core calls the type directly. On
/// `wasm32` (with the SDK's `guest` feature) it keeps one instance of the policy, turns
/// the WIT values into the SDK's types and back, and installs a panic hook that sends
/// the panic message to the host's `log` before the module aborts (a bare trap would
/// lose it).
#[macro_export]
macro_rules! export_policy {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __SliceschedExports;
            ::std::thread_local! {
                static POLICY: ::std::cell::RefCell<$crate::guest::State<$ty>> =
                    ::std::cell::RefCell::new($crate::guest::State::new(<$ty as ::core::default::Default>::default()));
            }
            impl $crate::guest::exports::slicesched::policy::policy::Guest for __SliceschedExports {
                fn describe() -> $crate::guest::wit::Info {
                    POLICY.with(|p| p.borrow_mut().describe())
                }
                fn configure(
                    deployment: $crate::guest::wit::Deployment,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    POLICY.with(|p| p.borrow_mut().configure(deployment))
                }
                fn place(
                    view: $crate::guest::wit::View,
                    ready: ::std::vec::Vec<$crate::guest::wit::ReadyOp>,
                ) -> ::core::result::Result<::std::vec::Vec<$crate::guest::wit::Placement>, ::std::string::String>
                {
                    POLICY.with(|p| p.borrow_mut().place(view, ready))
                }
                fn admit(
                    view: $crate::guest::wit::View,
                    inst: $crate::guest::wit::Instance,
                ) -> ::core::result::Result<bool, ::std::string::String> {
                    POLICY.with(|p| p.borrow_mut().admit(view, inst))
                }
                fn route(
                    view: $crate::guest::wit::View,
                    instances: ::std::vec::Vec<$crate::guest::wit::Instance>,
                ) -> ::core::result::Result<u32, ::std::string::String> {
                    POLICY.with(|p| p.borrow_mut().route(view, instances))
                }
            }
            $crate::guest::export!(__SliceschedExports);
        };
    };
}
