//! Reader for Vidur-layout operator profiles (`<model>/mlp.csv`, `attention.csv`,
//! `model_config.yml`, `network_*/{all_reduce,send_recv}.csv`).
//!
//! Columns are found by name, so the full Vidur files and the trimmed repository copy
//! read the same. Every malformed input is a [`CostError`] naming file, line and column.

use crate::CostError;
use slicesched_model::ModelConfig;
use std::path::Path;

/// The ops of Vidur's `mlp.csv`, in column order.
pub const MLP_OPS: [&str; 10] = [
    "emb",
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
];

/// One `mlp.csv` row: median kernel seconds per op (None where not profiled).
#[derive(Debug, Clone)]
pub struct MlpRow {
    pub tokens: u32,
    pub tp: u32,
    pub secs: [Option<f64>; 10],
}

/// One `attention.csv` row. Head counts are model totals, as Vidur writes them.
#[derive(Debug, Clone)]
pub struct AttnRow {
    pub prefill: bool,
    pub batch: u32,
    pub chunk: u32,
    pub kv: u32,
    pub q_heads: u32,
    pub kv_heads: u32,
    pub embd: u32,
    pub tp: u32,
    pub secs: f64,
}

/// One NCCL measurement: message bytes on `workers` GPUs, `per_node` of them per node.
#[derive(Debug, Clone)]
pub struct NetRow {
    pub workers: u32,
    pub per_node: u32,
    pub size: u64,
    pub secs: f64,
}

#[derive(Debug, Clone)]
pub struct ModelProfile {
    pub name: String,
    pub config: ModelConfig,
    pub mlp: Vec<MlpRow>,
    pub attention: Vec<AttnRow>,
}

#[derive(Debug, Clone, Default)]
pub struct NetProfile {
    pub name: String,
    pub all_reduce: Vec<NetRow>,
    pub send_recv: Vec<NetRow>,
    /// Read from apex_plus's layout (coarser: whole µs, KiB sizes); a Vidur NCCL
    /// table of the same set is preferred for fitting.
    pub apex: bool,
}

/// Everything read from one profile directory.
#[derive(Debug, Clone, Default)]
pub struct ProfileSet {
    pub models: Vec<ModelProfile>,
    pub networks: Vec<NetProfile>,
    /// `device_config.yml` of the directory, when it has one.
    pub device_config: Option<(String, String)>,
    /// What was read in a reduced way or skipped, for the user to see.
    pub notes: Vec<String>,
}

const MODEL_FILES: [&str; 3] = ["model_config.yml", "mlp.csv", "attention.csv"];
const NET_FILES: [&str; 5] =
    ["all_reduce.csv", "send_recv.csv", "all_gather.csv", "reduce_scatter.csv", "alltoall.csv"];
/// apex_plus's collective tables: `gpu,num_nodes,num_gpus_per_node,dtype,size(kb),time(us)`.
const APEX_COLUMNS: [&str; 6] = ["gpu", "num_nodes", "num_gpus_per_node", "dtype", "size(kb)", "time(us)"];

