//! Compiling `kernels.cu` with NVRTC: CUBIN for the device's own architecture (loading
//! it needs no driver JIT, so an NVRTC newer than the driver still works), PTX as the
//! fallback, both cached on disk by a key over everything that changes the output.
//! Usable without a GPU: CI compiles every kernel to sm_90 here and fails on spills.

use super::guard;
use crate::ExecError;
use cudarc::nvrtc::{result as nv, sys as nvsys};
use std::ffi::CString;
use std::path::PathBuf;

/// The kernel source, compiled per head dimension (a define).
pub const SOURCE: &str = include_str!("kernels.cu");

/// Every kernel the source defines (the GPU check and the compile test load each).
pub const KERNELS: &[&str] = &[
    "embedding",
    "rmsnorm",
    "gather_rows",
    "rope",
    "cache_write",
    "paged_attention",
    "residual_add",
    "silu_mul",
    "sum_parts",
    "argmax",
    "spin",
];

/// What NVRTC produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A CUBIN for exactly this architecture.
    Cubin(Vec<u8>),
    /// PTX text, JIT-compiled by the driver at load.
    Ptx(String),
}

/// One compilation: the image, the log (with `--ptxas-options=-v`, per-kernel registers,
/// stack and spills) and whether it came from the disk cache.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub image: Image,
    pub log: String,
    pub cached: bool,
}

/// Resource use of one kernel, parsed from a verbose ptxas log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelUsage {
    pub name: String,
    pub registers: u32,
    pub stack_bytes: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// Checks the NVRTC library can be loaded, without panicking if it cannot.
pub fn present() -> Result<(), ExecError> {
    // SAFETY: is_culib_present only tries to dlopen the library by its candidate names.
    let ok = guard("NVRTC", || Ok(unsafe { nvsys::is_culib_present() }))?;
    if ok {
        Ok(())
    } else {
        Err(ExecError::NoCuda { missing: format!("NVRTC (libnvrtc.so; tried {})", lib_names("nvrtc")) })
    }
}

pub(super) fn lib_names(lib: &str) -> String {
    let mut names = cudarc::get_lib_name_candidates(lib);
    // cudarc lists some Windows-style names twice; a user reads the Linux ones.
    names.retain(|n| n.starts_with(&format!("lib{lib}.so")));
    names.dedup();
    names.join(", ")
}

/// NVRTC's (major, minor) version.
pub fn version() -> Result<(i32, i32), ExecError> {
    present()?;
    guard("NVRTC", || {
        let (mut a, mut b) = (0, 0);
        // SAFETY: two out-pointers to live locals.
        let r = unsafe { nvsys::nvrtcVersion(&mut a, &mut b) };
        check(r, "nvrtcVersion")?;
        Ok((a, b))
    })
}

fn check(r: nvsys::nvrtcResult, what: &str) -> Result<(), ExecError> {
    if r == nvsys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(ExecError::Cuda(format!("{what}: {r:?}")))
    }
}

/// The options of one build: `arch` is `sm_90` (CUBIN) or `compute_90` (PTX).
pub fn options(arch: &str, head_dim: usize, verbose: bool) -> Vec<String> {
    let mut o = vec![format!("--gpu-architecture={arch}"), "--std=c++17".to_string(), format!("-DHEAD_DIM={head_dim}")];
    if verbose {
        o.push("--ptxas-options=-v".to_string());
    }
    o
}

/// Compiles the kernels for one architecture (`sm_XY` gives a CUBIN, `compute_XY` PTX)
/// and head dimension; `verbose` adds the ptxas resource report to the log.
pub fn compile(arch: &str, head_dim: usize, verbose: bool) -> Result<Compiled, ExecError> {
    present()?;
    let opts = options(arch, head_dim, verbose);
    let ver = version()?;
    let key = format!("{}\n{}\nnvrtc {}.{}\n{arch}", fnv(SOURCE), opts.join(" "), ver.0, ver.1);
    let cubin = arch.starts_with("sm_");
    if let Some(image) = cache_get(&key, cubin) {
        return Ok(Compiled { image, log: String::new(), cached: true });
    }
    let (image, log) = guard("NVRTC", || compile_uncached(SOURCE, &opts, cubin))?;
    cache_put(&key, &image);
    Ok(Compiled { image, log, cached: false })
}

/// Compiles without the disk cache (the CI check wants ptxas's log every time).
pub fn compile_fresh(arch: &str, head_dim: usize, verbose: bool) -> Result<Compiled, ExecError> {
    present()?;
    let opts = options(arch, head_dim, verbose);
    let (image, log) = guard("NVRTC", || compile_uncached(SOURCE, &opts, arch.starts_with("sm_")))?;
    Ok(Compiled { image, log, cached: false })
}

/// Compiles any source to PTX with these options (the GPU check's header probe).
pub fn compile_source(src: &str, opts: &[String]) -> Result<Compiled, ExecError> {
    present()?;
    let (image, log) = guard("NVRTC", || compile_uncached(src, opts, false))?;
    Ok(Compiled { image, log, cached: false })
}

