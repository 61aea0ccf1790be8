//! Seeded synthetic traces: Poisson, Gamma (burstiness CV) and on/off arrivals with
//! prompt/output length distributions.
//!
//! Arrivals and each length stream draw from their own ChaCha8 stream derived from
//! the seed, so changing a length distribution never moves arrival times.

use crate::transform::{mix, MAX_REQUESTS};
use crate::{Request, TraceError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Gamma, LogNormal};
use serde::{Deserialize, Serialize};

/// Standard normal 90th percentile, to turn (median, p90) into a lognormal sigma.
const Z90: f64 = 1.281_551_565_544_600_4;
/// Default clamp for sampled lengths.
pub const DEFAULT_MAX_LEN: u32 = 32_768;

/// A token-length distribution, a TOML table tagged by `dist`. Samples are rounded and
/// clamped to `[1, max]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "lowercase", deny_unknown_fields)]
pub enum LengthDist {
    /// Always `value`.
    Fixed { value: u32 },
    /// Uniform integers in `[min, max]`.
    Uniform { min: u32, max: u32 },
    /// Lognormal given either `median` and `p90`, or `mean` (of the lengths) and
    /// `sigma` (of their logarithm); `max` defaults to [`DEFAULT_MAX_LEN`].
    Lognormal { median: Option<f64>, p90: Option<f64>, mean: Option<f64>, sigma: Option<f64>, max: Option<u32> },
}

impl LengthDist {
    /// Azure 2023 code trace prompt marginal (p50 1,469, p90 5,188).
    pub fn default_prompt() -> Self {
        Self::Lognormal { median: Some(1469.0), p90: Some(5188.0), mean: None, sigma: None, max: Some(8192) }
    }

    /// Azure 2023 code trace output marginal (p50 13, p90 55).
    pub fn default_output() -> Self {
        Self::Lognormal { median: Some(13.0), p90: Some(55.0), mean: None, sigma: None, max: Some(2048) }
    }

    fn sampler(&self, what: &str) -> Result<Sampler, TraceError> {
        let bad = |m: String| TraceError::Spec(format!("`{what}` length: {m}"));
        match *self {
            Self::Fixed { value } if value >= 1 => Ok(Sampler::Fixed(value)),
            Self::Fixed { .. } => Err(bad("fixed value must be >= 1".into())),
            Self::Uniform { min, max } if 1 <= min && min <= max => Ok(Sampler::Uniform(min, max)),
            Self::Uniform { .. } => Err(bad("uniform needs 1 <= min <= max".into())),
            Self::Lognormal { median, p90, mean, sigma, max } => {
                let max = max.unwrap_or(DEFAULT_MAX_LEN);
                if max < 1 {
                    return Err(bad("max must be >= 1".into()));
                }
                let (mu, s) = match (median, p90, mean, sigma) {
                    (Some(m), Some(p), None, None) if m > 0.0 && p > m && p.is_finite() => {
                        (m.ln(), (p.ln() - m.ln()) / Z90)
                    }
                    (None, None, Some(m), Some(s)) if m > 0.0 && m.is_finite() && (0.0..=10.0).contains(&s) => {
                        (m.ln() - s * s / 2.0, s)
                    }
                    _ => {
                        return Err(bad(
                            "lognormal needs either `median` and `p90` (0 < median < p90) or `mean` > 0 and \
                             `sigma` in [0, 10]"
                                .into(),
                        ))
                    }
                };
                let d = LogNormal::new(mu, s).map_err(|e| bad(e.to_string()))?;
                Ok(Sampler::Lognormal(d, max))
            }
        }
    }
}

enum Sampler {
    Fixed(u32),
    Uniform(u32, u32),
    Lognormal(LogNormal<f64>, u32),
}

impl Sampler {
    fn sample(&self, rng: &mut ChaCha8Rng) -> u32 {
        match *self {
            Self::Fixed(v) => v,
            Self::Uniform(lo, hi) => rng.random_range(lo..=hi),
            Self::Lognormal(d, max) => (d.sample(rng).round().clamp(1.0, max as f64)) as u32,
        }
    }
}

/// An arrival process; rates are requests per second.
#[derive(Debug, Clone, PartialEq)]
pub enum Arrivals {
    Poisson {
        rate: f64,
    },
    /// Renewal process with Gamma gaps: shape 1/CV², mean 1/rate; CV 0 is a fixed gap.
    Gamma {
        rate: f64,
        cv: f64,
    },
    /// Alternating ON/OFF periods with exponential lengths, Poisson arrivals at
    /// `rate_on` / `rate_off` within them (bursts uncorrelated with any other stream).
    OnOff {
        rate_on: f64,
        rate_off: f64,
        mean_on_s: f64,
        mean_off_s: f64,
    },
}

