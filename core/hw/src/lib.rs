//! GPU catalog and cluster descriptions.
//!
//! Architecture Invariant: figures here are vendor datasheet numbers (dense, no
//! sparsity). Measured efficiency lives in the cost model, never here.

mod custom;

pub use custom::{skus_from_toml, DeviceConfig, GpuEntry, OpTiming};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Index of a GPU in its cluster (`0..cluster.gpus.len()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GpuId(pub u32);

impl std::fmt::Display for GpuId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gpu{}", self.0)
    }
}

/// One GPU model of the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSku {
    pub name: String,
    /// Dense bf16/fp16 tensor-core peak, FLOP/s.
    pub peak_flops: f64,
    /// HBM bandwidth, bytes/s.
    pub hbm_bw: f64,
    /// Device memory, bytes.
    pub memory: u64,
    /// NVLink bandwidth per direction, bytes/s (0 where the SKU has none).
    pub nvlink_bw: f64,
    /// Host link bandwidth per direction, bytes/s.
    pub pcie_bw: f64,
    pub sm_count: u32,
    /// Boost clock, GHz (0 where unknown). With `sm_count` it sets the throughput of
    /// the kernels that reach only a fraction of HBM bandwidth (norms, activations).
    #[serde(default)]
    pub clock_ghz: f64,
}

const GB: f64 = 1e9;
const GIB: u64 = 1 << 30;

/// The built-in catalog (datasheet figures).
pub fn catalog() -> Vec<GpuSku> {
    let sku = |name: &str, tflops: f64, hbm: f64, mem_gb: u64, nvl: f64, pcie: f64, sms, clock_ghz| GpuSku {
        name: name.into(),
        peak_flops: tflops * 1e12,
        hbm_bw: hbm * GB,
        // Marketing "80 GB" is 80 GiB on these parts (81,920 MiB).
        memory: mem_gb * GIB,
        nvlink_bw: nvl * GB,
        pcie_bw: pcie * GB,
        sm_count: sms,
        clock_ghz,
    };
    vec![
        sku("A100-80GB", 312.0, 2039.0, 80, 300.0, 32.0, 108, 1.41),
        sku("H100-80GB", 989.4, 3350.0, 80, 450.0, 64.0, 132, 1.98),
        sku("H200-141GB", 989.4, 4800.0, 141, 450.0, 64.0, 132, 1.98),
        sku("L40S", 362.1, 864.0, 48, 0.0, 32.0, 142, 2.52),
        sku("A40", 149.7, 696.0, 48, 56.25, 32.0, 84, 1.74),
    ]
}

/// Looks up a catalog SKU by name (case-insensitive; `A100`, `H100`, `H200` accepted).
pub fn sku(name: &str) -> Result<GpuSku, HwError> {
    sku_in(name, &[])
}

/// Looks up `name` among `extra` (user-given GPUs, e.g. from [`skus_from_toml`]) first,
/// then in the catalog.
pub fn sku_in(name: &str, extra: &[GpuSku]) -> Result<GpuSku, HwError> {
    let n = name.to_ascii_uppercase();
    let hit = |s: &GpuSku| {
        let u = s.name.to_ascii_uppercase();
        u == n || u.split('-').next() == Some(n.as_str())
    };
    extra.iter().find(|s| hit(s)).cloned().or_else(|| catalog().into_iter().find(hit)).ok_or_else(|| {
        let mut names: Vec<String> = extra.iter().map(|s| s.name.clone()).collect();
        names.extend(catalog().into_iter().map(|s| s.name));
        HwError::UnknownSku { name: name.to_string(), known: names.join(", ") }
    })
}

#[derive(Debug, thiserror::Error)]
pub enum HwError {
    #[error("unknown GPU `{name}` (known: {known}; another GPU can be given by a device_config.yml or a [[gpu]] TOML entry)")]
    UnknownSku { name: String, known: String },
    #[error("{path}: {msg}")]
    Invalid { path: String, msg: String },
    // The io error is in the message, not `source()`: shown once where a caller prints the chain.
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
}

/// What connects two GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum LinkKind {
    SameDevice,
    NvLink,
    Pcie,
    Network,
}

/// A path between two GPUs: per-direction bandwidth and fixed latency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub kind: LinkKind,
    pub bandwidth: f64,
    pub latency_ns: u64,
}

impl Link {
    /// Nanoseconds to move `bytes` over this link.
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        if self.kind == LinkKind::SameDevice || bytes == 0 {
            return 0;
        }
        self.latency_ns + (bytes as f64 / self.bandwidth * 1e9) as u64
    }
}

/// Cluster description as written in TOML.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    #[serde(default = "default_name")]
    pub name: String,
    pub nodes: Vec<NodeSpec>,
    #[serde(default)]
    pub network: NetworkSpec,
}

fn default_name() -> String {
    "cluster".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    #[serde(default)]
    pub name: Option<String>,
    pub gpu: String,
    pub gpus: u32,
    /// GPUs of the node share an NVSwitch (all pairs at NVLink speed). Without it they
    /// talk over PCIe.
    #[serde(default = "yes")]
    pub nvlink: bool,
    /// Repeat this node spec `count` times.
    #[serde(default = "one")]
    pub count: u32,
}

fn yes() -> bool {
    true
}
fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// Inter-node bandwidth per GPU, gigabits/s (InfiniBand NDR: 400).
    pub gbps: f64,
    pub latency_us: f64,
}

impl Default for NetworkSpec {
    fn default() -> Self {
        Self { gbps: 400.0, latency_us: 5.0 }
    }
}

/// One GPU of a cluster.
#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    pub id: GpuId,
    pub node: u32,
    pub sku: GpuSku,
}

/// A resolved cluster.
#[derive(Debug, Clone, Serialize)]
pub struct Cluster {
    pub name: String,
    pub gpus: Vec<Gpu>,
    nvlink_node: Vec<bool>,
    network: NetworkSpec,
}

/// NVLink hop latency and PCIe latency, ns (NCCL point-to-point small-message floor).
const NVLINK_LAT_NS: u64 = 8_000;
const PCIE_LAT_NS: u64 = 12_000;

impl Cluster {
    pub fn from_spec(spec: &ClusterSpec, path: &str) -> Result<Self, HwError> {
        let mut gpus = Vec::new();
        let mut nvlink_node = Vec::new();
        if spec.nodes.is_empty() {
            return Err(HwError::Invalid { path: path.into(), msg: "cluster has no nodes".into() });
        }
        for (i, n) in spec.nodes.iter().enumerate() {
            let sku =
                sku(&n.gpu).map_err(|e| HwError::Invalid { path: path.into(), msg: format!("nodes[{i}].gpu: {e}") })?;
            if n.gpus == 0 || n.gpus > 64 {
                return Err(HwError::Invalid {
                    path: path.into(),
                    msg: format!("nodes[{i}].gpus: must be 1..=64, got {}", n.gpus),
                });
            }
            for _ in 0..n.count {
                let node = nvlink_node.len() as u32;
                nvlink_node.push(n.nvlink && sku.nvlink_bw > 0.0);
                for _ in 0..n.gpus {
                    gpus.push(Gpu { id: GpuId(gpus.len() as u32), node, sku: sku.clone() });
                }
            }
        }
        if spec.network.gbps <= 0.0 || spec.network.latency_us < 0.0 {
            return Err(HwError::Invalid {
                path: path.into(),
                msg: "network: gbps must be positive, latency_us non-negative".into(),
            });
        }
        Ok(Self { name: spec.name.clone(), gpus, nvlink_node, network: spec.network.clone() })
    }

    pub fn from_toml(text: &str, path: &str) -> Result<Self, HwError> {
        let spec: ClusterSpec =
            toml::from_str(text).map_err(|e| HwError::Invalid { path: path.into(), msg: e.to_string() })?;
        Self::from_spec(&spec, path)
    }

    pub fn from_file(path: &Path) -> Result<Self, HwError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| HwError::Io { path: p.clone(), err })?;
        Self::from_toml(&text, &p)
    }

    /// `n` GPUs of one SKU in nodes of 8 with NVSwitch.
    pub fn uniform(sku_name: &str, n: u32) -> Result<Self, HwError> {
        let per = n.min(8);
        let spec = ClusterSpec {
            name: format!("{n}x{sku_name}"),
            nodes: vec![NodeSpec { name: None, gpu: sku_name.into(), gpus: per, nvlink: true, count: n.div_ceil(per) }],
            network: NetworkSpec::default(),
        };
        Self::from_spec(&spec, "<uniform>")
    }

    pub fn len(&self) -> usize {
        self.gpus.len()
    }
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }
    pub fn gpu(&self, id: GpuId) -> &Gpu {
        &self.gpus[id.0 as usize]
    }

    /// The link between two GPUs.
    pub fn link(&self, a: GpuId, b: GpuId) -> Link {
        if a == b {
            return Link { kind: LinkKind::SameDevice, bandwidth: f64::INFINITY, latency_ns: 0 };
        }
        let (ga, gb) = (self.gpu(a), self.gpu(b));
        if ga.node == gb.node {
            if self.nvlink_node[ga.node as usize] {
                let bw = ga.sku.nvlink_bw.min(gb.sku.nvlink_bw);
                return Link { kind: LinkKind::NvLink, bandwidth: bw, latency_ns: NVLINK_LAT_NS };
            }
            let bw = ga.sku.pcie_bw.min(gb.sku.pcie_bw);
            return Link { kind: LinkKind::Pcie, bandwidth: bw, latency_ns: PCIE_LAT_NS };
        }
        Link {
            kind: LinkKind::Network,
            bandwidth: self.network.gbps * 1e9 / 8.0,
            latency_ns: (self.network.latency_us * 1e3) as u64,
        }
    }

    /// The slowest link inside a group of GPUs (what a collective over them runs at).
    pub fn group_link(&self, group: &[GpuId]) -> Link {
        let mut worst = Link { kind: LinkKind::SameDevice, bandwidth: f64::INFINITY, latency_ns: 0 };
        for (i, &a) in group.iter().enumerate() {
            for &b in &group[i + 1..] {
                let l = self.link(a, b);
                if l.bandwidth < worst.bandwidth {
                    worst = l;
                }
            }
        }
        worst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_has_required_skus() {
        for n in ["A100-80GB", "H100-80GB", "H200-141GB", "L40S", "A40", "h100", "a100"] {
            assert!(sku(n).is_ok(), "{n}");
        }
        assert!(sku("B200").unwrap_err().to_string().contains("B200"));
    }

    #[test]
    fn parses_cluster_and_links() {
        let c = Cluster::from_toml(
            r#"name = "two-nodes"
            [[nodes]]
            gpu = "H100-80GB"
            gpus = 4
            count = 2
            [[nodes]]
            gpu = "L40S"
            gpus = 2
            nvlink = false
            [network]
            gbps = 200
            latency_us = 4"#,
            "c.toml",
        )
        .unwrap();
        assert_eq!(c.len(), 10);
        assert_eq!(c.link(GpuId(0), GpuId(3)).kind, LinkKind::NvLink);
        assert_eq!(c.link(GpuId(0), GpuId(4)).kind, LinkKind::Network);
        assert_eq!(c.link(GpuId(8), GpuId(9)).kind, LinkKind::Pcie);
        let l = c.link(GpuId(0), GpuId(4));
        assert_eq!(l.transfer_ns(25_000_000_000 / 1000), 4_000 + 1_000_000);
    }

    #[test]
    fn rejects_bad_clusters() {
        let e = Cluster::from_toml("[[nodes]]\ngpu = \"X1\"\ngpus = 8\n", "bad.toml").unwrap_err().to_string();
        assert!(e.contains("bad.toml") && e.contains("nodes[0].gpu") && e.contains("X1"), "{e}");
        let e = Cluster::from_toml("[[nodes]]\ngpu = \"A100\"\ngpus = 0\n", "bad.toml").unwrap_err().to_string();
        assert!(e.contains("gpus"), "{e}");
        assert!(Cluster::from_toml("nodes = 3", "bad.toml").is_err());
        assert!(Cluster::from_toml("[[nodes]]\ngpu = \"A100\"\ngpus = 2\ncolor = 1\n", "bad.toml").is_err());
    }
}
