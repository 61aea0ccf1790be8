//! Accuracy of the fitted model against measured profiles: a deterministic 20% hold-out
//! on one directory, a fit-here-test-there mode, and leave-one-model-out.

use crate::curve::quantile;
use crate::fit::{kind_of, profiled_spec};
use crate::profiles::{AttnRow, ProfileSet, MLP_OPS};
use crate::{a100, CostError, CostModel, DeviceCtx};
use serde::{Deserialize, Serialize};
use slicesched_hw::GpuSku;
use slicesched_model::{AttnShape, OpKind, OpShape, OpSpec};
use std::path::Path;

/// Points measured under this are at the profiler's 1 µs resolution: excluded.
const MIN_SECS: f64 = 10e-6;
const HOLDOUT_SEED: u64 = 0x5eed_c057;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OpError {
    pub op: String,
    pub n: usize,
    pub median: f64,
    pub p90: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Overall {
    pub median: f64,
    pub p90: f64,
}

/// Relative errors |pred − meas| / meas per op, as fractions.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ValidationReport {
    pub ops: Vec<OpError>,
    pub overall: Overall,
}

/// One leave-one-model-out round: the model left out and how well it was predicted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelReport {
    pub model: String,
    pub report: ValidationReport,
}

impl ValidationReport {
    /// Aligned columns, errors in percent.
    pub fn table(&self) -> String {
        let w = self.ops.iter().map(|o| o.op.len()).chain(["overall".len()]).max().unwrap_or(8);
        let mut s = format!("{:<w$}  {:>6}  {:>7}  {:>7}  {:>7}\n", "op", "n", "median", "p90", "max");
        let pct = |v: f64| format!("{:.1}%", v * 100.0);
        for o in &self.ops {
            s += &format!("{:<w$}  {:>6}  {:>7}  {:>7}  {:>7}\n", o.op, o.n, pct(o.median), pct(o.p90), pct(o.max));
        }
        let n: usize = self.ops.iter().map(|o| o.n).sum();
        s += &format!("{:<w$}  {:>6}  {:>7}  {:>7}\n", "overall", n, pct(self.overall.median), pct(self.overall.p90));
        s
    }

    pub fn op(&self, name: &str) -> Option<&OpError> {
        self.ops.iter().find(|o| o.op == name)
    }

