//! What-if for policies: a policy may ask, while it decides, what the core would do
//! with a placement and what it would cost, before answering.

use slicesched_gmg::{GroupId, OpId, TenantId};

/// A placement to ask about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// An op of the batch being decided.
    pub op: OpId,
    pub group: GroupId,
    pub priority: i32,
}

/// What the core would do with a probe's placement: its checks, in their order. The
/// SDK's type, so a policy's native build sees the core's verdicts as they are.
pub use slicesched_plugin_sdk::Verdict;

/// The prediction for one probe (times are the probe's own, on its group, even when
/// the verdict sends the op home; zero where nothing was computed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeOutcome {
    pub verdict: Verdict,
    pub start_ns: u64,
    pub finish_ns: u64,
    /// The slowest of the transfers bringing its inputs to the group, and their bytes.
    pub transfer_ns: u64,
    pub transfer_bytes: u64,
    /// Highest predicted memory use among the group's GPUs while it runs.
    pub peak_bytes: u64,
}

impl ProbeOutcome {
    /// An outcome where nothing was computed.
    pub fn empty(verdict: Verdict) -> Self {
        Self { verdict, start_ns: 0, finish_ns: 0, transfer_ns: 0, transfer_bytes: 0, peak_bytes: 0 }
    }
}

/// A committed op of `tenant` that probe `probe` would finish later, by `delay_ns`
/// (the largest such delay of that tenant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantDelay {
    pub probe: u32,
    pub tenant: TenantId,
    pub delay_ns: u64,
}

/// The core's answers to probes. Each probe is asked on its own, from the committed
/// state plus that one op: probes are alternatives, not a plan.
pub trait WhatIf {
    /// Appends one outcome per probe to `out` and, per probe, the tenants it delays to
    /// `delays`. Asking changes nothing.
    fn what_if(&self, probes: &[Probe], out: &mut Vec<ProbeOutcome>, delays: &mut Vec<TenantDelay>);
}

/// A view's what-if, if the caller offers one.
#[derive(Clone, Copy, Default)]
pub struct WhatIfHandle<'a>(pub Option<&'a dyn WhatIf>);

impl std::fmt::Debug for WhatIfHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "WhatIf(offered)" } else { "WhatIf(none)" })
    }
}

impl WhatIfHandle<'_> {
    /// Asks the core; without one, every probe comes back `NotOffered`.
    pub fn ask(&self, probes: &[Probe], out: &mut Vec<ProbeOutcome>, delays: &mut Vec<TenantDelay>) {
        match self.0 {
            Some(w) => w.what_if(probes, out, delays),
            None => out.extend(probes.iter().map(|_| ProbeOutcome::empty(Verdict::NotOffered))),
        }
    }
}