fn compile_uncached(src: &str, opts: &[String], cubin: bool) -> Result<(Image, String), ExecError> {
    let src = CString::new(src).map_err(|e| ExecError::Cuda(format!("kernel source: {e}")))?;
    let prog = nv::create_program(&src, Some(c"kernels.cu")).map_err(|e| ExecError::Cuda(format!("{e:?}")))?;
    // SAFETY: prog was created above and is destroyed once, below; the sizes come from
    // NVRTC and the buffers are allocated to them.
    unsafe {
        let compiled = nv::compile_program(prog, opts);
        let log = nv::get_program_log(prog)
            .map(|l| {
                let b: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                String::from_utf8_lossy(&b).into_owned()
            })
            .unwrap_or_default();
        let image = match compiled {
            Err(e) => Err(ExecError::Cuda(format!("NVRTC compile ({}): {e:?}\n{log}", opts.join(" ")))),
            Ok(()) if cubin => {
                let mut n = 0usize;
                check(nvsys::nvrtcGetCUBINSize(prog, &mut n), "nvrtcGetCUBINSize").and_then(|_| {
                    let mut buf = vec![0u8; n];
                    check(nvsys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut _), "nvrtcGetCUBIN")
                        .map(|_| Image::Cubin(buf))
                })
            }
            Ok(()) => nv::get_ptx(prog).map_err(|e| ExecError::Cuda(format!("nvrtcGetPTX: {e:?}"))).map(|p| {
                let b: Vec<u8> = p.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                Image::Ptx(String::from_utf8_lossy(&b).into_owned())
            }),
        };
        let _ = nv::destroy_program(prog);
        Ok((image?, log))
    }
}

/// Per-kernel usage from a `--ptxas-options=-v` log. ptxas writes, per function,
/// `Compiling entry function 'NAME' for 'sm_90'`, then `N bytes stack frame, N bytes
/// spill stores, N bytes spill loads` and `Used N registers, ...`.
pub fn parse_usage(log: &str) -> Vec<KernelUsage> {
    let mut out: Vec<KernelUsage> = Vec::new();
    let num_before = |line: &str, word: &str| -> Option<u32> {
        let i = line.find(word)?;
        line[..i].split_whitespace().last()?.parse().ok()
    };
    for line in log.lines() {
        if let Some(i) = line.find("entry function '") {
            let rest = &line[i + "entry function '".len()..];
            let name = rest.split('\'').next().unwrap_or("").to_string();
            out.push(KernelUsage { name, ..Default::default() });
            continue;
        }
        let Some(k) = out.last_mut() else { continue };
        if line.contains("stack frame") {
            k.stack_bytes = num_before(line, "bytes stack frame").unwrap_or(0);
            k.spill_stores = num_before(line, "bytes spill stores").unwrap_or(0);
            k.spill_loads = num_before(line, "bytes spill loads").unwrap_or(0);
        }
        if let Some(r) = num_before(line, "registers") {
            k.registers = r;
        }
    }
    out
}

/// FNV-1a, 64 bits: a stable hash for cache keys (std's hasher may change between Rust
/// releases; the full key is stored beside the image and compared on load anyway).
fn fnv(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `$SLICESCHED_KERNEL_CACHE`, else `$XDG_CACHE_HOME/slicesched/kernels`, else
/// `~/.cache/slicesched/kernels`; `off` disables the cache.
fn cache_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("SLICESCHED_KERNEL_CACHE") {
        return (d != "off").then(|| PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("slicesched").join("kernels"))
}

fn cache_get(key: &str, cubin: bool) -> Option<Image> {
    let p = cache_dir()?.join(fnv(key));
    if std::fs::read_to_string(p.with_extension("key")).ok()? != key {
        return None;
    }
    if cubin {
        std::fs::read(p.with_extension("cubin")).ok().map(Image::Cubin)
    } else {
        std::fs::read_to_string(p.with_extension("ptx")).ok().map(Image::Ptx)
    }
}

/// Best effort: a cache that cannot be written only costs a recompile.
fn cache_put(key: &str, image: &Image) {
    let Some(dir) = cache_dir() else { return };
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let p = dir.join(fnv(key));
    let (ext, bytes) = match image {
        Image::Cubin(b) => ("cubin", b.as_slice()),
        Image::Ptx(s) => ("ptx", s.as_bytes()),
    };
    // Image first, key last: a reader that sees the key sees a whole image.
    let tmp = p.with_extension(format!("{ext}.tmp{}", std::process::id()));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, p.with_extension(ext)).is_ok() {
        let _ = std::fs::write(p.with_extension("key"), key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_ptxas_log() {
        let log = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'rmsnorm' for 'sm_90'\n\
ptxas info    : Function properties for rmsnorm\n\
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 16 registers, 128 bytes smem, 388 bytes cmem[0]\n\
ptxas info    : Compiling entry function 'paged_attention' for 'sm_90'\n\
ptxas info    : Function properties for paged_attention\n\
    64 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n\
ptxas info    : Used 255 registers, 2096 bytes smem\n";
        let u = parse_usage(log);
        assert_eq!(u.len(), 2);
        assert_eq!(u[0], KernelUsage { name: "rmsnorm".into(), registers: 16, ..Default::default() });
        assert_eq!((u[1].registers, u[1].stack_bytes, u[1].spill_stores, u[1].spill_loads), (255, 64, 8, 12));
    }

    #[test]
    fn the_cache_key_hash_is_stable() {
        assert_eq!(fnv(""), "cbf29ce484222325");
        assert_ne!(fnv("a"), fnv("b"));
    }

    #[test]
    fn every_kernel_is_in_the_source() {
        for k in KERNELS {
            assert!(SOURCE.contains(&format!("void {k}(")), "{k}");
        }
    }
}