impl ProfileSet {
    /// Reads a directory laid out like `data/profiles/a100`.
    pub fn from_dir(dir: &Path) -> Result<Self, CostError> {
        let io = |p: &Path, e: std::io::Error| CostError::Io { path: p.display().to_string(), err: e };
        let mut subdirs: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| io(dir, e))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        subdirs.sort();
        let mut files = Vec::new();
        for sub in &subdirs {
            let folder = sub.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            for f in MODEL_FILES.iter().chain(NET_FILES.iter()) {
                let p = sub.join(f);
                if p.is_file() {
                    let text = std::fs::read_to_string(&p).map_err(|e| io(&p, e))?;
                    files.push((p.display().to_string(), folder.clone(), f.to_string(), text));
                }
            }
        }
        let refs: Vec<_> = files.iter().map(|(l, d, f, t)| (l.as_str(), d.as_str(), f.as_str(), t.as_str())).collect();
        let mut set = Self::from_files(&refs)?;
        let dc = dir.join("device_config.yml");
        if dc.is_file() {
            let text = std::fs::read_to_string(&dc).map_err(|e| io(&dc, e))?;
            set.device_config = Some((dc.display().to_string(), text));
        }
        Ok(set)
    }

    /// Whether the directory's ops were timed as launched one at a time (its
    /// `device_config.yml` says `op_timing: launched`, as `slicesched profile` writes).
    pub fn launched_ops(&self) -> bool {
        self.device_config.as_ref().is_some_and(|(path, text)| {
            slicesched_hw::DeviceConfig::parse(text, path)
                .is_ok_and(|c| c.op_timing == Some(slicesched_hw::OpTiming::Launched))
        })
    }

    /// The GPU the directory's `device_config.yml` describes (None without one).
    pub fn device_sku(&self, extra: &[slicesched_hw::GpuSku]) -> Result<Option<slicesched_hw::GpuSku>, CostError> {
        let Some((path, text)) = &self.device_config else {
            return Ok(None);
        };
        let hw = |e: slicesched_hw::HwError| CostError::Invalid { path: path.clone(), msg: e.to_string() };
        let c = slicesched_hw::DeviceConfig::parse(text, path).map_err(hw)?;
        c.resolve(extra, path).map(Some).map_err(hw)
    }

    /// Builds a set from `(label, folder, file name, contents)`; `label` names errors.
    /// A folder with `mlp.csv` is a model (it then needs `model_config.yml`); one with
    /// NCCL tables is a network.
    pub fn from_files(files: &[(&str, &str, &str, &str)]) -> Result<Self, CostError> {
        let mut folders: Vec<&str> = files.iter().map(|f| f.1).collect();
        folders.sort_unstable();
        folders.dedup();
        let mut set = ProfileSet::default();
        for folder in folders {
            let get = |name: &str| files.iter().find(|f| f.1 == folder && f.2 == name).map(|f| (f.0, f.3));
            if let Some((mlp_label, mlp_text)) = get("mlp.csv") {
                let (cfg_label, cfg_text) = get("model_config.yml").ok_or_else(|| CostError::Invalid {
                    path: mlp_label.to_string(),
                    msg: "model folder has mlp.csv but no model_config.yml".into(),
                })?;
                let config = ModelConfig::from_vidur_yaml(cfg_text, cfg_label, folder)
                    .map_err(|e| CostError::Invalid { path: cfg_label.to_string(), msg: e.to_string() })?;
                let attention = match get("attention.csv") {
                    Some((l, t)) => parse_attention(l, t)?,
                    None => Vec::new(),
                };
                set.models.push(ModelProfile {
                    name: folder.to_string(),
                    config,
                    mlp: parse_mlp(mlp_label, mlp_text)?,
                    attention,
                });
            } else if NET_FILES.iter().any(|f| get(f).is_some()) {
                let mut net = NetProfile { name: folder.to_string(), ..Default::default() };
                let mut unused = Vec::new();
                for f in NET_FILES {
                    let Some((l, t)) = get(f) else { continue };
                    let apex = is_apex(t);
                    net.apex |= apex;
                    match (f, apex) {
                        ("all_reduce.csv", false) => net.all_reduce = parse_network(l, t, "all_reduce")?,
                        ("send_recv.csv", false) => net.send_recv = parse_network(l, t, "send_recv")?,
                        ("all_reduce.csv", true) => net.all_reduce = parse_apex(l, t)?,
                        _ => unused.push(f),
                    }
                }
                if net.apex {
                    set.notes.push(format!(
                        "{folder}: apex_plus layout; all_reduce.csv read (a Vidur NCCL table of the same set is preferred){}",
                        if unused.is_empty() { String::new() } else { format!(", not used: {}", unused.join(", ")) }
                    ));
                } else if !unused.is_empty() {
                    set.notes.push(format!("{folder}: not used: {}", unused.join(", ")));
                }
                set.networks.push(net);
            }
        }
        Ok(set)
    }

    /// The A100 profiles of the repository, compiled into the binary.
    pub fn embedded_a100() -> Result<Self, CostError> {
        macro_rules! file {
            ($dir:literal, $f:literal) => {
                (
                    concat!("data/profiles/a100/", $dir, "/", $f),
                    $dir,
                    $f,
                    include_str!(concat!("../../../data/profiles/a100/", $dir, "/", $f)),
                )
            };
        }
        Self::from_files(&[
            file!("Llama-2-7b-hf", "model_config.yml"),
            file!("Llama-2-7b-hf", "mlp.csv"),
            file!("Meta-Llama-3-8B", "model_config.yml"),
            file!("Meta-Llama-3-8B", "mlp.csv"),
            file!("Llama-2-70b-hf", "model_config.yml"),
            file!("Llama-2-70b-hf", "mlp.csv"),
            file!("Llama-2-70b-hf", "attention.csv"),
            file!("network_dgx", "all_reduce.csv"),
            file!("network_dgx", "send_recv.csv"),
        ])
    }
}

