//! Scenarios a run may name: a shipped one (a file stem under `scenarios/`) or inline
//! TOML. Inline scenarios may refer to files only inside the project (its `data/` and
//! `scenarios/`), so a run cannot read arbitrary files of the server.

use crate::error::ApiError;
use slicesched_sim::{Scenario, ScenarioSpec};
use std::path::{Path, PathBuf};

/// Longest a scenario may last, simulated seconds (a run must end in reasonable time).
pub const MAX_DURATION_S: f64 = 3_600.0;
pub const MAX_TENANTS: usize = 64;

/// A scenario accepted for a run: its name, the TOML text stored with the run.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub name: String,
    pub toml: String,
    pub tenant_names: Vec<String>,
    pub gpus: usize,
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

/// Resolves and fully checks (models, cluster, traces) a scenario. Blocking: it reads
/// trace files.
pub fn resolve(dir: &Path, scenario: &str) -> Result<Resolved, ApiError> {
    let bad = |msg: String| ApiError::invalid("scenario", msg);
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
    let spec: ScenarioSpec = toml::from_str(&toml_text).map_err(|e| bad(format!("not a scenario: {e}")))?;
    if label == "inline" {
        check_inline(dir, &spec).map_err(bad)?;
    }
    let s = Scenario::from_spec(spec, Path::new(&label), dir).map_err(|e| bad(e.to_string()))?;
    Ok(Resolved {
        name: s.spec.name.clone(),
        toml: toml_text,
        tenant_names: s.tenants.iter().map(|t| t.name.clone()).collect(),
        gpus: s.cluster.len(),
    })
}

/// Loads a run's stored scenario again (in the job). Relative paths resolve against the
/// scenarios folder, as when it was accepted.
pub fn load(dir: &Path, name: &str, toml_text: &str) -> Result<Scenario, String> {
    let spec: ScenarioSpec = toml::from_str(toml_text).map_err(|e| e.to_string())?;
    Scenario::from_spec(spec, Path::new(name), dir).map_err(|e| e.to_string())
}

fn check_inline(dir: &Path, spec: &ScenarioSpec) -> Result<(), String> {
    if !is_name(&spec.name) {
        return Err("name: letters, digits, `-` and `_` only, at most 100".into());
    }
    if spec.tenants.len() > MAX_TENANTS {
        return Err(format!("tenants: at most {MAX_TENANTS}"));
    }
    match spec.duration_s {
        Some(d) if d <= MAX_DURATION_S => {}
        _ => return Err(format!("duration_s: required for inline scenarios, at most {MAX_DURATION_S}")),
    }
    let root = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.parent().map(Path::to_path_buf))
        .ok_or_else(|| "the scenarios folder is missing".to_string())?;
    let inside = |what: &str, rel: &str| -> Result<(), String> {
        let p = PathBuf::from(rel);
        let full = dir.join(&p).canonicalize().map_err(|_| format!("{what}: `{rel}` does not exist"))?;
        if p.is_absolute() || !full.starts_with(&root) {
            return Err(format!("{what}: `{rel}` is outside the project"));
        }
        Ok(())
    };
    // The cluster reference's type is private to the simulator: its serialised form
    // says whether it is a path (a string) or inline (a table).
    if let Ok(toml::Value::String(c)) = toml::Value::try_from(&spec.cluster) {
        inside("cluster", &c)?;
    }
    for (i, t) in spec.tenants.iter().enumerate() {
        let looks_like_file = t.model.contains('/') || t.model.ends_with(".json") || t.model.ends_with(".yml");
        if looks_like_file {
            inside(&format!("tenants[{i}].model"), &t.model)?;
        }
        if let Some(p) = &t.trace.path {
            inside(&format!("tenants[{i}].trace.path"), p)?;
        }
    }
    Ok(())
}
