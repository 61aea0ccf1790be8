//! End-to-end check: measured prompt and per-token times of whole models (Splitwise's
//! `perf_model.csv` layout) against kernels + engine costs, and the fit of the engine
//! costs ([`EngineFit`]) on them.

use crate::curve::quantile;
use crate::engine::Pipeline;
use crate::validate::Overall;
use crate::{CostError, CostModel, CpuOverhead, DeviceCtx, EngineFit};
use serde::{Deserialize, Serialize};
use slicesched_model::{DecodeItem, IterationBatch, ModelConfig, OpShape, PrefillItem};

/// One measured configuration, its repetitions averaged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E2eRow {
    pub model: String,
    pub hardware: String,
    pub tp: u32,
    pub prompt: u32,
    pub batch: u32,
    pub tokens: u32,
    /// One prefill of `batch` prompts, seconds.
    pub prompt_secs: f64,
    /// One decode iteration of the whole batch, seconds.
    pub token_secs: f64,
    pub reps: u32,
}

/// A row with its predictions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E2ePoint {
    pub row: E2eRow,
    pub pred_prompt_secs: f64,
    pub pred_token_secs: f64,
}

/// Relative errors of prompt and per-token time, overall and per TP degree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct E2eReport {
    pub engine: EngineFit,
    pub prompt: Overall,
    pub token: Overall,
    pub by_tp: Vec<(u32, Overall, Overall)>,
    pub points: Vec<E2ePoint>,
}

/// Model names of the Splitwise table and the presets they are.
fn preset_of(model: &str) -> Option<&'static str> {
    match model.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
        "llama270b" => Some("llama-2-70b"),
        "llama27b" => Some("llama-2-7b"),
        "llama213b" => Some("llama-2-13b"),
        "llama38b" => Some("llama-3-8b"),
        _ => None,
    }
}

/// Parses Splitwise's `perf_model.csv` layout (times in ms), averaging repetitions.
pub fn parse_e2e(text: &str, path: &str) -> Result<Vec<E2eRow>, CostError> {
    let bad = |line: u64, msg: String| CostError::Csv { path: path.into(), line, column: String::new(), msg };
    let mut rd = csv::Reader::from_reader(text.as_bytes());
    let head = rd.headers().map_err(|e| bad(1, e.to_string()))?.clone();
    let col = |n: &str| {
        head.iter().position(|h| h.trim() == n).ok_or_else(|| CostError::Csv {
            path: path.into(),
            line: 1,
            column: n.into(),
            msg: "missing column".into(),
        })
    };
    let c = [
        col("model")?,
        col("hardware")?,
        col("tensor_parallel")?,
        col("prompt_size")?,
        col("batch_size")?,
        col("token_size")?,
        col("prompt_time")?,
        col("token_time")?,
    ];
    let mut rows: Vec<E2eRow> = Vec::new();
    for (i, rec) in rd.records().enumerate() {
        let line = i as u64 + 2;
        let rec = rec.map_err(|e| bad(line, e.to_string()))?;
        let get = |j: usize| rec.get(c[j]).map(str::trim).unwrap_or("");
        let int = |j: usize| -> Result<u32, CostError> {
            get(j).parse::<u32>().ok().filter(|v| *v > 0).ok_or_else(|| CostError::Csv {
                path: path.into(),
                line,
                column: head[c[j]].to_string(),
                msg: format!("expected a positive integer, got `{}`", get(j)),
            })
        };
        let ms = |j: usize| -> Result<f64, CostError> {
            get(j).parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0).map(|v| v * 1e-3).ok_or_else(|| {
                CostError::Csv {
                    path: path.into(),
                    line,
                    column: head[c[j]].to_string(),
                    msg: format!("expected a positive time in ms, got `{}`", get(j)),
                }
            })
        };
        let r = E2eRow {
            model: get(0).to_string(),
            hardware: get(1).to_string(),
            tp: int(2)?,
            prompt: int(3)?,
            batch: int(4)?,
            tokens: int(5)?,
            prompt_secs: ms(6)?,
            token_secs: ms(7)?,
            reps: 1,
        };
        let same = |a: &E2eRow| {
            (a.model.as_str(), a.hardware.as_str(), a.tp, a.prompt, a.batch, a.tokens)
                == (r.model.as_str(), r.hardware.as_str(), r.tp, r.prompt, r.batch, r.tokens)
        };
        match rows.iter_mut().find(|a| same(a)) {
            Some(a) => {
                let n = a.reps as f64;
                a.prompt_secs = (a.prompt_secs * n + r.prompt_secs) / (n + 1.0);
                a.token_secs = (a.token_secs * n + r.token_secs) / (n + 1.0);
                a.reps += 1;
            }
            None => rows.push(r),
        }
    }
    Ok(rows)
}

