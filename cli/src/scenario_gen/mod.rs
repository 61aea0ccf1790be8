//! `slicesched scenario generate`: draws a plausible multi-tenant mix from a seed.
//!
//! A mix is what a new user of a shared cluster would write: tenants of the model
//! presets, each on its own home (a container of 1, 2, 4 or 8 GPUs inside one node, the
//! smallest tensor-parallel degree whose GPUs hold the weights and a useful KV cache),
//! loads from the shipped Azure traces (offset, or split between tenants of one
//! service) and synthetic long-prompt, bursty (on/off) and steady (Poisson, Gamma) ones,
//! and SLAs that grow with prompt length and with the model's size per GPU. It writes no
//! planner setting and no per-tenant knob: those are the planner's to derive.
//!
//! Everything is drawn from one SplitMix64 stream seeded by `--seed` (stable across
//! platforms and crate versions, unlike `rand`'s generators), and the only other input
//! is the shipped trace files, so a seed always gives the same file.
//!
//! Order of the draw, node by node: a load kind, then a model among those whose context
//! holds the load's p99 request and whose smallest fitting home fits the node's free
//! GPUs, then the load's rate for a drawn home utilisation (`load.rs`), then the SLA.
//! Whether a home fits is answered by the scenario loader itself (`fit.rs`), so the
//! generator and the replay never disagree on memory.

mod fit;
mod load;
mod render;
mod rng;

pub use render::render;

use fit::{Candidate, Fitter, CANDIDATES};
use load::{FileTraces, Load, LoadKind};
use rng::Rng;
use slicesched_hw::GpuSku;
use std::path::{Path, PathBuf};

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenOptions {
    pub seed: u64,
    pub gpus: u32,
    /// A catalog SKU name (`slicesched_hw::sku` spellings).
    pub sku: String,
    /// The folder holding `azure2023_code.csv` and `azure2023_conv.csv`.
    pub traces: PathBuf,
}

/// Why no mix was drawn, naming the input at fault.
#[derive(Debug)]
pub enum GenError {
    UnknownSku(slicesched_hw::HwError),
    NoGpus,
    TooManyGpus { gpus: u32, max: u32 },
    TooFewGpus { gpus: u32, sku: String },
    Traces { path: String, msg: String },
    Fit { model: String, tp: u32, sku: String, msg: String },
}

// By hand rather than thiserror: the CLI crate does not depend on it, and one enum is
// not worth a lockfile change.
impl std::fmt::Display for GenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GenError::UnknownSku(e) => write!(f, "--sku: {e}"),
            GenError::NoGpus => write!(f, "--gpus: a mix needs at least one GPU"),
            GenError::TooManyGpus { gpus, max } => {
                write!(f, "--gpus: {gpus} is more than the generator places (at most {max})")
            }
            GenError::TooFewGpus { gpus, sku } => write!(
                f,
                "--gpus {gpus} --sku {sku}: too few GPUs for any model preset (none fits with a useful KV cache)"
            ),
            GenError::Traces { path, msg } => write!(f, "--traces {path}: {msg}"),
            GenError::Fit { model, tp, sku, msg } => write!(f, "checking a home of {model} on {tp}x {sku}: {msg}"),
        }
    }
}

impl std::error::Error for GenError {}

/// Most GPUs one mix spans (eight nodes of eight).
pub const MAX_GPUS: u32 = 64;
/// GPUs per node: NVSwitch nodes of eight, the last one holding the rest.
const NODE: u32 = 8;
/// Scenario length and drain, seconds: long enough for the traces' bursts to matter.
const DURATION_S: f64 = 1800.0;
const DRAIN_S: f64 = 600.0;

/// One drawn tenant.
#[derive(Debug, Clone)]
pub struct GenTenant {
    pub name: String,
    pub model: &'static str,
    pub gpus: Vec<u32>,
    pub sla: fit::Sla,
    pub load: Load,
    /// KV-cache tokens its home gets alone on its GPUs, and the least it needed.
    pub kv_tokens: u64,
    pub useful_kv_tokens: u64,
}

