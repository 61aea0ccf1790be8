//! Tenants' loads: the shipped Azure traces (offset, or split between the tenants of one
//! service) and synthetic long-prompt, bursty and steady ones, each at a rate drawn
//! as a utilisation of its home.
//!
//! The rate comes from a drawn utilisation `u` of the home through its cost
//! (`fit::Home`, priced by the replay's cost model): `u(λ) = a·λ + 1 − exp(−m·λ)`, where `a` is the busy time a
//! request adds whatever the batch (prefill, reading its KV cache) and `m·λ` the mean
//! number of requests decoding (a step streams the weights once for all of them, so
//! decode keeps the GPU busy while at least one request decodes). Bursty tenants draw
//! the utilisation of their ON periods, above 1 for bursts their home cannot absorb.

use super::fit::{one_tenant, Home};
use super::{GenError, GenTenant, Rng};
use std::path::Path;

/// The shipped traces a mix draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFile {
    Code,
    Conv,
}

impl TraceFile {
    pub fn file(self) -> &'static str {
        match self {
            TraceFile::Code => "azure2023_code.csv",
            TraceFile::Conv => "azure2023_conv.csv",
        }
    }
}

/// Moments of a load's request lengths (what its home's busy time depends on).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lengths {
    pub mean_p: f64,
    pub mean_p2: f64,
    pub mean_o: f64,
    /// E[o (p + o/2)]: KV tokens read over a request's decode steps.
    pub mean_o_ctx: f64,
    /// p99 and max of prompt + output tokens.
    pub p99_tokens: u32,
    pub max_tokens: u32,
}

impl Lengths {
    /// From (prompt, output) token counts.
    fn of(reqs: &[(u32, u32)]) -> Self {
        let n = reqs.len().max(1) as f64;
        let (mut p, mut p2, mut o, mut oc) = (0.0, 0.0, 0.0, 0.0);
        let mut tokens: Vec<u32> = Vec::with_capacity(reqs.len());
        for &(pt, ot) in reqs {
            let (pp, oo) = (pt as f64, ot as f64);
            p += pp;
            p2 += pp * pp;
            o += oo;
            oc += oo * (pp + oo / 2.0);
            tokens.push(pt + ot);
        }
        tokens.sort_unstable();
        let p99 = tokens.get((tokens.len() * 99 / 100).min(tokens.len().saturating_sub(1))).copied().unwrap_or(0);
        Lengths {
            mean_p: p / n,
            mean_p2: p2 / n,
            mean_o: o / n,
            mean_o_ctx: oc / n,
            p99_tokens: p99,
            max_tokens: tokens.last().copied().unwrap_or(0),
        }
    }
}

/// A shipped trace's figures.
#[derive(Debug, Clone)]
pub struct TraceInfo {
    pub lengths: Lengths,
    /// Requests per second as recorded, and the loop period, s.
    pub rate: f64,
    pub period_s: f64,
}

/// The shipped traces, read once per generation.
#[derive(Debug, Clone)]
pub struct FileTraces {
    pub code: TraceInfo,
    pub conv: TraceInfo,
}

impl FileTraces {
    pub fn load(dir: &Path) -> Result<Self, GenError> {
        let err = |msg: String| GenError::Traces { path: dir.display().to_string(), msg };
        if !dir.is_dir() {
            return Err(err("no such folder (run from the repository root, or pass --traces)".into()));
        }
        let info = |f: TraceFile| -> Result<TraceInfo, GenError> {
            // Read as a scenario would (no duration: the whole file once).
            let table = format!("{{ kind = \"azure\", path = {} }}", toml::Value::String(f.file().into()));
            let s = one_tenant("H100-80GB", "llama-3-8b", 1, &table, None, 0, dir).map_err(|e| err(e.to_string()))?;
            let n = s.requests.len();
            if n < 2 {
                return Err(err(format!("{}: fewer than two requests", f.file())));
            }
            let last = s.requests.last().map_or(0, |r| r.1.arrival_ns) as f64 / 1e9;
            // The loop period of `core/trace`'s window: the span plus one mean gap.
            let period_s = last + last / (n - 1) as f64;
            let lens: Vec<(u32, u32)> = s.requests.iter().map(|(_, r)| (r.prompt_tokens, r.output_tokens)).collect();
            Ok(TraceInfo { lengths: Lengths::of(&lens), rate: n as f64 / period_s, period_s })
        };
        Ok(FileTraces { code: info(TraceFile::Code)?, conv: info(TraceFile::Conv)? })
    }

    pub fn info(&self, f: TraceFile) -> &TraceInfo {
        match f {
            TraceFile::Code => &self.code,
            TraceFile::Conv => &self.conv,
        }
    }
}

/// What kind of load a tenant serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadKind {
    Code,
    Conv,
    LongPrompt,
    Bursty,
    Steady,
}