/// The Splitwise A100 Llama-2-70B table shipped in `data/e2e`.
pub fn embedded_rows() -> Vec<E2eRow> {
    let text = include_str!("../../../data/e2e/splitwise_llama2-70b_a100.csv");
    parse_e2e(text, "data/e2e/splitwise_llama2-70b_a100.csv").expect("the embedded e2e table parses")
}

/// Splitwise's own README notes its TP 2, batch 64 rows are inconsistent (prompt time
/// below the batch-32 rows): left out of fits and checks.
fn usable(r: &E2eRow) -> bool {
    !(r.tp == 2 && r.batch == 64)
}

/// The two iterations of a row: (prefill batch, decode batch, device).
fn iterations(r: &E2eRow) -> Result<(ModelConfig, IterationBatch, IterationBatch, DeviceCtx), CostError> {
    let inv = |msg: String| CostError::Invalid { path: "e2e".into(), msg };
    let preset = preset_of(&r.model).ok_or_else(|| inv(format!("unknown model `{}`", r.model)))?;
    let cfg = ModelConfig::preset(preset).map_err(|e| inv(e.to_string()))?;
    cfg.check_tp(r.tp).map_err(inv)?;
    let sku = slicesched_hw::sku(&r.hardware).map_err(|e| inv(e.to_string()))?;
    let pre = IterationBatch {
        prefills: (0..r.batch).map(|_| PrefillItem { chunk: r.prompt, prior_kv: 0, samples: true }).collect(),
        decodes: vec![],
    };
    // Per-token time is the mean over the decode steps; KV grows linearly over them.
    let kv = r.prompt + r.tokens / 2;
    let dec = IterationBatch { prefills: vec![], decodes: (0..r.batch).map(|_| DecodeItem { kv_len: kv }).collect() };
    Ok((cfg, pre, dec, DeviceCtx::single_node(sku)))
}

/// An iteration reduced to what the engine terms depend on: the kernel seconds and
/// prefill chunks of each op, in launch order (the layer template once).
struct Reduced {
    head: Vec<(f64, f64)>,
    layer: Vec<(f64, f64)>,
    layers: u32,
    tail: Vec<(f64, f64)>,
    requests: f64,
    /// 1 for an iteration that starts prompts, else 0.
    prefill: f64,
    /// Prompts the iteration starts.
    prompts: f64,
    measured: f64,
}

impl Reduced {
    fn new(kernels: &CostModel, cfg: &ModelConfig, b: &IterationBatch, tp: u32, dev: &DeviceCtx, meas: f64) -> Self {
        let dag = cfg.iteration_dag(b, tp);
        let reduce = |list: &[slicesched_model::OpSpec]| -> Vec<(f64, f64)> {
            list.iter()
                .filter_map(|o| {
                    let chunks = match &o.shape {
                        OpShape::Attention(a) => a.prefill.iter().filter(|p| p.0 > 0).count() as f64,
                        _ => 0.0,
                    };
                    let k = kernels.kernel_secs(dev, o);
                    (k > 0.0).then_some((k, chunks))
                })
                .collect()
        };
        Self {
            head: reduce(&dag.head),
            layer: reduce(&dag.layer),
            layers: dag.layers,
            tail: reduce(&dag.tail),
            requests: (b.prefills.len() + b.decodes.len()) as f64,
            prefill: if b.prefills.is_empty() { 0.0 } else { 1.0 },
            prompts: b.prefills.len() as f64,
            measured: meas,
        }
    }

    /// GPU seconds under launch interval `l` and per-prompt cost `p`.
    fn gpu(&self, l: f64, p: f64) -> f64 {
        let mut pipe = Pipeline::default();
        let run = |pipe: &mut Pipeline, ops: &[(f64, f64)]| {
            for &(k, c) in ops {
                pipe.push(l, k + p * c);
            }
        };
        run(&mut pipe, &self.head);
        // Once the GPU's lag behind the CPU repeats from one layer to the next, every
        // further layer adds the same time: skip them.
        let mut lag = f64::NAN;
        let mut i = 0;
        while i < self.layers {
            let g0 = pipe.gpu;
            run(&mut pipe, &self.layer);
            i += 1;
            let now = pipe.gpu - pipe.cpu;
            if (now - lag).abs() <= 1e-12 * pipe.gpu.abs().max(1e-9) {
                // The lag repeats, so the CPU advanced as much as the GPU.
                let step = (self.layers - i) as f64 * (pipe.gpu - g0);
                pipe.gpu += step;
                pipe.cpu += step;
                break;
            }
            lag = now;
        }
        run(&mut pipe, &self.tail);
        pipe.gpu
    }
}

