//! GPUs the catalog lacks, given by the user without recompiling: a Vidur
//! `device_config.yml` (extended with the figures Vidur does not write) or `[[gpu]]`
//! entries of a TOML file. Both carry datasheet figures only, like the catalog.

use crate::{catalog, GpuSku, HwError};
use serde::{Deserialize, Serialize};

const GB: f64 = 1e9;
const GIB: u64 = 1 << 30;

/// A Vidur `device_config.yml`: `fp16_tflops`, `total_memory_gb`,
/// `num_devices_per_node`, and optionally `name` (a catalog GPU, or the name of a new
/// one), `hbm_gbps`, `nvlink_gbps`, `pcie_gbps`, `sm_count`, `clock_ghz`, and what
/// `slicesched profile` measured (`measured_fp16_tflops`, `measured_hbm_gbps`: kept
/// for the reader, never used to resolve the GPU, whose datasheet figures are the
/// catalog's) and how it timed its ops (`op_timing`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceConfig {
    pub name: Option<String>,
    pub fp16_tflops: Option<f64>,
    pub total_memory_gb: Option<f64>,
    pub num_devices_per_node: Option<u32>,
    pub hbm_gbps: Option<f64>,
    pub nvlink_gbps: Option<f64>,
    pub pcie_gbps: Option<f64>,
    pub sm_count: Option<u32>,
    pub clock_ghz: Option<f64>,
    pub measured_fp16_tflops: Option<f64>,
    pub measured_hbm_gbps: Option<f64>,
    /// How the profile beside it timed each op: `kernel` (the kernel alone, as Vidur
    /// does; the default) or `launched` (as `slicesched profile` does: each op launched
    /// on an idle device and timed between its events, so its launch is in its time).
    pub op_timing: Option<OpTiming>,
}

/// See [`DeviceConfig::op_timing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpTiming {
    Kernel,
    Launched,
}

/// Relative tolerance when matching a config's peak to a catalog SKU: Vidur writes
/// rounded figures (1000 TFLOP/s for the H100's 989.4).
const PEAK_TOL: f64 = 0.03;