impl LoadKind {
    pub fn draw(rng: &mut Rng) -> Self {
        const KINDS: [(LoadKind, f64); 5] = [
            (LoadKind::Code, 0.25),
            (LoadKind::Conv, 0.25),
            (LoadKind::LongPrompt, 0.1),
            (LoadKind::Bursty, 0.2),
            (LoadKind::Steady, 0.2),
        ];
        KINDS[rng.weighted(&KINDS.map(|k| k.1))].0
    }

    pub fn label(self) -> &'static str {
        match self {
            LoadKind::Code => "code",
            LoadKind::Conv => "chat",
            LoadKind::LongPrompt => "longctx",
            LoadKind::Bursty => "bursty",
            LoadKind::Steady => "steady",
        }
    }
}

/// A lognormal length by median and p90, clamped at `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ln {
    pub median: f64,
    pub p90: f64,
    pub max: u32,
}

/// How the requests arrive (a scenario's `trace` table).
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    File { trace: TraceFile, offset_s: f64, split: Option<(u32, u32, u64)>, rate_scale: f64 },
    Poisson { rate: f64, prompt: Ln, output: Ln },
    Gamma { rate: f64, cv: f64, prompt: Ln, output: Ln },
    OnOff { rate_on: f64, rate_off: f64, mean_on_s: f64, mean_off_s: f64, prompt: Ln, output: Ln },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    pub kind: LoadKind,
    pub shape: Shape,
    pub lengths: Lengths,
    /// Requests per second the draw asked for (ON periods' for bursty loads).
    pub rate: f64,
    /// Estimated home utilisation at that rate (ON periods' for bursty loads).
    pub util: f64,
}

impl Load {
    /// KV tokens a home needs to serve this load without thrashing: four p99 requests
    /// at once, at least 32k tokens, and always its longest request.
    pub fn useful_kv_tokens(&self) -> u64 {
        (4 * self.lengths.p99_tokens as u64).max(32_768).max(self.lengths.max_tokens as u64)
    }
}

/// Two significant digits: a rate a user would write.
fn sig2(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x;
    }
    let mag = 10f64.powf(x.log10().floor() - 1.0);
    (x / mag).round() * mag
}

/// Short loads a server limits with `max_model_len`: 4k or 8k tokens in all.
fn short_lengths(rng: &mut Rng) -> (Ln, Ln) {
    let total = if rng.chance(0.4) { 4096 } else { 8192 };
    let out_max = 1024;
    let p_med = sig2(rng.log_range(200.0, (total - out_max) as f64 / 4.0));
    let o_med = sig2(rng.log_range(13.0, 250.0));
    let prompt = Ln { median: p_med, p90: sig2(p_med * rng.range(2.5, 4.0)), max: total - out_max };
    let output = Ln { median: o_med, p90: sig2(o_med * rng.range(3.0, 4.5)), max: out_max };
    (prompt, output)
}

/// The load's kind, lengths and arrival process, at a placeholder rate of 1/s.
pub fn draw_shape(rng: &mut Rng, kind: LoadKind, traces: &FileTraces) -> Load {
    let file = |t: TraceFile| Shape::File { trace: t, offset_s: 0.0, split: None, rate_scale: 1.0 };
    let shape = match kind {
        LoadKind::Code => file(TraceFile::Code),
        LoadKind::Conv => file(TraceFile::Conv),
        LoadKind::LongPrompt => {
            // Median 4-10k prompt tokens, p99 48-100k (the tenant: 7k and 85k).
            let median = sig2(rng.log_range(4000.0, 10_000.0));
            let p99 = sig2(rng.range(48_000.0, 100_000.0));
            let p90 = sig2(median * (p99 / median).powf(1.281_551_6 / 2.326_347_9));
            let o = sig2(rng.range(100.0, 250.0));
            let prompt = Ln { median, p90, max: 126_976 };
            let output = Ln { median: o, p90: sig2(o * rng.range(2.5, 3.5)), max: 2048 };
            if rng.chance(0.6) {
                Shape::Poisson { rate: 1.0, prompt, output }
            } else {
                Shape::Gamma { rate: 1.0, cv: sig2(rng.range(1.5, 3.0)), prompt, output }
            }
        }
        LoadKind::Bursty => {
            let (prompt, output) = short_lengths(rng);
            Shape::OnOff {
                rate_on: 1.0,
                rate_off: 0.05,
                mean_on_s: rng.range(10.0, 40.0).round(),
                mean_off_s: (rng.range(60.0, 240.0) / 10.0).round() * 10.0,
                prompt,
                output,
            }
        }
        LoadKind::Steady => {
            let (prompt, output) = short_lengths(rng);
            if rng.chance(0.5) {
                Shape::Poisson { rate: 1.0, prompt, output }
            } else {
                Shape::Gamma { rate: 1.0, cv: sig2(rng.range(1.5, 4.0)), prompt, output }
            }
        }
    };
    let lengths = match &shape {
        Shape::File { trace, .. } => traces.info(*trace).lengths,
        Shape::Poisson { prompt, output, .. }
        | Shape::Gamma { prompt, output, .. }
        | Shape::OnOff { prompt, output, .. } => {
            // Moments of the clamped lognormals, measured on a sample drawn by the
            // loader a replay uses.
            let table = format!(
                "{{ kind = \"poisson\", rate = 1, prompt = {}, output = {} }}",
                super::render::ln(prompt),
                super::render::ln(output)
            );
            let s = one_tenant("H100-80GB", "qwen2.5-7b", 1, &table, Some(4000.0), rng.next_u64() >> 1, Path::new("."))
                .expect("the drawn length distributions are valid");
            let lens: Vec<(u32, u32)> = s.requests.iter().map(|(_, r)| (r.prompt_tokens, r.output_tokens)).collect();
            Lengths::of(&lens)
        }
    };
    Load { kind, shape, lengths, rate: 1.0, util: 0.0 }
}

