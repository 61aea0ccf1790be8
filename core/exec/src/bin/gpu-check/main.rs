//! `gpu-check --out DIR [--budget-s 390] [--only SECTION,...] [--slicesched PATH [--repo DIR]]`: the CUDA
//! backend measured on a real GPU (shared/docs/executor.md §9). Each section runs under
//! `catch_unwind` with its own time cap and appends JSON lines to `DIR/results.jsonl`;
//! the run ends with a short table. With `--slicesched`, section (h) runs that binary's
//! `profile --device cuda:0`, `cost validate` and `run --executor cuda` (serving.rs).
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
mod serving;

#[cfg(any(feature = "cuda-12", feature = "cuda-13"))]
fn main() -> anyhow::Result<()> {
    use anyhow::Context;
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let usage = "usage: gpu-check --out DIR [--budget-s 390] [--only SECTION,...] [--slicesched PATH [--repo DIR]]";
    let out = std::path::PathBuf::from(arg("--out").context(usage)?);
    let budget: f64 = arg("--budget-s").map(|s| s.parse()).transpose().context("--budget-s")?.unwrap_or(390.0);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let only = arg("--only").map(|s| s.split(',').map(str::to_string).collect()).unwrap_or_default();
    let mut h = harness::Harness::new(&out, budget, only)?;
    h.section("a_probe", 20.0, perf::probe);
    let gpu = match slicesched_exec::cuda::CudaBackend::try_new(&[0]) {
        Ok(g) => g,
        Err(e) => {
            h.record("backend", false, &format!("{e}"), serde_json::json!({ "error": e.to_string() }));
            h.table();
            anyhow::bail!("the CUDA backend did not start: {e}");
        }
    };
    let g = &gpu;
    // Caps sum to about 4.5 minutes here and 4 in (h), under the 390 s budget when
    // sections finish early; a section past its cap is marked "capped", not failed.
    h.section("g_memory_setup", 10.0, |h| perf::memory(h, g));
    h.section("b_ops_tiny", 25.0, |h| correctness::ops(h, g, correctness::Shapes::Tiny));
    h.section("b_ops_llama8b", 60.0, |h| correctness::ops(h, g, correctness::Shapes::Llama8b));
    h.section("b_model_2layer", 25.0, |h| correctness::model(h, g));
    h.section("b_batch_invariance", 15.0, |h| correctness::batch(h, g));
    h.section("c_gemm", 40.0, |h| perf::gemm(h, g));
    h.section("d_launch", 15.0, |h| perf::launch(h, g));
    h.section("e_priority", 30.0, |h| perf::priority(h, g));
    h.section("f_copies", 25.0, |h| perf::copies(h, g));
    h.section("f_nccl", 10.0, perf::nccl);
    h.section("g_memory_end", 5.0, |h| perf::memory(h, g));
    // (h) runs other processes on the GPU: this one's context and memory go first.
    drop(gpu);
    if let Some(bin) = arg("--slicesched") {
        let s = serving::Setup {
            bin: std::fs::canonicalize(&bin).with_context(|| format!("--slicesched {bin}"))?,
            repo: std::fs::canonicalize(arg("--repo").unwrap_or_else(|| ".".into())).context("--repo")?,
            out: std::fs::canonicalize(&out)?,
        };
        h.section("h_profile_8b", 110.0, |h| serving::profile(h, &s));
        h.section("h_cost_validate", 30.0, |h| serving::cost(h, &s));
        h.section("h_run_2tenants", 100.0, |h| serving::scenario(h, &s));
    } else {
        h.record("h_serving", false, "skipped: no --slicesched binary given", serde_json::Value::Null);
    }
    h.table();
    Ok(())
}
