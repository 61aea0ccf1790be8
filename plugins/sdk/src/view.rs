//! Questions a policy asks of its view, answered exactly as the core answers them.

use crate::{Instance, View};

impl View {
    /// When `group` could start a new op: all its GPUs free of started and queued work.
    pub fn group_free_at(&self, group: u32) -> u64 {
        self.groups[group as usize]
            .iter()
            .map(|&g| self.gpus[g as usize].busy_until_ns.max(self.now_ns) + self.gpus[g as usize].queued_ns)
            .max()
            .unwrap_or(self.now_ns)
    }

    /// Nanoseconds to move `bytes` from group `from` to group `to` (0 on the same group).
    pub fn transfer_ns(&self, from: u32, to: u32, bytes: u64) -> u64 {
        if from == to {
            return 0;
        }
        self.links[from as usize * self.groups.len() + to as usize].transfer_ns(bytes)
    }

    /// Whether `group` holds the weights of `tenant`'s `layer` (None: embedding and LM
    /// head, which only whole-model copies hold).
    pub fn holds(&self, tenant: u32, group: u32, layer: Option<u32>) -> bool {
        let layers = self.tenants.get(tenant as usize).map_or(0, |t| t.layers);
        self.homes.iter().any(|h| {
            h.tenant == tenant
                && h.group == group
                && match layer {
                    Some(l) => h.first_layer <= l && l < h.end_layer,
                    None => h.first_layer == 0 && h.end_layer == layers,
                }
        })
    }
}

impl View {
    /// Refills `out` with, per tenant, every group holding some of its weights:
    /// (group, first layer, end layer), homes and replicas in the deployment's order.
    /// Run-constant: compute it in `configure`, not per decision.
    pub fn weight_holders(&self, out: &mut Vec<Vec<(u32, u32, u32)>>) {
        out.iter_mut().for_each(Vec::clear);
        for h in &self.homes {
            let t = h.tenant as usize;
            if out.len() <= t {
                out.resize_with(t + 1, Vec::new);
            }
            out[t].push((h.group, h.first_layer, h.end_layer));
        }
    }
}

impl View {
    /// The least loaded of `instances`: queued requests per KV block it has, then when
    /// its GPUs free up; the first one wins ties, so light load stays home. What the
    /// request-level policies route by.
    pub fn least_loaded(&self, instances: &[Instance]) -> usize {
        let load = |i: &Instance| {
            let reqs = (i.waiting + i.running) as f64 / i.kv_total_blocks.max(1) as f64;
            let busy = self.group_free_at(i.group).saturating_sub(self.now_ns);
            (reqs * 1e6) as u64 + busy / 1000
        };
        instances.iter().enumerate().min_by_key(|(k, i)| (load(i), *k)).map_or(0, |(k, _)| k)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Gpu, Home, Link, Tenant, View};

    fn view() -> View {
        let gpu = |busy, queued| Gpu { busy_until_ns: busy, queued_ns: queued, owner_need_ns: u64::MAX };
        let link = Link { same_device: false, latency_ns: 1_000, bandwidth: 1e9 };
        View {
            now_ns: 100,
            gpus: vec![gpu(50, 0), gpu(300, 20), gpu(0, 0)],
            tenants: vec![Tenant { home: 0, layers: 4, slack_ns: 0, tpot_target_ns: 1 }],
            instances: vec![],
            homes: vec![
                Home { tenant: 0, group: 0, first_layer: 0, end_layer: 4, is_home: true, serves: true },
                Home { tenant: 0, group: 1, first_layer: 2, end_layer: 4, is_home: false, serves: false },
            ],
            groups: vec![vec![0], vec![1, 2]],
            links: vec![Link { same_device: true, latency_ns: 0, bandwidth: 1.0 }, link, link, link],
        }
    }

    #[test]
    fn free_at_is_the_latest_gpu_of_the_group() {
        let v = view();
        assert_eq!(v.group_free_at(0), 100);
        assert_eq!(v.group_free_at(1), 320);
    }

    #[test]
    fn transfers_price_latency_and_bandwidth() {
        let v = view();
        assert_eq!(v.transfer_ns(0, 0, 1 << 20), 0);
        assert_eq!(v.transfer_ns(0, 1, 0), 0);
        assert_eq!(v.transfer_ns(0, 1, 1_000), 1_000 + 1_000);
    }

    #[test]
    fn layer_ranges_hold_only_their_layers() {
        let v = view();
        assert!(v.holds(0, 1, Some(3)));
        assert!(!v.holds(0, 1, Some(1)));
        assert!(!v.holds(0, 1, None));
        assert!(v.holds(0, 0, None));
    }
}