/// Estimated utilisation of `home` at `rate` requests per second.
fn util(home: &Home, l: &Lengths, rate: f64) -> f64 {
    let a = home.linear_s(l.mean_p, l.mean_p2, l.mean_o_ctx);
    let m = l.mean_o * home.step_s();
    a * rate + 1.0 - (-m * rate).exp()
}

/// The rate at which `home` is `target` busy (bisection: `util` grows with the rate).
fn rate_for(home: &Home, l: &Lengths, target: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1e-3);
    while util(home, l, hi) < target && hi < 1e6 {
        hi *= 2.0;
    }
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if util(home, l, mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// Draws the load's utilisation of `home` and sets its rate from it.
pub fn size(rng: &mut Rng, mut load: Load, home: &Home, traces: &FileTraces) -> Load {
    let target = match load.kind {
        LoadKind::Code | LoadKind::Conv | LoadKind::Steady => rng.range(0.15, 0.65),
        LoadKind::LongPrompt => rng.range(0.45, 0.85),
        LoadKind::Bursty => rng.range(0.8, 1.6),
    };
    let mut rate = sig2(rate_for(home, &load.lengths, target));
    match &mut load.shape {
        // Made a rate scale once the trace's tenants are known (`assign_file_streams`).
        Shape::File { trace, .. } => {
            let recorded = traces.info(*trace).rate;
            rate = rate.clamp(recorded * 0.05, recorded * 8.0);
        }
        Shape::Poisson { rate: r, .. } | Shape::Gamma { rate: r, .. } => *r = rate,
        Shape::OnOff { rate_on, rate_off, .. } => {
            *rate_on = rate;
            *rate_off = sig2(rate / 20.0);
        }
    }
    load.rate = rate;
    load.util = util(home, &load.lengths, rate);
    load
}

/// Offsets and splits for the tenants of each shipped trace: tenants of one trace are
/// either one service split between them (disjoint rows, one clock) or separate
/// services replaying it at offsets spread over the trace; then each gets the rate
/// scale that gives it the rate its draw asked for.
pub fn assign_file_streams(rng: &mut Rng, tenants: &mut [GenTenant], traces: &FileTraces) {
    for f in [TraceFile::Code, TraceFile::Conv] {
        let info = traces.info(f);
        let users: Vec<usize> = (0..tenants.len())
            .filter(|&i| matches!(tenants[i].load.shape, Shape::File { trace, .. } if trace == f))
            .collect();
        let k = users.len() as u32;
        if k == 0 {
            continue;
        }
        let split = k >= 2 && rng.chance(0.5);
        let salt = rng.below(1000) as u64;
        let base = rng.range(0.0, info.period_s);
        for (j, &i) in users.iter().enumerate() {
            let t = &mut tenants[i];
            let offset = if split { base } else { base + info.period_s * j as f64 / k as f64 };
            let offset_s = ((offset % info.period_s) / 5.0).floor() * 5.0;
            let parts = if split { k } else { 1 };
            let rate_scale = sig2(t.load.rate / (info.rate / parts as f64));
            if let Shape::File { offset_s: o, split: s, rate_scale: r, .. } = &mut t.load.shape {
                *o = offset_s;
                *s = split.then_some((k, j as u32, salt));
                *r = rate_scale;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_significant_digits() {
        assert_eq!(sig2(0.012_34), 0.012);
        assert_eq!(sig2(1234.0), 1200.0);
        assert_eq!(sig2(9.96), 10.0);
    }

    #[test]
    fn the_rate_gives_the_utilisation_asked() {
        let h100 = slicesched_hw::sku("H100").unwrap();
        let c = super::super::fit::CANDIDATES.iter().find(|c| c.preset == "llama-3-8b").unwrap();
        let home = Home::new(c, 1, &h100);
        let l = Lengths {
            mean_p: 2000.0,
            mean_p2: 8e6,
            mean_o: 30.0,
            mean_o_ctx: 60_000.0,
            p99_tokens: 8000,
            max_tokens: 8000,
        };
        for target in [0.1, 0.5, 0.9, 1.5] {
            let r = rate_for(&home, &l, target);
            assert!((util(&home, &l, r) - target).abs() < 1e-6, "{target}");
        }
        // The code trace's rate (~2.6/s) is a plausible load for one H100 of an 8B.
        let u = util(&home, &l, 2.6);
        assert!((0.2..0.9).contains(&u), "{u}");
    }
}