impl EngineFit {
    /// Fits the launch interval and per-prompt GPU work by grid search and, for each, the CPU
    /// time per iteration and per request by relative least squares.
    pub fn fit(kernels: &CostModel, rows: &[E2eRow]) -> Result<EngineFit, CostError> {
        let mut red = Vec::new();
        for r in rows.iter().filter(|r| usable(r)) {
            let (cfg, pre, dec, dev) = iterations(r)?;
            red.push(Reduced::new(kernels, &cfg, &pre, r.tp, &dev, r.prompt_secs));
            red.push(Reduced::new(kernels, &cfg, &dec, r.tp, &dev, r.token_secs));
        }
        if red.len() < 4 {
            return Err(CostError::Invalid { path: "e2e".into(), msg: "need at least two usable rows".into() });
        }
        let mut best = (f64::INFINITY, EngineFit::NONE);
        for li in 0..=40 {
            let l = li as f64 * 2e-6;
            for pi in 0..=60 {
                let p = pi as f64 * 10e-6;
                let gpu: Vec<f64> = red.iter().map(|r| r.gpu(l, p)).collect();
                let cpu = fit_cpu(&red, &gpu);
                let loss: f64 = red
                    .iter()
                    .zip(&gpu)
                    .map(|(r, g)| {
                        ((g + cpu[0] + cpu[1] * r.requests + cpu[2] * r.prefill + cpu[3] * r.prompts) / r.measured
                            - 1.0)
                            .abs()
                    })
                    .sum();
                if loss < best.0 {
                    let c = CpuOverhead { base_ns: cpu[0] * 1e9, per_seq_ns: cpu[1] * 1e9 };
                    best = (
                        loss,
                        EngineFit {
                            launch_secs: l,
                            prefill_seq_secs: p,
                            prefill_cpu_secs: cpu[2],
                            prompt_cpu_secs: cpu[3],
                            cpu: c,
                        },
                    );
                }
            }
        }
        Ok(best.1)
    }

    /// Fitted on the shipped Splitwise table with the shipped kernel model.
    pub(crate) fn embedded_a100(kernels: &CostModel) -> EngineFit {
        EngineFit::fit(kernels, &embedded_rows()).expect("the embedded e2e table fits")
    }
}

/// CPU seconds per iteration, per request, per prefill iteration and per prompt minimising the
/// relative squared error, given the GPU part of each iteration; a term that comes out
/// negative is dropped and the others refitted.
fn fit_cpu(red: &[Reduced], gpu: &[f64]) -> [f64; 4] {
    let mut on = [true; 4];
    loop {
        let x = |r: &Reduced| [1.0, r.requests, r.prefill, r.prompts];
        // Normal equations of the weighted least squares (weights 1/measured²) over
        // the terms still on.
        let idx: Vec<usize> = (0..4).filter(|&i| on[i]).collect();
        let n = idx.len();
        let mut a = vec![vec![0.0; n + 1]; n];
        for (r, g) in red.iter().zip(gpu) {
            let (xs, y, w) = (x(r), r.measured - g, 1.0 / (r.measured * r.measured));
            for (i, &ii) in idx.iter().enumerate() {
                for (j, &jj) in idx.iter().enumerate() {
                    a[i][j] += w * xs[ii] * xs[jj];
                }
                a[i][n] += w * xs[ii] * y;
            }
        }
        let sol = solve(a);
        let mut out = [0.0; 4];
        let mut neg = None;
        for (i, &ii) in idx.iter().enumerate() {
            let v = sol.as_ref().map_or(0.0, |s| s[i]);
            // NaN (a singular system) counts as negative.
            if (v.is_nan() || v < 0.0) && neg.is_none() {
                neg = Some(ii);
            }
            out[ii] = v.max(0.0);
        }
        match neg {
            Some(i) if n > 1 => on[i] = false,
            _ => return out,
        }
    }
}

