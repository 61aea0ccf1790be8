//! The deployment plan: which weights live on which GPUs.

use crate::{GroupId, TenantId};
use serde::Serialize;
use slicesched_hw::{Cluster, GpuId};

/// A set of GPUs that runs an op together (one GPU, or a tensor-parallel group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    pub id: GroupId,
    pub gpus: Vec<GpuId>,
}

/// A tenant's weights on one group: its home, or a replica placed by a planner.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantHome {
    pub tenant: TenantId,
    pub group: GroupId,
    /// Layers `[first, last)` whose weights are resident; all layers for a home.
    pub layers: (u32, u32),
    pub weight_bytes_per_gpu: u64,
    /// The tenant's container: its KV cache lives here and its attention runs here.
    pub is_home: bool,
    /// An engine instance with its own KV cache serves the tenant from this group: the
    /// home always; request-level replicas (pooled serving) too; weight-only replicas
    /// (operator borrowing) never.
    pub serves: bool,
    /// That instance's KV-cache blocks (0 until the KV caches are sized, and for
    /// weight-only replicas).
    pub kv_blocks: u32,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DeploymentError {
    #[error("tenant `{tenant}`: GPU {gpu} does not exist (cluster has {n} GPUs)")]
    NoSuchGpu { tenant: String, gpu: u32, n: usize },
    #[error("tenant `{tenant}`: no GPUs")]
    NoGpus { tenant: String },
    #[error("tenant `{tenant}`: GPU {gpu} listed twice")]
    Duplicate { tenant: String, gpu: u32 },
    #[error("GPU {gpu}: weights need {need_gb:.1} GB but only {cap_gb:.1} GB are usable (tenants: {tenants})")]
    DoesNotFit { gpu: u32, need_gb: f64, cap_gb: f64, tenants: String },
}

/// Groups and the weights resident on them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Deployment {
    pub groups: Vec<Group>,
    pub homes: Vec<TenantHome>,
}

impl Deployment {
    /// Finds or creates the group made of exactly `gpus`.
    pub fn group_for(&mut self, gpus: &[GpuId]) -> GroupId {
        if let Some(g) = self.groups.iter().find(|g| g.gpus == gpus) {
            return g.id;
        }
        let id = GroupId(self.groups.len() as u32);
        self.groups.push(Group { id, gpus: gpus.to_vec() });
        id
    }

    /// Checks a tenant's GPU list against the cluster.
    pub fn check_gpus(cluster: &Cluster, tenant: &str, gpus: &[GpuId]) -> Result<(), DeploymentError> {
        if gpus.is_empty() {
            return Err(DeploymentError::NoGpus { tenant: tenant.into() });
        }
        for (i, g) in gpus.iter().enumerate() {
            if g.0 as usize >= cluster.len() {
                return Err(DeploymentError::NoSuchGpu { tenant: tenant.into(), gpu: g.0, n: cluster.len() });
            }
            if gpus[..i].contains(g) {
                return Err(DeploymentError::Duplicate { tenant: tenant.into(), gpu: g.0 });
            }
        }
        Ok(())
    }

    pub fn group(&self, id: GroupId) -> &Group {
        &self.groups[id.index()]
    }

    /// The tenant's home group.
    pub fn home(&self, tenant: TenantId) -> Option<&TenantHome> {
        self.homes.iter().find(|h| h.tenant == tenant && h.is_home)
    }

    /// Whether `group` holds the weights of `tenant`'s layer (None: embedding and LM
    /// head, which only whole-model copies hold).
    pub fn holds(&self, tenant: TenantId, group: GroupId, layer: Option<u32>, layers: u32) -> bool {
        self.homes.iter().any(|h| {
            h.tenant == tenant
                && h.group == group
                && match layer {
                    Some(l) => h.layers.0 <= l && l < h.layers.1,
                    None => h.layers == (0, layers),
                }
        })
    }

    /// Groups other than the home that hold some of `tenant`'s weights.
    pub fn replicas(&self, tenant: TenantId) -> impl Iterator<Item = &TenantHome> {
        self.homes.iter().filter(move |h| h.tenant == tenant && !h.is_home)
    }

    /// The tenant whose container (home) includes `gpu`, if any (the first one).
    pub fn owner_of(&self, gpu: GpuId) -> Option<TenantId> {
        self.homes.iter().find(|h| h.is_home && self.group(h.group).gpus.contains(&gpu)).map(|h| h.tenant)
    }

    /// Bytes of weights resident on `gpu`, all tenants.
    pub fn weight_bytes_on(&self, gpu: GpuId) -> u64 {
        self.homes.iter().filter(|h| self.group(h.group).gpus.contains(&gpu)).map(|h| h.weight_bytes_per_gpu).sum()
    }

    /// Groups that contain `gpu`.
    pub fn groups_with(&self, gpu: GpuId) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(move |g| g.gpus.contains(&gpu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_shared_and_checked() {
        let c = Cluster::uniform("H100", 4).unwrap();
        let mut d = Deployment::default();
        let a = d.group_for(&[GpuId(0), GpuId(1)]);
        let b = d.group_for(&[GpuId(0), GpuId(1)]);
        assert_eq!(a, b);
        assert!(matches!(Deployment::check_gpus(&c, "x", &[GpuId(9)]), Err(DeploymentError::NoSuchGpu { .. })));
        assert!(matches!(Deployment::check_gpus(&c, "x", &[]), Err(DeploymentError::NoGpus { .. })));
        assert!(matches!(
            Deployment::check_gpus(&c, "x", &[GpuId(1), GpuId(1)]),
            Err(DeploymentError::Duplicate { .. })
        ));
    }
}
