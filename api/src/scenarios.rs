//! Scenarios a run may name: a shipped one (a file stem under `scenarios/`) or inline
//! TOML. What a scenario refers to (cluster, model and trace files) must lie in the
//! configured data folders (`Config::data_dirs`), never under `.data/` or `.git/`; every
//! refused path gets the same answer whether or not the file exists, and no answer shows
//! a server path or a line of a file it read.
//!
//! Accepting a run costs only what its budget check needs (`crate::limits`): the spec,
//! the cluster's spec, the trace files' row counts, and the scenario built with empty
//! traces (models, cluster, KV sizing). The requests are generated in the job.

use crate::config::Config;
use crate::error::ApiError;
use crate::limits::{self, Estimate};
use slicesched_hw::ClusterSpec;
use slicesched_sim::{Scenario, ScenarioSpec};
use slicesched_trace::{Format, TraceKind, TraceSpec};
use std::path::{Component, Path, PathBuf};

/// Longest a scenario may last, simulated seconds (a run must end in reasonable time).
pub const MAX_DURATION_S: f64 = 3_600.0;
pub const MAX_TENANTS: usize = 64;
/// Largest cluster, model or trace file a scenario may refer to.
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// Deepest nesting of tables and arrays a scenario's TOML may have (the parser recurses).
pub const MAX_NESTING: usize = 32;

/// A scenario accepted for a run: its name, the TOML text stored with the run.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub name: String,
    pub toml: String,
    pub tenant_names: Vec<String>,
    pub gpus: usize,
    pub estimate: Estimate,
    /// The files the scenario names, hashed when the run was accepted.
    pub inputs: Vec<crate::jobs::params::InputFile>,
}