/// Gaussian elimination with partial pivoting on an augmented matrix; None when
/// singular.
fn solve(mut a: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let n = a.len();
    for c in 0..n {
        let p = (c..n).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[p][c].abs() < 1e-300 {
            return None;
        }
        a.swap(c, p);
        let pivot = a[c].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, p) in row[c..].iter_mut().zip(&pivot[c..]) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

/// Predicts every usable row with `model` (kernels + its engine costs) and reports
/// the relative errors.
pub fn validate_e2e(model: &CostModel, rows: &[E2eRow]) -> Result<E2eReport, CostError> {
    let e = model.engine();
    let mut points = Vec::new();
    for r in rows.iter().filter(|r| usable(r)) {
        let (cfg, pre, dec, dev) = iterations(r)?;
        let it = |b: &IterationBatch| {
            let dag = cfg.iteration_dag(b, r.tp);
            model.iteration_cost(&dev, &dag, b.prefills.len() + b.decodes.len(), &e.cpu).total_ns() as f64 * 1e-9
        };
        points.push(E2ePoint { row: r.clone(), pred_prompt_secs: it(&pre), pred_token_secs: it(&dec) });
    }
    let overall = |f: &dyn Fn(&E2ePoint) -> f64, tp: Option<u32>| {
        let mut v: Vec<f64> = points.iter().filter(|p| tp.is_none_or(|t| p.row.tp == t)).map(f).collect();
        Overall { median: quantile(&mut v, 0.5), p90: quantile(&mut v, 0.9) }
    };
    let pe = |p: &E2ePoint| (p.pred_prompt_secs - p.row.prompt_secs).abs() / p.row.prompt_secs;
    let te = |p: &E2ePoint| (p.pred_token_secs - p.row.token_secs).abs() / p.row.token_secs;
    let mut tps: Vec<u32> = points.iter().map(|p| p.row.tp).collect();
    tps.sort_unstable();
    tps.dedup();
    let by_tp = tps.iter().map(|&t| (t, overall(&pe, Some(t)), overall(&te, Some(t)))).collect();
    Ok(E2eReport { engine: *e, prompt: overall(&pe, None), token: overall(&te, None), by_tp, points })
}

/// Each TP degree of `rows` held out in turn: the engine costs fitted on the other degrees
/// over `kernels`, tested on that one (`cost validate-e2e --holdout-tp`).
pub fn validate_e2e_holdout_tp(kernels: &CostModel, rows: &[E2eRow]) -> Result<Vec<(u32, E2eReport)>, CostError> {
    let mut tps: Vec<u32> = rows.iter().map(|r| r.tp).collect();
    tps.sort_unstable();
    tps.dedup();
    tps.into_iter()
        .map(|tp| {
            let train: Vec<_> = rows.iter().filter(|r| r.tp != tp).cloned().collect();
            let test: Vec<_> = rows.iter().filter(|r| r.tp == tp).cloned().collect();
            Ok((tp, validate_e2e(&kernels.with_engine(EngineFit::fit(kernels, &train)?), &test)?))
        })
        .collect()
}

impl E2eReport {
    /// Aligned table, errors in percent.
    pub fn table(&self) -> String {
        let pct = |v: f64| format!("{:.1}%", v * 100.0);
        let mut s = format!(
            "engine: launch {:.1} µs/kernel, prefill {:.1} µs/prompt/layer, CPU {:.2} ms/prefill iteration + {:.2} \
             ms/prompt, {:.2} ms/iteration + {:.3} ms/request\n",
            self.engine.launch_secs * 1e6,
            self.engine.prefill_seq_secs * 1e6,
            self.engine.prefill_cpu_secs * 1e3,
            self.engine.prompt_cpu_secs * 1e3,
            self.engine.cpu.base_ns / 1e6,
            self.engine.cpu.per_seq_ns / 1e6
        );
        s += &format!(
            "{:>3} {:>6} {:>5} {:>6}  {:>10} {:>10} {:>6}  {:>9} {:>9} {:>6}\n",
            "tp", "prompt", "batch", "tokens", "prompt ms", "pred", "err", "token ms", "pred", "err"
        );
        for p in &self.points {
            let r = &p.row;
            s += &format!(
                "{:>3} {:>6} {:>5} {:>6}  {:>10.1} {:>10.1} {:>6}  {:>9.2} {:>9.2} {:>6}\n",
                r.tp,
                r.prompt,
                r.batch,
                r.tokens,
                r.prompt_secs * 1e3,
                p.pred_prompt_secs * 1e3,
                pct(p.pred_prompt_secs / r.prompt_secs - 1.0),
                r.token_secs * 1e3,
                p.pred_token_secs * 1e3,
                pct(p.pred_token_secs / r.token_secs - 1.0)
            );
        }
        s += &format!("{:<8} {:>13} {:>8} {:>13} {:>8}\n", "", "prompt median", "p90", "token median", "p90");
        for (tp, a, b) in &self.by_tp {
            s += &format!(
                "{:<8} {:>13} {:>8} {:>13} {:>8}\n",
                format!("TP {tp}"),
                pct(a.median),
                pct(a.p90),
                pct(b.median),
                pct(b.p90)
            );
        }
        s += &format!(
            "{:<8} {:>13} {:>8} {:>13} {:>8}\n",
            "all",
            pct(self.prompt.median),
            pct(self.prompt.p90),
            pct(self.token.median),
            pct(self.token.p90)
        );
        s
    }
}