impl DeviceConfig {
    /// Parses the flat `key: value` YAML Vidur writes; unknown keys are an error naming
    /// them, so a typo in a figure is not silently ignored.
    pub fn parse(text: &str, path: &str) -> Result<Self, HwError> {
        let mut c = DeviceConfig::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() || line == "---" {
                continue;
            }
            let err = |msg: String| HwError::Invalid { path: path.into(), msg: format!("line {}: {msg}", i + 1) };
            let (k, v) = line.split_once(':').ok_or_else(|| err(format!("expected `key: value`, got `{line}`")))?;
            let (k, v) = (k.trim(), v.trim().trim_matches('"').trim_matches('\''));
            let num = || v.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0);
            let bad = || err(format!("`{k}`: expected a positive number, got `{v}`"));
            match k {
                "name" => c.name = Some(v.to_string()),
                "fp16_tflops" => c.fp16_tflops = Some(num().ok_or_else(bad)?),
                "total_memory_gb" => c.total_memory_gb = Some(num().ok_or_else(bad)?),
                "num_devices_per_node" => c.num_devices_per_node = Some(num().ok_or_else(bad)? as u32),
                "hbm_gbps" => c.hbm_gbps = Some(num().ok_or_else(bad)?),
                "nvlink_gbps" => c.nvlink_gbps = Some(v.parse::<f64>().ok().filter(|x| *x >= 0.0).ok_or_else(bad)?),
                "pcie_gbps" => c.pcie_gbps = Some(num().ok_or_else(bad)?),
                "sm_count" => c.sm_count = Some(num().ok_or_else(bad)? as u32),
                "clock_ghz" => c.clock_ghz = Some(num().ok_or_else(bad)?),
                "measured_fp16_tflops" => c.measured_fp16_tflops = Some(num().ok_or_else(bad)?),
                "measured_hbm_gbps" => c.measured_hbm_gbps = Some(num().ok_or_else(bad)?),
                "op_timing" => {
                    c.op_timing = Some(match v {
                        "kernel" => OpTiming::Kernel,
                        "launched" => OpTiming::Launched,
                        _ => return Err(err(format!("`op_timing`: expected `kernel` or `launched`, got `{v}`"))),
                    })
                }
                _ => return Err(err(format!("unknown key `{k}`"))),
            }
        }
        Ok(c)
    }

    /// The GPU this config describes: the SKU it names (from `extra`, then the
    /// catalog), else the catalog SKU with the same peak and memory, else a new SKU
    /// built from its own figures (which then must include `hbm_gbps`).
    pub fn resolve(&self, extra: &[GpuSku], path: &str) -> Result<GpuSku, HwError> {
        let invalid = |msg: String| HwError::Invalid { path: path.into(), msg };
        if let Some(n) = &self.name {
            if let Ok(s) = crate::sku_in(n, extra) {
                if let Some(t) = self.fp16_tflops {
                    if (t * 1e12 / s.peak_flops - 1.0).abs() > PEAK_TOL {
                        return Err(invalid(format!(
                            "names {} but gives fp16_tflops {t} (the catalog has {:.1})",
                            s.name,
                            s.peak_flops / 1e12
                        )));
                    }
                }
                return Ok(s);
            }
        }
        if self.hbm_gbps.is_none() {
            let (Some(t), Some(m)) = (self.fp16_tflops, self.total_memory_gb) else {
                return Err(invalid("needs `name` or `fp16_tflops` and `total_memory_gb`".into()));
            };
            let all: Vec<GpuSku> = extra.iter().cloned().chain(catalog()).collect();
            return all
                .into_iter()
                .find(|s| {
                    (t * 1e12 / s.peak_flops - 1.0).abs() <= PEAK_TOL && (s.memory as f64 / GIB as f64 - m).abs() < 1.0
                })
                .ok_or_else(|| {
                    invalid(format!(
                        "fp16_tflops {t}, total_memory_gb {m} match no known GPU; add `name:` (a catalog GPU) or the \
                         figures of a new one (`name`, `hbm_gbps`, optionally `nvlink_gbps`, `pcie_gbps`, `sm_count`, \
                         `clock_ghz`)"
                    ))
                });
        }
        let entry = GpuEntry {
            name: self.name.clone().ok_or_else(|| invalid("a new GPU (hbm_gbps given) needs `name`".into()))?,
            tflops: self.fp16_tflops.ok_or_else(|| invalid("missing `fp16_tflops`".into()))?,
            hbm_gbps: self.hbm_gbps.unwrap_or_default(),
            memory_gb: self.total_memory_gb.ok_or_else(|| invalid("missing `total_memory_gb`".into()))?,
            nvlink_gbps: self.nvlink_gbps.unwrap_or(0.0),
            pcie_gbps: self.pcie_gbps.unwrap_or(32.0),
            sm_count: self.sm_count.unwrap_or(0),
            clock_ghz: self.clock_ghz.unwrap_or(0.0),
        };
        entry.sku(path)
    }
}

/// One `[[gpu]]` entry of a GPU TOML file (datasheet figures, dense fp16/bf16).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GpuEntry {
    pub name: String,
    /// Dense fp16/bf16 tensor peak, TFLOP/s.
    pub tflops: f64,
    /// HBM bandwidth, GB/s.
    pub hbm_gbps: f64,
    /// Device memory, GiB (the "80 GB" of an A100 is 80 GiB).
    pub memory_gb: f64,
    /// NVLink per direction, GB/s (0: none).
    #[serde(default)]
    pub nvlink_gbps: f64,
    #[serde(default = "default_pcie")]
    pub pcie_gbps: f64,
    #[serde(default)]
    pub sm_count: u32,
    #[serde(default)]
    pub clock_ghz: f64,
}

fn default_pcie() -> f64 {
    32.0
}