/// A drawn mix, ready to render.
#[derive(Debug, Clone)]
pub struct Mix {
    pub seed: u64,
    pub sku: GpuSku,
    pub gpus: u32,
    pub tenants: Vec<GenTenant>,
    /// GPUs no tenant's home could use (only on a SKU too small for the rest of a node).
    pub spare: Vec<u32>,
    pub duration_s: f64,
    pub drain_s: f64,
}

/// Draws the mix of `opts` (pure: same options and trace files, same mix).
pub fn generate(opts: &GenOptions) -> Result<Mix, GenError> {
    let sku = slicesched_hw::sku(&opts.sku).map_err(GenError::UnknownSku)?;
    let traces = FileTraces::load(&opts.traces)?;
    draw(opts.seed, opts.gpus, Fitter::new(sku), &traces)
}

fn draw(seed: u64, gpus: u32, mut fitter: Fitter, traces: &FileTraces) -> Result<Mix, GenError> {
    if gpus == 0 {
        return Err(GenError::NoGpus);
    }
    if gpus > MAX_GPUS {
        return Err(GenError::TooManyGpus { gpus, max: MAX_GPUS });
    }
    let mut rng = Rng::new(seed);
    let sku = fitter.sku().clone();
    let mut tenants: Vec<GenTenant> = Vec::new();
    let mut spare = Vec::new();
    let mut node_start = 0;
    while node_start < gpus {
        let node_end = (node_start + NODE).min(gpus);
        let mut next = node_start;
        while next < node_end {
            let free = node_end - next;
            match draw_tenant(&mut rng, &mut fitter, traces, free, tenants.len())? {
                Some(mut t) => {
                    let tp = t.gpus.len() as u32;
                    t.gpus = (next..next + tp).collect();
                    next += tp;
                    tenants.push(t);
                }
                None => {
                    spare.extend(next..node_end);
                    next = node_end;
                }
            }
        }
        node_start = node_end;
    }
    if tenants.is_empty() {
        return Err(GenError::TooFewGpus { gpus, sku: sku.name.clone() });
    }
    load::assign_file_streams(&mut rng, &mut tenants, traces);
    Ok(Mix { seed, sku, gpus, tenants, spare, duration_s: DURATION_S, drain_s: DRAIN_S })
}

/// A tenant whose home fits in `free` GPUs, or None when no preset does for any load.
/// Its `gpus` holds placeholders of the right count; the caller numbers them.
fn draw_tenant(
    rng: &mut Rng,
    fitter: &mut Fitter,
    traces: &FileTraces,
    free: u32,
    index: usize,
) -> Result<Option<GenTenant>, GenError> {
    // A load no model can take here (a long-prompt load with no long-context model
    // that fits) is redrawn; after a few tries fall back to the shortest loads.
    for attempt in 0..8 {
        let kind = if attempt < 6 { LoadKind::draw(rng) } else { LoadKind::Steady };
        let proto = load::draw_shape(rng, kind, traces);
        let mut options: Vec<(&Candidate, u32, u64)> = Vec::new();
        for c in CANDIDATES {
            if c.context() < proto.lengths.p99_tokens as u64 {
                continue;
            }
            let useful = proto.useful_kv_tokens();
            if let Some((tp, kv)) = fitter.smallest_home(c, free, useful)? {
                options.push((c, tp, kv));
            }
        }
        if options.is_empty() {
            continue;
        }
        let weights: Vec<f64> = options.iter().map(|o| o.0.weight).collect();
        let (c, mut tp, mut kv) = options[rng.weighted(&weights)];
        // Some users give a large model more GPUs than it needs (lower latency), never
        // a whole node: a mix is several tenants.
        if c.params_b >= 20.0 && tp * 2 <= free.min(NODE / 2) && rng.chance(0.25) {
            if let Some(kv2) = fitter.kv_tokens(c, tp * 2)? {
                tp *= 2;
                kv = kv2;
            }
        }
        let home = fit::Home::new(c, tp, fitter.sku());
        let load = load::size(rng, proto, &home, traces);
        let sla = fit::sla(rng, &home, kind);
        let useful = load.useful_kv_tokens();
        return Ok(Some(GenTenant {
            name: format!("{}-{}-{index}", kind.label(), c.short),
            model: c.preset,
            gpus: vec![0; tp as usize],
            sla,
            load,
            kv_tokens: kv,
            useful_kv_tokens: useful,
        }));
    }
    Ok(None)
}