impl Arrivals {
    fn check(&self) -> Result<f64, TraceError> {
        let pos = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(TraceError::Spec(format!("`{name}` must be a finite number > 0, got {v}")))
            }
        };
        match *self {
            Self::Poisson { rate } => pos("rate", rate),
            Self::Gamma { rate, cv } => {
                if !(0.0..=100.0).contains(&cv) {
                    return Err(TraceError::Spec(format!("`cv` must be in [0, 100], got {cv}")));
                }
                pos("rate", rate)
            }
            Self::OnOff { rate_on, rate_off, mean_on_s, mean_off_s } => {
                // Sub-millisecond periods would mean billions of period switches.
                if pos("mean_on_s", mean_on_s)?.min(pos("mean_off_s", mean_off_s)?) < 1e-3 {
                    return Err(TraceError::Spec("`mean_on_s` and `mean_off_s` must be >= 0.001 s".into()));
                }
                if !(rate_off.is_finite() && rate_off >= 0.0) {
                    return Err(TraceError::Spec(format!("`rate_off` must be >= 0, got {rate_off}")));
                }
                Ok(pos("rate_on", rate_on)?.max(rate_off))
            }
        }
    }

    /// Arrival times in seconds over `[0, duration_s)`.
    pub fn times(&self, seed: u64, duration_s: f64) -> Result<Vec<f64>, TraceError> {
        let peak = self.check()?;
        if !(duration_s.is_finite() && duration_s >= 0.0) {
            return Err(TraceError::Spec(format!("synthetic traces need a finite duration, got {duration_s}")));
        }
        if peak * duration_s > MAX_REQUESTS as f64 {
            return Err(TraceError::Spec(format!("rate {peak}/s over {duration_s} s is too many requests")));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 0xA5));
        let mut out = Vec::new();
        match *self {
            Self::Poisson { rate } => {
                let e = Exp::new(rate).map_err(|e| TraceError::Spec(format!("poisson arrivals: {e}")))?;
                renewal(&mut out, duration_s, || e.sample(&mut rng))
            }
            Self::Gamma { rate, cv } => {
                if cv == 0.0 {
                    renewal(&mut out, duration_s, || 1.0 / rate)
                } else {
                    let g = Gamma::new(1.0 / (cv * cv), cv * cv / rate)
                        .map_err(|e| TraceError::Spec(format!("gamma arrivals: {e}")))?;
                    renewal(&mut out, duration_s, || g.sample(&mut rng))
                }
            }
            Self::OnOff { rate_on, rate_off, mean_on_s, mean_off_s } => {
                let p_on = mean_on_s / (mean_on_s + mean_off_s);
                // Start in the stationary state so the stream has no start-up artefact.
                let mut on = rng.random_bool(p_on.clamp(0.0, 1.0));
                let exp = |rate: f64| Exp::new(rate).map_err(|e| TraceError::Spec(format!("on/off arrivals: {e}")));
                let (on_len, off_len) = (exp(1.0 / mean_on_s)?, exp(1.0 / mean_off_s)?);
                let (on_gap, off_gap) = (exp(rate_on)?, exp(rate_off.max(f64::MIN_POSITIVE))?);
                let (mut t, mut end) = (0.0, 0.0);
                while t < duration_s {
                    if t >= end {
                        end = t + if on { on_len.sample(&mut rng) } else { off_len.sample(&mut rng) };
                    }
                    let gap = match (on, rate_off > 0.0) {
                        (true, _) => on_gap.sample(&mut rng),
                        (false, true) => off_gap.sample(&mut rng),
                        (false, false) => f64::INFINITY,
                    };
                    // Exponential gaps are memoryless, so restarting the clock at a
                    // period boundary is exact.
                    if t + gap < end {
                        t += gap;
                        if t < duration_s {
                            out.push(t);
                        }
                    } else {
                        t = end;
                        on = !on;
                    }
                }
            }
        }
        Ok(out)
    }
}

fn renewal(out: &mut Vec<f64>, duration_s: f64, mut gap: impl FnMut() -> f64) {
    let mut t = gap();
    // The cap guards heavy-tailed gaps (huge CV) that pack many arrivals at one instant.
    while t < duration_s && (out.len() as u64) < MAX_REQUESTS {
        out.push(t);
        t += gap();
    }
}

/// Generates a synthetic trace over `[0, duration_s)`.
pub fn generate(
    arrivals: &Arrivals,
    prompt: &LengthDist,
    output: &LengthDist,
    seed: u64,
    duration_s: f64,
) -> Result<Vec<Request>, TraceError> {
    let (ps, os) = (prompt.sampler("prompt")?, output.sampler("output")?);
    let times = arrivals.times(seed, duration_s)?;
    let mut rp = ChaCha8Rng::seed_from_u64(mix(seed, 0xB6));
    let mut ro = ChaCha8Rng::seed_from_u64(mix(seed, 0xC7));
    Ok(times.into_iter().map(|t| Request::new((t * 1e9) as u64, ps.sample(&mut rp), os.sample(&mut ro))).collect())
}