/// A CSV table with columns looked up by name.
struct Table<'a> {
    path: &'a str,
    headers: csv::StringRecord,
    rdr: csv::Reader<&'a [u8]>,
}

impl<'a> Table<'a> {
    fn new(path: &'a str, text: &'a str) -> Result<Self, CostError> {
        // Flexible: apex_plus leaves trailing columns empty by omitting them; a row that is
        // too short for a column we read is still an error (`Row::raw`).
        let mut rdr = csv::ReaderBuilder::new().has_headers(true).flexible(true).from_reader(text.as_bytes());
        let headers = rdr.headers().map_err(|e| csv_err(path, 1, "", &e.to_string()))?.clone();
        if headers.iter().all(|h| h.trim().is_empty()) {
            return Err(csv_err(path, 1, "", "empty file: no header row"));
        }
        Ok(Self { path, headers, rdr })
    }

    fn col(&self, name: &str) -> Result<usize, CostError> {
        self.opt_col(name).ok_or_else(|| csv_err(self.path, 1, name, "missing column"))
    }

    fn opt_col(&self, name: &str) -> Option<usize> {
        self.headers.iter().position(|h| h.trim() == name)
    }

    /// Calls `f` with each record and its 1-based line number.
    fn rows(&mut self, mut f: impl FnMut(&Row) -> Result<(), CostError>) -> Result<(), CostError> {
        let mut rec = csv::StringRecord::new();
        loop {
            let line_before = self.rdr.position().line();
            match self.rdr.read_record(&mut rec) {
                Ok(false) => return Ok(()),
                Ok(true) => {
                    let line = rec.position().map(|p| p.line()).unwrap_or(line_before);
                    f(&Row { path: self.path, headers: &self.headers, rec: &rec, line })?;
                }
                Err(e) => {
                    let line = e.position().map(|p| p.line()).unwrap_or(line_before);
                    return Err(csv_err(self.path, line, "", &e.to_string()));
                }
            }
        }
    }
}

struct Row<'a> {
    path: &'a str,
    headers: &'a csv::StringRecord,
    rec: &'a csv::StringRecord,
    line: u64,
}

