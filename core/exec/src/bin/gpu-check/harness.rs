//! Sections with time caps, JSON lines and the closing table.

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::io::Write;
use std::time::Instant;

pub struct Harness {
    file: std::fs::File,
    started: Instant,
    budget_s: f64,
    /// The current section's deadline: loops check it and stop early, marking "capped".
    pub deadline: Instant,
    rows: Vec<(String, bool, String)>,
    /// `--only a_probe,b_ops`: run only sections whose names start with one of these (a
    /// second try on the GPU repeats what failed, inside what is left of the lease).
    only: Vec<String>,
}

impl Harness {
    pub fn new(out: &std::path::Path, budget_s: f64, only: Vec<String>) -> Result<Self> {
        let p = out.join("results.jsonl");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .with_context(|| format!("opening {}", p.display()))?;
        Ok(Self { file, started: Instant::now(), budget_s, deadline: Instant::now(), rows: Vec::new(), only })
    }

    pub fn over(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Appends one JSON line (a measurement inside a section).
    pub fn emit(&mut self, v: Value) {
        let _ = writeln!(self.file, "{v}");
        let _ = self.file.flush();
    }

    /// One row of the closing table, also written as a line.
    pub fn record(&mut self, name: &str, ok: bool, summary: &str, detail: Value) {
        self.emit(json!({ "section": name, "ok": ok, "summary": summary, "detail": detail }));
        self.rows.push((name.to_string(), ok, summary.to_string()));
    }

    /// Runs `f` with at most `cap_s` seconds (and never past the whole budget); a panic
    /// or an error is that section's failure, not the run's.
    pub fn section(&mut self, name: &str, cap_s: f64, f: impl FnOnce(&mut Harness) -> Result<(bool, String)>) {
        if !self.wanted(name) {
            return;
        }
        let left = self.budget_s - self.started.elapsed().as_secs_f64();
        if left < 2.0 {
            self.record(name, false, "skipped: the time budget is spent", Value::Null);
            return;
        }
        let t = Instant::now();
        self.deadline = t + std::time::Duration::from_secs_f64(cap_s.min(left));
        eprintln!("== {name} (cap {:.0} s)", cap_s.min(left));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
        let secs = t.elapsed().as_secs_f64();
        let capped = Instant::now() >= self.deadline;
        let (ok, s) = match r {
            Ok(Ok((ok, s))) => (ok, s),
            Ok(Err(e)) => (false, format!("error: {e:#}")),
            Err(p) => {
                let m = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                (false, format!("panic: {m}"))
            }
        };
        let s = if capped { format!("{s} (capped at {:.0} s)", cap_s.min(left)) } else { s };
        self.record(name, ok, &s, json!({ "seconds": secs, "capped": capped }));
    }

    pub fn wanted(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| name.starts_with(p.as_str()))
    }

    pub fn table(&self) {
        println!("\n{:<18} {:<5} summary", "section", "ok");
        for (n, ok, s) in &self.rows {
            println!("{n:<18} {:<5} {s}", if *ok { "PASS" } else { "FAIL" });
        }
        println!("total {:.1} s", self.started.elapsed().as_secs_f64());
    }
}
