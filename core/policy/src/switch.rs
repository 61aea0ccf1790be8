//! Switching a running scheduler to another policy at a decision boundary.
//!
//! [`Switchable`] forwards every hook to its current policy; a [`SwitchHandle`] (held
//! by whoever decides: an operator's API call, a test) queues a replacement, and the
//! next hook call installs it before deciding. Work already placed stays where it is
//! (placements are committed by the core, not held by the policy), so nothing is
//! dropped; the ops of the next decision go to the new policy.

use crate::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};
use std::sync::{Arc, Mutex};

/// Why a replacement policy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwitchError {
    /// Replicas are placed before the run and spatial sharing shapes the devices: a
    /// policy that wants others would run on a deployment it was not planned for.
    #[error("policy `{new}` needs {what} different from the running `{old}`'s; it can only start a new run")]
    Incompatible { old: String, new: String, what: &'static str },
}

/// Queues a replacement for a [`Switchable`] policy. Cheap to clone; usable from
/// another thread.
#[derive(Clone, Default)]
pub struct SwitchHandle(Arc<Mutex<Option<Box<dyn Policy>>>>);

impl SwitchHandle {
    /// Queues `next`; it takes over at the next decision (a later request replaces an
    /// earlier one not yet installed).
    pub fn request(&self, next: Box<dyn Policy>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(next);
    }
}

/// A policy that can be replaced between decisions.
pub struct Switchable {
    current: Box<dyn Policy>,
    handle: SwitchHandle,
    /// Replacements installed so far, and the last refusal.
    pub switches: u32,
    pub last_refusal: Option<SwitchError>,
}

impl Switchable {
    pub fn new(first: Box<dyn Policy>) -> Self {
        Self::with_handle(first, SwitchHandle::default())
    }

    /// Runs `first`, taking replacements queued through `handle` (which may have been
    /// handed out before this policy existed).
    pub fn with_handle(first: Box<dyn Policy>, handle: SwitchHandle) -> Self {
        Self { current: first, handle, switches: 0, last_refusal: None }
    }

    /// The handle that queues replacements.
    pub fn handle(&self) -> SwitchHandle {
        self.handle.clone()
    }

    /// Installs a queued replacement if there is one and it fits the running deployment.
    fn boundary(&mut self) {
        let Some(next) = self.handle.0.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        let what = if next.replicas() != self.current.replicas() {
            Some("replicas")
        } else if next.spatial_sharing() != self.current.spatial_sharing() {
            Some("spatial sharing")
        } else {
            None
        };
        match what {
            Some(what) => {
                let (old, new) = (self.current.name().to_string(), next.name().to_string());
                self.last_refusal = Some(SwitchError::Incompatible { old, new, what });
            }
            None => {
                self.current = next;
                self.switches += 1;
            }
        }
    }
}

impl Policy for Switchable {
    fn name(&self) -> &str {
        self.current.name()
    }

    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        self.boundary();
        self.current.place(view, ready, out)
    }

    /// Always: the policy switched to may read the view, and the core sets up its
    /// what-if timeline only for runs whose policy does.
    fn reads_view(&self) -> bool {
        true
    }

    fn context_switch_ns(&self) -> u64 {
        self.current.context_switch_ns()
    }

    fn spatial_sharing(&self) -> bool {
        self.current.spatial_sharing()
    }

    fn replicas(&self) -> ReplicaMode {
        self.current.replicas()
    }

    fn admit(&mut self, view: &View<'_>, inst: &InstanceView) -> bool {
        self.boundary();
        self.current.admit(view, inst)
    }

    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        self.boundary();
        self.current.route(view, instances)
    }
}