impl Row<'_> {
    fn err(&self, i: usize, msg: String) -> CostError {
        csv_err(self.path, self.line, self.headers.get(i).unwrap_or(""), &msg)
    }

    fn raw(&self, i: usize) -> Result<&str, CostError> {
        self.rec.get(i).map(str::trim).ok_or_else(|| self.err(i, "row is too short".into()))
    }

    fn uint(&self, i: usize) -> Result<u64, CostError> {
        let s = self.raw(i)?;
        // Some Vidur tables write integers as floats (`2.0`).
        s.parse::<u64>()
            .ok()
            .or_else(|| s.parse::<f64>().ok().filter(|v| v.fract() == 0.0 && *v >= 0.0 && *v < 1e18).map(|v| v as u64))
            .ok_or_else(|| self.err(i, format!("expected a non-negative integer, got `{s}`")))
    }

    /// Milliseconds in the file, seconds out; an empty cell is `None`.
    fn ms(&self, i: usize) -> Result<Option<f64>, CostError> {
        let s = self.raw(i)?;
        if s.is_empty() {
            return Ok(None);
        }
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v * 1e-3)),
            _ => Err(self.err(i, format!("expected a non-negative time in ms, got `{s}`"))),
        }
    }

    fn boolean(&self, i: usize) -> Result<bool, CostError> {
        match self.raw(i)? {
            "True" | "true" | "1" => Ok(true),
            "False" | "false" | "0" => Ok(false),
            s => Err(self.err(i, format!("expected True or False, got `{s}`"))),
        }
    }
}

fn csv_err(path: &str, line: u64, column: &str, msg: &str) -> CostError {
    CostError::Csv { path: path.to_string(), line, column: column.to_string(), msg: msg.to_string() }
}

fn count(row: &Row, i: usize) -> Result<u32, CostError> {
    let v = row.uint(i)?;
    u32::try_from(v).map_err(|_| row.err(i, format!("{v} is out of range")))
}

/// Parses a Vidur `mlp.csv`. Op columns that are absent are left unprofiled.
pub fn parse_mlp(path: &str, text: &str) -> Result<Vec<MlpRow>, CostError> {
    let mut t = Table::new(path, text)?;
    let tok = t.col("num_tokens")?;
    let tp = t.col("num_tensor_parallel_workers")?;
    let ops: Vec<Option<usize>> = MLP_OPS.iter().map(|op| t.opt_col(&format!("time_stats.{op}.median"))).collect();
    if ops.iter().all(Option::is_none) {
        return Err(csv_err(path, 1, "time_stats.<op>.median", "missing column: no op timings"));
    }
    let mut out = Vec::new();
    t.rows(|r| {
        let mut secs = [None; 10];
        for (s, c) in secs.iter_mut().zip(&ops) {
            if let Some(c) = *c {
                *s = r.ms(c)?;
            }
        }
        let tp_v = count(r, tp)?;
        if tp_v == 0 {
            return Err(r.err(tp, "must be positive".into()));
        }
        out.push(MlpRow { tokens: count(r, tok)?, tp: tp_v, secs });
        Ok(())
    })?;
    Ok(out)
}

/// Parses a Vidur `attention.csv` (prefill and decode rows).
pub fn parse_attention(path: &str, text: &str) -> Result<Vec<AttnRow>, CostError> {
    let mut t = Table::new(path, text)?;
    let c = |n| t.col(n);
    let (pre_t, dec_t) = (c("time_stats.attn_prefill.median")?, c("time_stats.attn_decode.median")?);
    let (embd, qh, kvh, tp) = (c("n_embd")?, c("n_q_head")?, c("n_kv_head")?, c("num_tensor_parallel_workers")?);
    let (batch, chunk, kv, is_pre) =
        (c("batch_size")?, c("prefill_chunk_size")?, c("kv_cache_size")?, c("is_prefill")?);
    let mut out = Vec::new();
    t.rows(|r| {
        let prefill = r.boolean(is_pre)?;
        let tcol = if prefill { pre_t } else { dec_t };
        let Some(secs) = r.ms(tcol)? else {
            return Err(r.err(tcol, "missing time for this row's phase".into()));
        };
        let row = AttnRow {
            prefill,
            batch: count(r, batch)?,
            chunk: count(r, chunk)?,
            kv: count(r, kv)?,
            q_heads: count(r, qh)?,
            kv_heads: count(r, kvh)?,
            embd: count(r, embd)?,
            tp: count(r, tp)?,
            secs,
        };
        if row.q_heads == 0 || row.tp == 0 || row.kv_heads == 0 || !row.embd.is_multiple_of(row.q_heads) {
            return Err(r.err(qh, "inconsistent head counts".into()));
        }
        out.push(row);
        Ok(())
    })?;
    Ok(out)
}