    fn from_errors(mut errs: Vec<(&'static str, f64)>) -> Self {
        let order: Vec<&str> = MLP_OPS.iter().copied().chain(["attn_prefill", "attn_decode"]).collect();
        let mut ops = Vec::new();
        for name in order {
            let mut v: Vec<f64> = errs.iter().filter(|e| e.0 == name).map(|e| e.1).collect();
            if v.is_empty() {
                continue;
            }
            let (median, p90, max) = (quantile(&mut v, 0.5), quantile(&mut v, 0.9), quantile(&mut v, 1.0));
            ops.push(OpError { op: name.to_string(), n: v.len(), median, p90, max });
        }
        let mut all: Vec<f64> = errs.drain(..).map(|e| e.1).collect();
        let overall = if all.is_empty() {
            Overall { median: 0.0, p90: 0.0 }
        } else {
            Overall { median: quantile(&mut all, 0.5), p90: quantile(&mut all, 0.9) }
        };
        ValidationReport { ops, overall }
    }
}

/// A measured point to predict.
enum Sample {
    Mlp { model: usize, tokens: u32, tp: u32, op: usize, secs: f64 },
    Attn(AttnRow),
}

/// Fits on `fit_dir` and predicts `test_dir` (see [`validate_dirs`]).
pub fn validate(fit_dir: &Path, test_dir: &Path, test_sku: Option<&str>) -> Result<ValidationReport, CostError> {
    validate_dirs(&[fit_dir], test_dir, test_sku, &[])
}

/// A profile directory read with the GPU it was measured on: its `device_config.yml`,
/// else the A100-80GB (the layout Vidur ships without one).
pub fn read_dir_with_sku(dir: &Path, extra: &[GpuSku]) -> Result<(ProfileSet, GpuSku), CostError> {
    let set = ProfileSet::from_dir(dir)?;
    let sku = set.device_sku(extra)?.unwrap_or_else(a100);
    Ok((set, sku))
}

/// The GPU the test profiles are predicted on: `--test-sku` when given (it must agree
/// with the test folder's `device_config.yml`), else the folder's own GPU.
fn test_sku_of(test: &ProfileSet, dir: &Path, test_sku: Option<&str>, extra: &[GpuSku]) -> Result<GpuSku, CostError> {
    let own = test.device_sku(extra)?;
    let Some(name) = test_sku else {
        return Ok(own.unwrap_or_else(a100));
    };
    let sku = slicesched_hw::sku_in(name, extra)
        .map_err(|e| CostError::Invalid { path: "--test-sku".into(), msg: e.to_string() })?;
    if let Some(own) = own {
        if own.name != sku.name {
            return Err(CostError::Invalid {
                path: dir.join("device_config.yml").display().to_string(),
                msg: format!(
                    "describes {} but --test-sku asks to predict {}: the test folder was measured on another GPU",
                    own.name, sku.name
                ),
            });
        }
    }
    Ok(sku)
}

/// Fits on every folder of `fit_dirs` (each on its own GPU, see [`read_dir_with_sku`])
/// and predicts `test_dir` on its GPU. When `test_dir` is one of the fit folders, 20%
/// of the token counts of every (model, TP, op) — and 20% of the attention points of
/// every (model, phase) — are held out of it with a fixed seed, the rest and the other
/// folders are fitted, and the held-out points are predicted.
pub fn validate_dirs(
    fit_dirs: &[&Path],
    test_dir: &Path,
    test_sku: Option<&str>,
    extra: &[GpuSku],
) -> Result<ValidationReport, CostError> {
    let canon = |p: &Path| p.canonicalize().map_err(|e| CostError::Io { path: p.display().to_string(), err: e });
    let fits = fit_dirs.iter().map(|d| read_dir_with_sku(d, extra)).collect::<Result<Vec<_>, _>>()?;
    let test_canon = canon(test_dir)?;
    let mut same = None;
    for (i, d) in fit_dirs.iter().enumerate() {
        if canon(d)? == test_canon {
            same = Some(i);
        }
    }
    let test_set = match same {
        Some(i) => fits[i].0.clone(),
        None => ProfileSet::from_dir(test_dir)?,
    };
    let sku = test_sku_of(&test_set, test_dir, test_sku, extra)?;
    if let Some(i) = same {
        if sku.name != fits[i].1.name {
            return Err(CostError::Invalid {
                path: "--test-sku".into(),
                msg: format!("the test folder is a fit folder measured on {}, not {}", fits[i].1.name, sku.name),
            });
        }
        let others: Vec<_> = fits.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, f)| f.clone()).collect();
        return Ok(holdout_with(&test_set, &sku, &others));
    }
    let refs: Vec<(&ProfileSet, &GpuSku)> = fits.iter().map(|(s, k)| (s, k)).collect();
    let model = CostModel::fit_many(&refs)?;
    Ok(evaluate(&model, &test_set, all_samples(&test_set), &sku))
}

