//! `gpu-check --out DIR [--budget-s 360]`: the CUDA backend measured on a real GPU
//! (shared/docs/executor.md §9). Each section runs under `catch_unwind` with its own time
//! cap and appends JSON lines to `DIR/results.jsonl`; the run ends with a short table.
//! Build: `cargo build --release -p slicesched-exec --no-default-features --features
//! cuda-13 --bin gpu-check`; run it through `scripts/gpu-check.sh`, which finds the
//! CUDA libraries first.

#[cfg(not(any(feature = "cuda-12", feature = "cuda-13")))]
fn main() {
    eprintln!("gpu-check: built without CUDA; build with --no-default-features --features cuda-13");
    std::process::exit(2);
}

#[cfg(any(feature = "cuda-12", feature = "cuda-13"))]
mod correctness;
#[cfg(any(feature = "cuda-12", feature = "cuda-13"))]
mod harness;
#[cfg(any(feature = "cuda-12", feature = "cuda-13"))]
mod perf;

#[cfg(any(feature = "cuda-12", feature = "cuda-13"))]
fn main() -> anyhow::Result<()> {
    use anyhow::Context;
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let out = std::path::PathBuf::from(arg("--out").context("usage: gpu-check --out DIR [--budget-s 360]")?);
    let budget: f64 = arg("--budget-s").map(|s| s.parse()).transpose().context("--budget-s")?.unwrap_or(360.0);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut h = harness::Harness::new(&out, budget)?;
    h.section("a_probe", 30.0, perf::probe);
    let gpu = match slicesched_exec::cuda::CudaBackend::try_new(&[0]) {
        Ok(g) => g,
        Err(e) => {
            h.record("backend", false, &format!("{e}"), serde_json::json!({ "error": e.to_string() }));
            h.table();
            anyhow::bail!("the CUDA backend did not start: {e}");
        }
    };
    let g = &gpu;
    h.section("g_memory_setup", 20.0, |h| perf::memory(h, g));
    h.section("b_ops_tiny", 40.0, |h| correctness::ops(h, g, correctness::Shapes::Tiny));
    h.section("b_ops_llama8b", 120.0, |h| correctness::ops(h, g, correctness::Shapes::Llama8b));
    h.section("b_model_2layer", 40.0, |h| correctness::model(h, g));
    h.section("c_gemm", 60.0, |h| perf::gemm(h, g));
    h.section("d_launch", 20.0, |h| perf::launch(h, g));
    h.section("e_priority", 40.0, |h| perf::priority(h, g));
    h.section("f_copies", 30.0, |h| perf::copies(h, g));
    h.section("g_memory_end", 10.0, |h| perf::memory(h, g));
    drop(gpu);
    h.table();
    Ok(())
}