fn is_apex(text: &str) -> bool {
    let head = text.lines().next().unwrap_or("");
    let cols: Vec<&str> = head.split(',').map(str::trim).collect();
    APEX_COLUMNS.iter().all(|c| cols.contains(c))
}

/// Parses an apex_plus collective table: sizes in KiB, times in µs, one row per
/// (GPU model, nodes, GPUs per node, size).
pub fn parse_apex(path: &str, text: &str) -> Result<Vec<NetRow>, CostError> {
    let mut t = Table::new(path, text)?;
    let (nodes, per, size, time) =
        (t.col("num_nodes")?, t.col("num_gpus_per_node")?, t.col("size(kb)")?, t.col("time(us)")?);
    let mut out = Vec::new();
    t.rows(|r| {
        let (n, p) = (count(r, nodes)?, count(r, per)?);
        let us = r.raw(time)?;
        let secs = us
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| r.err(time, format!("expected a non-negative time in µs, got `{us}`")))?;
        if n > 0 && p > 0 && secs > 0.0 {
            out.push(NetRow { workers: n * p, per_node: p, size: r.uint(size)? * 1024, secs: secs * 1e-6 });
        }
        Ok(())
    })?;
    Ok(out)
}

/// Parses a Vidur NCCL table whose time column is `time_stats.<collective>.median`.
pub fn parse_network(path: &str, text: &str, collective: &str) -> Result<Vec<NetRow>, CostError> {
    let mut t = Table::new(path, text)?;
    let time = t.col(&format!("time_stats.{collective}.median"))?;
    let (w, pn, size) = (t.col("num_workers")?, t.col("devices_per_node")?, t.col("size")?);
    let mut out = Vec::new();
    t.rows(|r| {
        if let Some(secs) = r.ms(time)? {
            out.push(NetRow { workers: count(r, w)?, per_node: count(r, pn)?, size: r.uint(size)?, secs });
        }
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_profiles_parse() {
        let s = ProfileSet::embedded_a100().unwrap();
        assert_eq!(s.models.len(), 3);
        let l70 = s.models.iter().find(|m| m.name == "Llama-2-70b-hf").unwrap();
        assert!(l70.attention.len() > 10_000 && l70.mlp.len() > 1000);
        assert_eq!(l70.config.num_key_value_heads, 8);
        assert!(!s.networks[0].all_reduce.is_empty());
    }

    #[test]
    fn errors_name_file_line_column() {
        let head = "time_stats.emb.median,num_tokens,num_tensor_parallel_workers\n";
        let e = parse_mlp("m.csv", &format!("{head}0.1,8,1\n0.2,x9,1\n")).unwrap_err().to_string();
        assert!(e.contains("m.csv") && e.contains("line 3") && e.contains("num_tokens") && e.contains("x9"), "{e}");
        let e = parse_mlp("m.csv", "time_stats.emb.median,num_tokens\n0.1,8\n").unwrap_err().to_string();
        assert!(e.contains("m.csv") && e.contains("line 1") && e.contains("num_tensor_parallel_workers"), "{e}");
        let e = parse_mlp("m.csv", "").unwrap_err().to_string();
        assert!(e.contains("m.csv") && e.contains("line 1") && e.contains("empty"), "{e}");
        let e = parse_mlp("m.csv", &format!("{head}abc,8,1\n")).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("time_stats.emb.median"), "{e}");
        let e = parse_mlp("m.csv", &format!("{head}0.1,8\n")).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        let e = parse_network("n.csv", "time_stats.send_recv.median,num_workers,size\n", "send_recv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("devices_per_node"), "{e}");
    }
}