/// `to` relative to the directory `from` (both made absolute; no symlinks resolved, so
/// the path is the one the user typed, made relative).
pub fn relative(from: &Path, to: &Path) -> PathBuf {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let norm = |p: PathBuf| {
        let mut out = PathBuf::new();
        for c in p.components() {
            match c {
                std::path::Component::ParentDir => {
                    out.pop();
                }
                std::path::Component::CurDir => {}
                c => out.push(c),
            }
        }
        out
    };
    let (from, to) = (norm(abs(from)), norm(abs(to)));
    let common = from.components().zip(to.components()).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in from.components().skip(common) {
        out.push("..");
    }
    for c in to.components().skip(common) {
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Fitter {
        Fitter::new(slicesched_hw::sku("H100-80GB").unwrap())
    }

    fn traces() -> FileTraces {
        FileTraces::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/traces")).unwrap()
    }

    #[test]
    fn relative_paths_climb_to_the_common_folder() {
        assert_eq!(relative(Path::new("/a/b/c"), Path::new("/a/d/e.csv")), PathBuf::from("../../d/e.csv"));
        assert_eq!(relative(Path::new("/a"), Path::new("/a/x")), PathBuf::from("x"));
        assert_eq!(relative(Path::new("/a/./b/../c"), Path::new("/a/x")), PathBuf::from("../x"));
    }

    #[test]
    fn every_gpu_is_one_home_inside_one_node() {
        let t = traces();
        for seed in 1..=30 {
            for gpus in [1, 3, 8, 12] {
                let m = draw(seed, gpus, h100(), &t).unwrap();
                let mut seen = vec![false; gpus as usize];
                for tn in &m.tenants {
                    assert!(tn.kv_tokens >= tn.useful_kv_tokens, "seed {seed}: {}", tn.name);
                    let node = tn.gpus[0] / NODE;
                    for &g in &tn.gpus {
                        assert!(!seen[g as usize] && g / NODE == node, "seed {seed}: {:?}", tn.gpus);
                        seen[g as usize] = true;
                    }
                }
                for g in &m.spare {
                    seen[*g as usize] = true;
                }
                assert!(seen.iter().all(|s| *s), "seed {seed} gpus {gpus}");
            }
        }
    }

    #[test]
    fn bad_inputs_are_named() {
        let t = traces();
        assert!(matches!(draw(1, 0, h100(), &t), Err(GenError::NoGpus)));
        assert!(matches!(draw(1, 65, h100(), &t), Err(GenError::TooManyGpus { .. })));
        // Devices too small for any preset (the catalog has none today): no mix at all.
        let none = Fitter::with_answers(slicesched_hw::sku("H100").unwrap(), |_, _| None);
        let e = draw(1, 2, none, &t).unwrap_err();
        assert!(e.to_string().contains("too few GPUs") && e.to_string().contains("H100-80GB"), "{e}");
        // Only 70B models on 4 GPUs fit: a 2-GPU remainder stays spare, said so.
        let big = Fitter::with_answers(slicesched_hw::sku("H100").unwrap(), |c, tp| {
            (c.params_b > 60.0 && tp == 4).then_some(400_000)
        });
        let m = draw(3, 6, big, &t).unwrap();
        assert_eq!((m.tenants.len(), m.spare.clone()), (1, vec![4, 5]));
        let o = GenOptions { seed: 1, gpus: 8, sku: "B300".into(), traces: "x".into() };
        assert!(generate(&o).unwrap_err().to_string().contains("B300"));
        let o = GenOptions { sku: "H100".into(), traces: "/no/such/folder".into(), ..o };
        assert!(generate(&o).unwrap_err().to_string().contains("/no/such/folder"));
    }

    #[test]
    fn seeds_differ_and_repeat() {
        let t = traces();
        let a = render(&draw(5, 8, h100(), &t).unwrap(), Path::new("../data/traces"));
        let b = render(&draw(5, 8, h100(), &t).unwrap(), Path::new("../data/traces"));
        let c = render(&draw(6, 8, h100(), &t).unwrap(), Path::new("../data/traces"));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