impl GpuEntry {
    pub fn sku(&self, path: &str) -> Result<GpuSku, HwError> {
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !ok(self.tflops) || !ok(self.hbm_gbps) || !ok(self.memory_gb) || !ok(self.pcie_gbps) {
            return Err(HwError::Invalid {
                path: path.into(),
                msg: format!("gpu `{}`: tflops, hbm_gbps, memory_gb and pcie_gbps must be positive", self.name),
            });
        }
        if !(self.nvlink_gbps.is_finite() && self.nvlink_gbps >= 0.0 && self.clock_ghz >= 0.0) {
            return Err(HwError::Invalid {
                path: path.into(),
                msg: format!("gpu `{}`: nvlink_gbps and clock_ghz must be non-negative", self.name),
            });
        }
        Ok(GpuSku {
            name: self.name.clone(),
            peak_flops: self.tflops * 1e12,
            hbm_bw: self.hbm_gbps * GB,
            memory: (self.memory_gb * GIB as f64) as u64,
            nvlink_bw: self.nvlink_gbps * GB,
            pcie_bw: self.pcie_gbps * GB,
            sm_count: self.sm_count,
            clock_ghz: self.clock_ghz,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuFile {
    gpu: Vec<GpuEntry>,
}

/// GPUs from a TOML file of `[[gpu]]` entries.
pub fn skus_from_toml(text: &str, path: &str) -> Result<Vec<GpuSku>, HwError> {
    let f: GpuFile = toml::from_str(text).map_err(|e| HwError::Invalid { path: path.into(), msg: e.to_string() })?;
    f.gpu.iter().map(|g| g.sku(path)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vidur_configs_resolve_to_catalog_skus() {
        let a =
            DeviceConfig::parse("fp16_tflops: 312\ntotal_memory_gb: 80\nnum_devices_per_node: 4\n", "a.yml").unwrap();
        assert_eq!(a.resolve(&[], "a.yml").unwrap().name, "A100-80GB");
        let h = DeviceConfig::parse("fp16_tflops: 1000\ntotal_memory_gb: 80\n", "h.yml").unwrap();
        assert_eq!(h.resolve(&[], "h.yml").unwrap().name, "H100-80GB");
        let e = DeviceConfig::parse("fp16_tflops: 2250\ntotal_memory_gb: 180\n", "b.yml")
            .unwrap()
            .resolve(&[], "b.yml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("b.yml") && e.contains("2250") && e.contains("hbm_gbps"), "{e}");
        let e = DeviceConfig::parse("fp16_tflop: 1\n", "x.yml").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("fp16_tflop"), "{e}");
        let e = DeviceConfig::parse("name: A100\nfp16_tflops: 1000\n", "x.yml").unwrap().resolve(&[], "x.yml");
        assert!(e.unwrap_err().to_string().contains("names A100-80GB"));
    }

    #[test]
    fn new_gpus_from_config_and_toml() {
        let c = DeviceConfig::parse(
            "name: B200\nfp16_tflops: 2250\ntotal_memory_gb: 180\nhbm_gbps: 8000\nnvlink_gbps: 900\nsm_count: 148\n",
            "b.yml",
        )
        .unwrap();
        let b = c.resolve(&[], "b.yml").unwrap();
        assert_eq!((b.name.as_str(), b.hbm_bw, b.sm_count), ("B200", 8e12, 148));
        let t = skus_from_toml(
            "[[gpu]]\nname = \"B200\"\ntflops = 2250\nhbm_gbps = 8000\nmemory_gb = 180\nnvlink_gbps = 900\n",
            "g.toml",
        )
        .unwrap();
        assert_eq!(t[0].peak_flops, 2.25e15);
        assert_eq!(crate::sku_in("b200", &t).unwrap().memory, 180 << 30);
        assert!(skus_from_toml("[[gpu]]\nname = \"X\"\ntflops = 1\n", "g.toml")
            .unwrap_err()
            .to_string()
            .contains("g.toml"));
        let e = skus_from_toml("[[gpu]]\nname = \"X\"\ntflops = 0\nhbm_gbps = 1\nmemory_gb = 1\n", "g.toml");
        assert!(e.unwrap_err().to_string().contains("must be positive"));
    }

    #[test]
    fn measured_figures_are_kept_beside_a_catalog_name() {
        // What `slicesched profile --device cuda:0` writes on an H200: the catalog's
        // datasheet peak names it, the measured peak (well under it) is kept aside.
        let c = DeviceConfig::parse(
            "# measured\nname: H200-141GB\nfp16_tflops: 989.4\ntotal_memory_gb: 141\nnum_devices_per_node: 1\nmeasured_fp16_tflops: 790.5\nmeasured_hbm_gbps: 4100\n",
            "d.yml",
        )
        .unwrap();
        assert_eq!((c.measured_fp16_tflops, c.measured_hbm_gbps), (Some(790.5), Some(4100.0)));
        assert_eq!(c.resolve(&[], "d.yml").unwrap().name, "H200-141GB");
        assert!(DeviceConfig::parse("measured_hbm_gbps: -1\n", "d.yml").is_err());
    }

    #[test]
    fn op_timing_says_how_the_profile_beside_it_timed_its_ops() {
        let p = |t: &str| DeviceConfig::parse(t, "d.yml");
        assert_eq!(p("op_timing: launched\n").unwrap().op_timing, Some(OpTiming::Launched));
        assert_eq!(p("op_timing: kernel\n").unwrap().op_timing, Some(OpTiming::Kernel));
        assert_eq!(p("name: A100-80GB\n").unwrap().op_timing, None);
        let e = p("op_timing: wall\n").unwrap_err().to_string();
        assert!(e.contains("op_timing") && e.contains("wall") && e.contains("line 1"), "{e}");
    }
}
