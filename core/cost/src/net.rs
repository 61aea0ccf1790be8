//! Collectives and point-to-point copies: latency + bytes/bandwidth fitted on NCCL
//! profiles, rescaled to the link a group actually runs over.

use crate::curve::fit_line_rel;
use crate::profiles::NetProfile;
use slicesched_hw::{Link, LinkKind};

/// NVLink of the profiled A100 DGX, per direction (catalog figure), and the catalog's
/// NVLink hop latency: what measured times are relative to.
pub(crate) const REF_NVLINK_BW: f64 = 300e9;
const REF_NVLINK_LAT_NS: f64 = 8_000.0;

/// `t = lat + bytes · secs_per_byte` for one group size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinFit {
    pub workers: u32,
    pub lat: f64,
    pub per_byte: f64,
}

#[derive(Debug, Clone)]
pub(crate) struct NetFit {
    /// Sorted by `workers`.
    pub all_reduce: Vec<LinFit>,
    /// Achieved fraction of link bandwidth for a copy.
    pub p2p_eff: f64,
}

impl Default for NetFit {
    /// Without NCCL tables: ring all-reduce at 70% of the reference link, 20 µs start.
    fn default() -> Self {
        let per = |w: u32| 2.0 * (w as f64 - 1.0) / w as f64 / (0.7 * REF_NVLINK_BW);
        Self {
            all_reduce: [2, 4, 8].iter().map(|&w| LinFit { workers: w, lat: 20e-6, per_byte: per(w) }).collect(),
            p2p_eff: 0.8,
        }
    }
}

fn ring(r: f64) -> f64 {
    2.0 * (r - 1.0) / r
}

impl NetFit {
    /// Fits on the first network folder (sorted by name, so `network_dgx` first) using
    /// only single-node groups: those are the NVLink numbers the scaling assumes.
    pub fn fit(nets: &[NetProfile]) -> Self {
        let mut fit = NetFit::default();
        let Some(net) = nets
            .iter()
            .find(|n| !n.all_reduce.is_empty() && !n.apex)
            .or_else(|| nets.iter().find(|n| !n.all_reduce.is_empty()))
        else {
            return fit;
        };
        let mut ws: Vec<u32> = net.all_reduce.iter().map(|r| r.workers).collect();
        ws.sort_unstable();
        ws.dedup();
        let mut fits = Vec::new();
        for w in ws.into_iter().filter(|&w| w > 1) {
            let pts: Vec<_> = net
                .all_reduce
                .iter()
                .filter(|r| r.workers == w && r.per_node == w)
                .map(|r| (r.size as f64, r.secs))
                .collect();
            if let Some((lat, per_byte)) = fit_line_rel(&pts) {
                fits.push(LinFit { workers: w, lat, per_byte });
            }
        }
        if !fits.is_empty() {
            fit.all_reduce = fits;
        }
        let sr = nets.iter().find(|n| !n.send_recv.is_empty());
        if let Some(sr) = sr {
            let pts: Vec<_> =
                sr.send_recv.iter().filter(|r| r.per_node == r.workers).map(|r| (r.size as f64, r.secs)).collect();
            if let Some((_, per_byte)) = fit_line_rel(&pts) {
                if per_byte > 0.0 {
                    fit.p2p_eff = (1.0 / per_byte / REF_NVLINK_BW).clamp(0.05, 1.0);
                }
            }
        }
        fit
    }

    /// Seconds of an all-reduce of `bytes` per GPU over `ranks` GPUs on `link`.
    pub fn all_reduce_secs(&self, bytes: f64, ranks: u32, link: &Link) -> f64 {
        if ranks <= 1 || bytes <= 0.0 || link.kind == LinkKind::SameDevice || self.all_reduce.is_empty() {
            return 0.0;
        }
        // The fit for the nearest profiled group size, its byte term rescaled by the
        // ring algorithm's traffic for the real size.
        let i = self.all_reduce.partition_point(|f| f.workers < ranks);
        let f = match (i.checked_sub(1).map(|j| self.all_reduce[j]), self.all_reduce.get(i)) {
            (_, Some(hi)) if hi.workers == ranks => *hi,
            (Some(lo), Some(hi)) => {
                if ranks - lo.workers <= hi.workers - ranks {
                    lo
                } else {
                    *hi
                }
            }
            (Some(lo), None) => lo,
            (None, Some(hi)) => *hi,
            (None, None) => return 0.0,
        };
        let r = ranks as f64;
        let per_byte = f.per_byte * ring(r) / ring(f.workers as f64) * (REF_NVLINK_BW / link.bandwidth);
        // Every ring step pays whatever latency the link adds over NVLink.
        let extra_lat = (link.latency_ns as f64 - REF_NVLINK_LAT_NS).max(0.0) * 1e-9 * 2.0 * (r - 1.0);
        f.lat + extra_lat + bytes * per_byte
    }

    /// An all-gather moves `(r-1)·bytes` into each GPU where a ring all-reduce moves
    /// `2(r-1)/r·bytes`: the same cost as an all-reduce of `bytes·r/2`.
    pub fn all_gather_secs(&self, bytes: f64, ranks: u32, link: &Link) -> f64 {
        self.all_reduce_secs(bytes * ranks as f64 / 2.0, ranks, link)
    }

    pub fn transfer_secs(&self, bytes: f64, link: &Link) -> f64 {
        if bytes <= 0.0 || link.kind == LinkKind::SameDevice {
            return 0.0;
        }
        link.latency_ns as f64 * 1e-9 + bytes / (link.bandwidth * self.p2p_eff)
    }
}
