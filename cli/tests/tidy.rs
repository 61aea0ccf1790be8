//! Repository hygiene checked as a test: module docs everywhere, an architecture
//! document that names every crate.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            if !["target", "node_modules", ".git", "out"].contains(&name.as_str()) && !name.starts_with('.') {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_rust_file_starts_with_a_module_doc() {
    let mut files = Vec::new();
    for d in ["core", "cli", "api", "plugins"] {
        if root().join(d).exists() {
            rust_files(&root().join(d), &mut files);
        }
    }
    assert!(files.len() > 20);
    let missing: Vec<_> = files
        .iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().trim_start().starts_with("//!"))
        .map(|f| f.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a leading //! doc: {missing:?}");
}

#[test]
fn architecture_names_every_crate() {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md exists");
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members: Vec<&str> = manifest
        .lines()
        .skip_while(|l| !l.starts_with("members"))
        .skip(1)
        .take_while(|l| !l.starts_with(']'))
        .map(|l| l.trim().trim_matches(|c| c == '"' || c == ','))
        .collect();
    assert!(members.len() >= 8);
    for m in members {
        assert!(arch.contains(&format!("`{m}`")), "ARCHITECTURE.md does not describe `{m}`");
    }
}
