//! Every accuracy figure the README's cost-model tables quote, as `cost validate` and
//! `cost validate-e2e --holdout-tp` compute them:
//! `cargo run --release -p slicesched-cost --example figures [-- a100|h100|e2e]`.

use slicesched_cost::{
    embedded_rows, validate, validate_dirs_leave_one_model_out, validate_e2e, validate_e2e_holdout_tp,
    validate_leave_one_model_out, CostModel, EngineFit,
};
use std::path::{Path, PathBuf};

fn profiles(sku: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/profiles").join(sku)
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let what: Vec<String> = std::env::args().skip(1).collect();
    let want = |w: &str| what.is_empty() || what.iter().any(|a| a == w);
    let (a, h) = (profiles("a100"), profiles("h100"));
    if want("a100") {
        let r = validate(&a, &a, None)?;
        println!("A100 hold-out (--fit a100 --test a100):\n{}", r.table());
        for m in validate_leave_one_model_out(&a)? {
            println!("A100, left out {}: {} / {}", m.model, pct(m.report.overall.median), pct(m.report.overall.p90));
        }
    }
    if want("h100") {
        let r = validate(&a, &h, None)?;
        println!("\nH100, fitted on A100 (--fit a100 --test h100):\n{}", r.table());
        for m in validate_dirs_leave_one_model_out(&[&a], &h, None, &[])? {
            println!("H100, left out {}:\n{}", m.model, m.report.table());
        }
    }
    if want("e2e") {
        let rows = embedded_rows();
        let kernels = CostModel::kernels_a100();
        let r = validate_e2e(&kernels.with_engine(EngineFit::fit(kernels, &rows)?), &rows)?;
        println!("\nEnd to end, engine fitted on every row:\n{}", r.table());
        for (tp, r) in validate_e2e_holdout_tp(kernels, &rows)? {
            println!(
                "TP {tp} held out: prompt {} / {}, token {} / {}",
                pct(r.prompt.median),
                pct(r.prompt.p90),
                pct(r.token.median),
                pct(r.token.p90)
            );
        }
    }
    Ok(())
}