/// For each model of `test_dir`: fit on `fit_dirs` without that model (by folder
/// name), predict the model's points on the test GPU. With the test folder among the
/// fit folders this is [`validate_leave_one_model_out`] across several GPUs.
pub fn validate_dirs_leave_one_model_out(
    fit_dirs: &[&Path],
    test_dir: &Path,
    test_sku: Option<&str>,
    extra: &[GpuSku],
) -> Result<Vec<ModelReport>, CostError> {
    let fits = fit_dirs.iter().map(|d| read_dir_with_sku(d, extra)).collect::<Result<Vec<_>, _>>()?;
    let test = ProfileSet::from_dir(test_dir)?;
    let sku = test_sku_of(&test, test_dir, test_sku, extra)?;
    let mut out = Vec::new();
    for (mi, m) in test.models.iter().enumerate() {
        let trains: Vec<(ProfileSet, GpuSku)> = fits
            .iter()
            .map(|(s, k)| {
                let mut s = s.clone();
                s.models.retain(|x| x.name != m.name);
                (s, k.clone())
            })
            .collect();
        let refs: Vec<(&ProfileSet, &GpuSku)> = trains.iter().map(|(s, k)| (s, k)).collect();
        let has_attn = trains.iter().any(|(s, _)| s.models.iter().any(|t| !t.attention.is_empty()));
        let model = CostModel::fit_many(&refs)?;
        let samples = all_samples(&test)
            .into_iter()
            .filter(|s| matches!(s, Sample::Mlp { model, .. } if *model == mi))
            .chain(m.attention.iter().filter(|_| has_attn).cloned().map(Sample::Attn));
        out.push(ModelReport { model: m.name.clone(), report: evaluate(&model, &test, samples.collect(), &sku) });
    }
    Ok(out)
}

/// The hold-out split of [`validate`] on an already-read set (the tests use the
/// embedded copy).
pub fn holdout(set: &ProfileSet, sku: &GpuSku) -> ValidationReport {
    holdout_with(set, sku, &[])
}

/// [`holdout`] with other GPUs' sets fitted whole beside the training part of `set`
/// (measured on `sku`).
pub fn holdout_with(set: &ProfileSet, sku: &GpuSku, others: &[(ProfileSet, GpuSku)]) -> ValidationReport {
    let mut train = set.clone();
    let mut held = Vec::new();
    for (mi, m) in set.models.iter().enumerate() {
        let mut tps: Vec<u32> = m.mlp.iter().map(|r| r.tp).collect();
        tps.sort_unstable();
        tps.dedup();
        for tp in tps {
            for op in 0..MLP_OPS.len() {
                let toks: Vec<u64> =
                    m.mlp.iter().filter(|r| r.tp == tp && r.secs[op].is_some()).map(|r| r.tokens as u64).collect();
                let out = pick_fifth(&toks, &[mi as u64, tp as u64, op as u64]);
                for (ri, r) in m.mlp.iter().enumerate() {
                    if r.tp == tp && out.contains(&(r.tokens as u64)) {
                        if let Some(secs) = r.secs[op] {
                            held.push(Sample::Mlp { model: mi, tokens: r.tokens, tp, op, secs });
                            train.models[mi].mlp[ri].secs[op] = None;
                        }
                    }
                }
            }
        }
        for phase in [true, false] {
            let keys: Vec<u64> = m
                .attention
                .iter()
                .filter(|r| r.prefill == phase)
                .map(|r| (r.chunk.max(r.batch) as u64) << 32 | r.kv as u64)
                .collect();
            let out = pick_fifth(&keys, &[mi as u64, 1000 + phase as u64]);
            for r in m.attention.iter().filter(|r| r.prefill == phase) {
                if out.contains(&((r.chunk.max(r.batch) as u64) << 32 | r.kv as u64)) {
                    held.push(Sample::Attn(r.clone()));
                }
            }
            train.models[mi]
                .attention
                .retain(|r| r.prefill != phase || !out.contains(&((r.chunk.max(r.batch) as u64) << 32 | r.kv as u64)));
        }
    }
    let mut refs: Vec<(&ProfileSet, &GpuSku)> = vec![(&train, sku)];
    refs.extend(others.iter().map(|(s, k)| (s, k)));
    let model = CostModel::fit_many(&refs).expect("fitting a parsed set cannot fail");
    evaluate(&model, set, held, sku)
}

/// For each model: fit on all the others, predict every point of the one left out.
/// Attention is skipped for a left-out model when no other model has an attention table.
pub fn validate_leave_one_model_out(dir: &Path) -> Result<Vec<ModelReport>, CostError> {
    let (set, sku) = read_dir_with_sku(dir, &[])?;
    Ok(leave_one_model_out_on(&set, &sku))
}

