//! Without a GPU the CUDA backend is a typed error naming what is missing, never a panic
//! (CI has no libcuda). On a machine with a GPU these tests check nothing and say so.
#![cfg(any(feature = "cuda-12", feature = "cuda-13"))]

use slicesched_exec::cuda::{self, CudaBackend};
use slicesched_exec::ExecError;

fn no_driver() -> bool {
    let l = cuda::libraries();
    if l.driver {
        eprintln!("skipped: libcuda is present here (the GPU check covers this machine)");
    }
    !l.driver
}

#[test]
fn try_new_without_a_driver_names_libcuda() {
    if !no_driver() {
        return;
    }
    for ordinals in [vec![0], vec![0, 1], vec![]] {
        match CudaBackend::try_new(&ordinals) {
            Err(ExecError::NoCuda { missing }) => {
                assert!(missing.contains("libcuda"), "{missing}");
                assert!(!missing.contains('\n'), "one line: {missing}");
            }
            Err(e) => panic!("{ordinals:?}: another error: {e}"),
            Ok(_) => panic!("{ordinals:?}: a backend without a driver"),
        }
    }
}

#[test]
fn the_error_says_cuda_is_unavailable_in_one_line() {
    if !no_driver() {
        return;
    }
    let e = cuda::require_libraries().unwrap_err();
    let s = e.to_string();
    assert!(s.starts_with("CUDA unavailable: ") && s.contains("libcuda") && !s.contains('\n'), "{s}");
}

#[test]
fn every_library_probe_answers_without_panicking() {
    // Whatever is installed, probing twice gives the same answer and never unwinds.
    let (a, b) = (cuda::libraries(), cuda::libraries());
    assert_eq!((a.driver, a.cublas, a.nvrtc), (b.driver, b.cublas, b.nvrtc));
    match cuda::nvrtc::present() {
        Ok(()) => assert!(a.nvrtc),
        Err(ExecError::NoCuda { missing }) => {
            assert!(!a.nvrtc && missing.contains("NVRTC"), "{missing}")
        }
        Err(e) => panic!("{e}"),
    }
}
