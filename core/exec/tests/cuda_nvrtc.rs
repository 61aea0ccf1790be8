//! Every CUDA kernel compiles with NVRTC to an sm_90 CUBIN without a register spill,
//! for every head dimension the executor serves. Needs NVRTC, not a GPU: CI installs the
//! PyPI wheel and sets SLICESCHED_REQUIRE_NVRTC=1, so a missing NVRTC fails there; a
//! machine without it prints "skipped: no NVRTC".
#![cfg(any(feature = "cuda-12", feature = "cuda-13"))]

use slicesched_exec::cuda::nvrtc::{self, Image};

fn nvrtc_or_skip() -> bool {
    match nvrtc::present() {
        Ok(()) => true,
        Err(e) => {
            assert!(
                std::env::var("SLICESCHED_REQUIRE_NVRTC").as_deref() != Ok("1"),
                "SLICESCHED_REQUIRE_NVRTC=1 but {e}"
            );
            eprintln!("skipped: no NVRTC ({e})");
            false
        }
    }
}

#[test]
fn every_kernel_compiles_to_sm90_without_spills() {
    if !nvrtc_or_skip() {
        return;
    }
    let (major, minor) = nvrtc::version().expect("NVRTC version");
    // 16: the test models; 64, 128, 256: the head dimensions of served models.
    for d in [16, 64, 128, 256] {
        let c = nvrtc::compile_fresh("sm_90", d, true).unwrap_or_else(|e| panic!("head dim {d}: {e}"));
        assert!(matches!(&c.image, Image::Cubin(b) if !b.is_empty()), "head dim {d}: no CUBIN");
        let usage = nvrtc::parse_usage(&c.log);
        for k in nvrtc::KERNELS {
            let u = usage
                .iter()
                .find(|u| u.name == *k)
                .unwrap_or_else(|| panic!("head dim {d}: no ptxas report for {k} in\n{}", c.log));
            eprintln!(
                "NVRTC {major}.{minor} sm_90 head_dim {d:>3} {k:<16} {:>3} registers, {} B stack, spills {}/{} B",
                u.registers, u.stack_bytes, u.spill_stores, u.spill_loads
            );
            assert_eq!((u.spill_stores, u.spill_loads), (0, 0), "head dim {d}: {k} spills registers\n{}", c.log);
        }
    }
}

#[test]
fn the_ptx_fallback_compiles() {
    if !nvrtc_or_skip() {
        return;
    }
    let c = nvrtc::compile_fresh("compute_90", 128, false).expect("PTX");
    match c.image {
        Image::Ptx(p) => assert!(p.contains(".entry paged_attention"), "PTX without the attention kernel"),
        Image::Cubin(_) => panic!("compute_90 gave a CUBIN"),
    }
}