/// Shipped scenario names, sorted.
pub fn shipped(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "toml").then(|| p.file_stem()?.to_str().map(str::to_string))?
        })
        .collect();
    names.sort();
    names
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 100 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The project root: the folder holding the scenarios folder.
fn root(cfg: &Config) -> PathBuf {
    let dir = cfg.scenarios_dir.canonicalize().unwrap_or_else(|_| cfg.scenarios_dir.clone());
    dir.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The data folders, canonical (relative entries are relative to the project root).
fn data_roots(cfg: &Config) -> Vec<PathBuf> {
    let root = root(cfg);
    let mut dirs: Vec<PathBuf> = cfg.data_dirs.iter().map(|d| root.join(d)).collect();
    dirs.push(cfg.plugins_dir.clone());
    dirs.iter().filter_map(|d| d.canonicalize().ok()).collect()
}

/// The file `rel` (relative to the scenarios folder) names, when it may be read. One
/// answer for every refusal: absent, outside the data folders, hidden, not a file.
pub fn data_file(cfg: &Config, what: &str, rel: &str) -> Result<PathBuf, String> {
    let shown = crate::text::one_line(rel, 200);
    let refused = || format!("{what}: `{shown}` is not a file in the data folders");
    if rel.is_empty() || rel.contains('\0') || Path::new(rel).is_absolute() {
        return Err(refused());
    }
    let full = cfg.scenarios_dir.join(rel).canonicalize().map_err(|_| refused())?;
    let hidden = |c: Component| matches!(c, Component::Normal(n) if n == ".data" || n == ".git");
    let inside = data_roots(cfg).iter().any(|r| {
        full.strip_prefix(r).is_ok_and(|below| !below.components().any(hidden)) && !r.components().any(hidden)
    });
    if !inside || !full.is_file() {
        return Err(refused());
    }
    match full.metadata() {
        Ok(m) if m.len() <= MAX_FILE_BYTES => Ok(full),
        _ => Err(format!("{what}: `{shown}` is larger than {MAX_FILE_BYTES} bytes")),
    }
}

/// A parse error of a file the scenario referred to: its name relative to the project
/// and the parser's first line (no snippet of the file), never the server's paths.
fn file_error(cfg: &Config, what: &str, rel: &str, msg: &str) -> String {
    let root = root(cfg);
    format!("{what}: `{}`: {}", crate::text::one_line(rel, 200), crate::text::scrub(msg, &[&root]))
}

/// Refuses TOML nested deeper than [`MAX_NESTING`] before the recursive parser sees it.
fn check_nesting(text: &str) -> Result<(), String> {
    let (mut depth, mut deepest, mut in_str) = (0usize, 0usize, None::<u8>);
    let mut prev = 0u8;
    for &b in text.as_bytes() {
        match in_str {
            Some(q) if b == q && prev != b'\\' => in_str = None,
            Some(_) => {}
            None => match b {
                b'"' | b'\'' => in_str = Some(b),
                b'[' | b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        prev = if prev == b'\\' && b == b'\\' { 0 } else { b };
    }
    if deepest > MAX_NESTING {
        return Err(format!("nested {deepest} levels deep (limit {MAX_NESTING})"));
    }
    Ok(())
}

/// Resolves, checks against the budgets and validates (models, cluster, KV sizing, the
/// traces' parameters) a scenario without generating its requests. `searches` is 0 for
/// a replay, policies × targets for a sweep, each search replaying `draws` draws of the
/// scenario. Blocking: it reads files.
pub fn resolve(cfg: &Config, scenario: &str, searches: u64, draws: u64, rate_scale: f64) -> Result<Resolved, ApiError> {
    let bad = |msg: String| ApiError::invalid("scenario", msg);
    let dir = &cfg.scenarios_dir;
    let (toml_text, label) = if is_name(scenario) {
        if !shipped(dir).iter().any(|n| n == scenario) {
            return Err(bad(format!("no shipped scenario named `{scenario}` (see GET /api/v1/scenarios)")));
        }
        let path = dir.join(format!("{scenario}.toml"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| ApiError::Internal(format!("{}: {e}", path.display())))?;
        (text, scenario.to_string())
    } else {
        (scenario.to_string(), "inline".to_string())
    };
    check_nesting(&toml_text).map_err(bad)?;
    let spec: ScenarioSpec = toml::from_str(&toml_text)
        .map_err(|e| bad(format!("not a scenario: {}", crate::text::one_line(&e.to_string(), 1024))))?;
    let inline = label == "inline";
    if inline {
        check_inline(&spec).map_err(bad)?;
    }
    let cluster = cluster_spec(cfg, &spec).map_err(bad)?;
    check_files(cfg, &spec).map_err(bad)?;
    let inputs = input_files(cfg, &spec).map_err(bad)?;
    let rows = |t: &TraceSpec| trace_rows(cfg, t);
    let estimate =
        limits::estimate(&spec, &cluster, &rows, searches, draws, rate_scale, cfg.record_max_ops, &cfg.limits)?;
    // Everything but the requests: the same checks the job's build makes, on empty traces.
    let mut dry = spec.clone();
    for t in &mut dry.tenants {
        t.trace.validate().map_err(|e| bad(format!("tenants ({}).trace: {e}", t.name)))?;
        t.trace.window_s = Some(0.0);
    }
    let root = root(cfg);
    let s = Scenario::from_spec(dry, Path::new(&label), dir)
        .map_err(|e| bad(crate::text::scrub(&e.to_string(), &[&root, dir])))?;
    Ok(Resolved {
        name: s.spec.name.clone(),
        toml: toml_text,
        tenant_names: s.tenants.iter().map(|t| t.name.clone()).collect(),
        gpus: s.cluster.len(),
        estimate,
        inputs,
    })
}

/// Loads a run's stored scenario again (in the job): the requests are generated here.
/// Relative paths resolve against the scenarios folder, as when it was accepted.
pub fn load(dir: &Path, name: &str, toml_text: &str, seed: Option<u64>) -> Result<Scenario, String> {
    let mut spec: ScenarioSpec = toml::from_str(toml_text).map_err(|e| crate::text::one_line(&e.to_string(), 1024))?;
    spec.seed = seed.unwrap_or(spec.seed);
    let root = dir.canonicalize().ok().and_then(|d| d.parent().map(Path::to_path_buf)).unwrap_or_default();
    Scenario::from_spec(spec, Path::new(name), dir).map_err(|e| crate::text::scrub(&e.to_string(), &[&root, dir]))
}

/// A run's estimate from its stored scenario (the job holds that much of the budget).
pub fn estimate(
    cfg: &Config,
    toml_text: &str,
    searches: u64,
    draws: u64,
    rate_scale: f64,
) -> Result<Estimate, ApiError> {
    let spec: ScenarioSpec = toml::from_str(toml_text).map_err(|e| ApiError::invalid("scenario", e.to_string()))?;
    let cluster = cluster_spec(cfg, &spec).map_err(|e| ApiError::invalid("scenario", e))?;
    let rows = |t: &TraceSpec| trace_rows(cfg, t);
    limits::estimate(&spec, &cluster, &rows, searches, draws, rate_scale, cfg.record_max_ops, &cfg.limits)
}

fn check_inline(spec: &ScenarioSpec) -> Result<(), String> {
    if !is_name(&spec.name) {
        return Err("name: letters, digits, `-` and `_` only, at most 100".into());
    }
    if spec.tenants.len() > MAX_TENANTS {
        return Err(format!("tenants: at most {MAX_TENANTS}, got {}", spec.tenants.len()));
    }
    match spec.duration_s {
        Some(d) if d.is_finite() && d > 0.0 && d <= MAX_DURATION_S => Ok(()),
        _ => Err(format!("duration_s: required for inline scenarios, in (0, {MAX_DURATION_S}]")),
    }
}

/// The scenario's cluster spec: inline, or read (and parsed, not built) from its file.
fn cluster_spec(cfg: &Config, spec: &ScenarioSpec) -> Result<ClusterSpec, String> {
    // The cluster reference's type is private to the simulator: its serialised form
    // says whether it is a path (a string) or inline (a table).
    match toml::Value::try_from(&spec.cluster) {
        Ok(toml::Value::String(rel)) => {
            let path = data_file(cfg, "cluster", &rel)?;
            let text = std::fs::read_to_string(&path).map_err(|e| file_error(cfg, "cluster", &rel, &e.to_string()))?;
            check_nesting(&text).map_err(|e| file_error(cfg, "cluster", &rel, &e))?;
            toml::from_str(&text).map_err(|e: toml::de::Error| file_error(cfg, "cluster", &rel, e.message()))
        }
        Ok(v) => v.try_into().map_err(|e: toml::de::Error| format!("cluster: {}", e.message())),
        Err(e) => Err(format!("cluster: {e}")),
    }
}

/// Every model and trace file the tenants name must be a data file.
fn check_files(cfg: &Config, spec: &ScenarioSpec) -> Result<(), String> {
    for (i, t) in spec.tenants.iter().enumerate() {
        let looks_like_file = t.model.contains('/') || t.model.ends_with(".json") || t.model.ends_with(".yml");
        if looks_like_file || t.model.ends_with(".yaml") {
            data_file(cfg, &format!("tenants[{i}].model"), &t.model)?;
        }
        if let Some(p) = &t.trace.path {
            data_file(cfg, &format!("tenants[{i}].trace.path"), p)?;
        }
    }
    Ok(())
}

/// The cluster, model and trace files a scenario names, each with its SHA-256: the
/// scenario text's hash alone would not tell that a trace it names was edited since.
fn input_files(cfg: &Config, spec: &ScenarioSpec) -> Result<Vec<crate::jobs::params::InputFile>, String> {
    use crate::jobs::params::InputFile;
    use sha2::Digest;
    let mut named: Vec<(String, String)> = Vec::new();
    if let Ok(toml::Value::String(rel)) = toml::Value::try_from(&spec.cluster) {
        named.push(("cluster".into(), rel));
    }
    for (i, t) in spec.tenants.iter().enumerate() {
        if t.model.contains('/') || [".json", ".yml", ".yaml"].iter().any(|x| t.model.ends_with(x)) {
            named.push((format!("tenants[{i}].model"), t.model.clone()));
        }
        if let Some(p) = &t.trace.path {
            named.push((format!("tenants[{i}].trace.path"), p.clone()));
        }
    }
    let mut out: Vec<InputFile> = Vec::with_capacity(named.len());
    for (what, rel) in named {
        if out.iter().any(|f| f.path == rel) {
            continue; // one file named by several tenants is hashed once
        }
        let path = data_file(cfg, &what, &rel)?;
        let bytes = std::fs::read(&path).map_err(|e| file_error(cfg, &what, &rel, &e.to_string()))?;
        let sha256 = hex::encode(sha2::Sha256::digest(&bytes));
        out.push(InputFile { role: what, path: rel, sha256, bytes: bytes.len() as u64 });
    }
    Ok(out)
}

/// Rows of a file trace and the length of one loop of it, for the budget.
fn trace_rows(cfg: &Config, t: &TraceSpec) -> Result<(u64, u64), ApiError> {
    let bad = |m: String| ApiError::invalid("scenario", m);
    let rel = t.path.as_deref().ok_or_else(|| bad("trace: a file kind needs `path`".into()))?;
    let path = data_file(cfg, "trace.path", rel).map_err(bad)?;
    let format = match t.kind {
        TraceKind::Azure => Format::Azure,
        TraceKind::Burstgpt => Format::Burstgpt,
        _ => Format::Mooncake,
    };
    let loaded = slicesched_trace::load_file(&path, format)
        .map_err(|e| bad(file_error(cfg, "trace.path", rel, &e.to_string())))?;
    let n = loaded.requests.len();
    let last = loaded.requests.last().map_or(0, |r| r.arrival_ns);
    Ok((n as u64, slicesched_trace::transform::period_ns(n, last)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_names_its_files_with_their_hashes() {
        use sha2::Digest;
        let cfg = Config {
            scenarios_dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios"),
            ..Config::default()
        };
        let r = resolve(&cfg, "azure-code-4t", 0, 1, 1.0).unwrap();
        // Four tenants name one trace: it is listed once, under the first.
        assert_eq!(r.inputs.len(), 1, "{:?}", r.inputs);
        let f = &r.inputs[0];
        assert_eq!((f.role.as_str(), f.path.as_str()), ("tenants[0].trace.path", "../data/traces/azure2023_code.csv"));
        let bytes = std::fs::read(cfg.scenarios_dir.join(&f.path)).unwrap();
        assert_eq!(f.sha256, hex::encode(sha2::Sha256::digest(&bytes)));
        assert_eq!(f.bytes, bytes.len() as u64);
        // A scenario naming no file lists none.
        assert!(resolve(&cfg, "smoke", 0, 1, 1.0).unwrap().inputs.is_empty());
    }

    #[test]
    fn nesting_is_counted_outside_strings() {
        assert!(check_nesting(&"[".repeat(10_000)).is_err());
        assert!(check_nesting(&format!("a = \"{}\"", "[".repeat(10_000))).is_ok());
        assert!(check_nesting("a = [[1, 2], [3]]\n[b]\nc = { d = 1 }").is_ok());
    }
}