/// [`validate_leave_one_model_out`] on an already-read A100 set.
pub fn leave_one_model_out(set: &ProfileSet) -> Vec<ModelReport> {
    leave_one_model_out_on(set, &a100())
}

fn leave_one_model_out_on(set: &ProfileSet, sku: &GpuSku) -> Vec<ModelReport> {
    let mut out = Vec::new();
    for (mi, m) in set.models.iter().enumerate() {
        let mut train = set.clone();
        train.models.remove(mi);
        let has_attn = train.models.iter().any(|t| !t.attention.is_empty());
        let model = CostModel::fit(&train, sku).expect("fitting a parsed set cannot fail");
        let samples = all_samples(set)
            .into_iter()
            .filter(|s| matches!(s, Sample::Mlp { model, .. } if *model == mi))
            .chain(m.attention.iter().filter(|_| has_attn).cloned().map(Sample::Attn));
        out.push(ModelReport { model: m.name.clone(), report: evaluate(&model, set, samples.collect(), sku) });
    }
    out
}

/// Deterministic 20% of the distinct `keys`, chosen by a seeded hash of each key.
fn pick_fifth(keys: &[u64], group: &[u64]) -> Vec<u64> {
    let mut g = HOLDOUT_SEED;
    for &x in group {
        g = splitmix(g ^ x);
    }
    let mut k: Vec<u64> = keys.to_vec();
    k.sort_unstable();
    k.dedup();
    k.sort_by_key(|&x| splitmix(g ^ x));
    k.truncate((k.len() as f64 * 0.2).round() as usize);
    k.sort_unstable();
    k
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn all_samples(set: &ProfileSet) -> Vec<Sample> {
    let mut v = Vec::new();
    for (mi, m) in set.models.iter().enumerate() {
        for r in &m.mlp {
            for (op, s) in r.secs.iter().enumerate() {
                if let Some(secs) = *s {
                    v.push(Sample::Mlp { model: mi, tokens: r.tokens, tp: r.tp, op, secs });
                }
            }
        }
        v.extend(m.attention.iter().cloned().map(Sample::Attn));
    }
    v
}

fn attn_spec(r: &AttnRow) -> OpSpec {
    let h = crate::attn::row_heads(r);
    let mut a = AttnShape { q_heads: h.q as u32, kv_heads: h.kv as u32, head_dim: h.dim as u32, ..Default::default() };
    if r.prefill {
        a.prefill.push((r.chunk, r.kv));
    } else {
        a.decode_batch = r.batch;
        a.decode_kv_sum = r.batch as u64 * r.kv as u64;
    }
    // The attention path computes its own work from the shape.
    OpSpec {
        kind: OpKind::Attention,
        shape: OpShape::Attention(a),
        flops: 0,
        bytes: 0,
        weight_bytes: 0,
        out_bytes: 0,
        tp: r.tp,
    }
}

fn evaluate(model: &CostModel, set: &ProfileSet, samples: Vec<Sample>, sku: &GpuSku) -> ValidationReport {
    let dev = DeviceCtx::single_node(sku.clone());
    let mut errs = Vec::new();
    for s in samples {
        let (name, spec, secs) = match s {
            Sample::Mlp { model: mi, tokens, tp, op, secs } => {
                let cfg = &set.models[mi].config;
                let Some(kind) = kind_of(MLP_OPS[op]) else {
                    continue;
                };
                if tokens == 0 || cfg.check_tp(tp).is_err() {
                    continue;
                }
                let Some(spec) = profiled_spec(cfg, tokens, tp, kind) else {
                    continue;
                };
                (MLP_OPS[op], spec, secs)
            }
            Sample::Attn(r) => (if r.prefill { "attn_prefill" } else { "attn_decode" }, attn_spec(&r), r.secs),
        };
        if secs < MIN_SECS {
            continue;
        }
        let pred = model.kernel_secs(&dev, &spec);
        errs.push((name, (pred - secs).abs() / secs));
    }
    ValidationReport::from_errors(errs)
}
