//! Serving-engine CPU time between iterations, during which the GPU idles.
//!
//! Between two forward passes vLLM schedules the next batch, prepares its inputs,
//! samples and processes the outputs. Vidur measured these phases per batch size; their
//! sum is the idle slice every container leaves on its GPU at every iteration.

use crate::CostError;

/// Overhead as `base + per_seq × requests in the batch`, least-squares fitted.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuOverhead {
    pub base_ns: f64,
    pub per_seq_ns: f64,
}

const PHASES: [&str; 4] =
    ["schedule_median", "sampler_e2e_median", "prepare_inputs_e2e_median", "process_model_outputs_median"];

impl CpuOverhead {
    /// No overhead (for hand-computable tests).
    pub const ZERO: CpuOverhead = CpuOverhead { base_ns: 0.0, per_seq_ns: 0.0 };

    /// Fitted on the repository's copy of Vidur's A100 `cpu_overheads.csv`.
    pub fn default_a100() -> CpuOverhead {
        static M: std::sync::OnceLock<CpuOverhead> = std::sync::OnceLock::new();
        *M.get_or_init(|| {
            let text = include_str!("../../../data/profiles/a100/cpu_overhead/cpu_overheads.csv");
            CpuOverhead::fit_csv(text, "embedded cpu_overheads.csv").expect("the embedded CPU-overhead table parses")
        })
    }

    /// Fits on a table with `batch_size` and the phase-median columns (ms).
    pub fn fit_csv(text: &str, path: &str) -> Result<CpuOverhead, CostError> {
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let head = rd.headers().map_err(|e| CostError::Invalid { path: path.into(), msg: e.to_string() })?.clone();
        let col = |name: &str| {
            head.iter()
                .position(|h| h == name)
                .ok_or_else(|| CostError::Invalid { path: path.into(), msg: format!("missing column `{name}`") })
        };
        let b = col("batch_size")?;
        let phases = PHASES.iter().map(|p| col(p)).collect::<Result<Vec<_>, _>>()?;
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        for (i, rec) in rd.records().enumerate() {
            let rec = rec.map_err(|e| CostError::Invalid { path: path.into(), msg: e.to_string() })?;
            let num = |c: usize| -> Result<f64, CostError> {
                rec.get(c).and_then(|v| v.trim().parse::<f64>().ok()).filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(
                    || CostError::Invalid {
                        path: path.into(),
                        msg: format!("line {}: column `{}`: not a non-negative number", i + 2, &head[c]),
                    },
                )
            };
            xs.push(num(b)?);
            ys.push(phases.iter().map(|&c| num(c)).sum::<Result<f64, _>>()? * 1e6);
        }
        if xs.len() < 2 {
            return Err(CostError::Invalid { path: path.into(), msg: "need at least two rows".into() });
        }
        let n = xs.len() as f64;
        let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
        let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
        let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
        let per_seq = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
        Ok(CpuOverhead { base_ns: (my - per_seq * mx).max(0.0), per_seq_ns: per_seq })
    }

    /// Idle time before an iteration of `seqs` requests, ns.
    pub fn iteration_ns(&self, seqs: usize) -> u64 {
        (self.base_ns + self.per_seq_ns * seqs as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_fit_is_plausible() {
        let c = CpuOverhead::default_a100();
        // vLLM spends about 1.5 ms at small batches and ~6 ms at 128 requests.
        assert!((1.0e6..2.0e6).contains(&(c.iteration_ns(1) as f64)), "{c:?}");
        assert!((4.0e6..9.0e6).contains(&(c.iteration_ns(128) as f64)), "{c:?}");
    }

    #[test]
    fn bad_tables_name_the_problem() {
        let e = CpuOverhead::fit_csv("batch_size\n1\n", "x.csv").unwrap_err().to_string();
        assert!(e.contains("schedule_median"), "{e}");
        let hdr =
            "batch_size,schedule_median,sampler_e2e_median,prepare_inputs_e2e_median,process_model_outputs_median\n";
        let e = CpuOverhead::fit_csv(&format!("{hdr}1,a,1,1,1\n2,1,1,1,1\n"), "x.csv").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("schedule_median"), "{e}");
    }
}
