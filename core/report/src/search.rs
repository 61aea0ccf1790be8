//! The goodput search: the highest arrival-rate scale whose violation rate stays under a target.
//!
//! The search is pure: it decides the next scales to try from the points measured so far,
//! so the caller may replay them however it likes (in parallel, shared between targets).
//! Violation rate is treated as monotone non-decreasing in the scale; where measurements
//! are noisy and disagree, the lowest violating scale wins, which keeps the answer
//! conservative.
//!
//! Each point is a full replay (minutes on a large mix), so the search spends as few as
//! it can: violation rates grow about as a power of the load near saturation, so
//! ln(violations) is close to linear in ln(scale) and the crossing is interpolated (or,
//! while every point is on one side, extrapolated) from the two nearest points, as in
//! regula falsi; a step is kept at least one precision away from the bracket's ends (so
//! an accurate guess closes the bracket on the next point) and the remaining width of a
//! round splits the bracket evenly, which bounds the worst case by bisection's.

/// Bounds and precision of a search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchOpts {
    /// Stop when the bracket's upper end is within this fraction of the lower end.
    pub precision: f64,
    pub min_scale: f64,
    pub max_scale: f64,
}

impl Default for SearchOpts {
    fn default() -> Self {
        SearchOpts { precision: 0.03, min_scale: 0.05, max_scale: 64.0 }
    }
}

/// Where a search ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// The highest measured scale under the target, with the lowest scale above it within precision.
    Found(f64),
    /// Even `min_scale` violates the target: the policy has no goodput at this target.
    ViolatesAtMin,
    /// `max_scale` still meets the target: the true boundary is higher.
    CappedAtMax,
}

/// What to do next for one target.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Done(Outcome),
    /// Scales to measure next (never empty, never already measured).
    Measure(Vec<f64>),
}

/// Measured points of one policy: (scale, violation rate), sorted by scale, deduplicated.
#[derive(Debug, Clone, Default)]
pub struct Points {
    pts: Vec<(f64, f64)>,
    /// Scales whose violation rate is only a lower bound (a replay stopped once it was
    /// over every target): they bracket, but a line through them would put the crossing
    /// next to them, so the search bisects where they are an end.
    bounds: Vec<f64>,
}

/// What ln(violations) adds to the rate so that a point with none still has a
/// logarithm: a tenth of the target keeps the crossing's interpolation near the line
/// through points that do violate.
fn floor(target: f64) -> f64 {
    (target * 0.1).max(1e-6)
}

/// Scales closer than this (relatively) are the same point: bisection midpoints computed by
/// different targets from the same bracket must hit the cache.
const SAME: f64 = 1e-9;

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= SAME * a.abs().max(b.abs())
}

impl Points {
    pub fn get(&self, scale: f64) -> Option<f64> {
        self.pts.iter().find(|p| same(p.0, scale)).map(|p| p.1)
    }

    /// Records a point whose violation rate is at least `violation` (see `bounds`).
    pub fn insert_lower_bound(&mut self, scale: f64, violation: f64) {
        self.insert(scale, violation);
        self.bounds.push(scale);
    }

    fn exact(&self, scale: f64) -> bool {
        !self.bounds.iter().any(|&b| same(b, scale))
    }

    pub fn insert(&mut self, scale: f64, violation: f64) {
        self.bounds.retain(|&b| !same(b, scale));
        if let Some(p) = self.pts.iter_mut().find(|p| same(p.0, scale)) {
            p.1 = violation;
            return;
        }
        let i = self.pts.partition_point(|p| p.0 < scale);
        self.pts.insert(i, (scale, violation));
    }

    /// Where the crossing of `target` lies between the passing `l` and the violating `h`,
    /// as a fraction of ln(h / l): linear in ln(violations + a floor) over ln(scale).
    fn interpolate(&self, l: f64, h: f64, target: f64) -> f64 {
        let (Some(vl), Some(vh)) = (self.get(l), self.get(h)) else { return 0.5 };
        if !self.exact(l) || !self.exact(h) {
            return 0.5;
        }
        let y = |v: f64| (v + floor(target)).ln();
        let f = (y(target) - y(vl)) / (y(vh) - y(vl));
        if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.5
        }
    }

    /// The factor from the edge point `edge` to where the line through it and its nearest
    /// neighbour on the same side (`up`: the passing side, below it) reaches `target`;
    /// None without such a neighbour or with a slope that does not point there.
    fn extrapolate(&self, edge: f64, target: f64, up: bool) -> Option<f64> {
        let ve = self.get(edge)?;
        let (s2, v2) = if up {
            *self.pts.iter().rev().find(|p| p.0 < edge && !same(p.0, edge))?
        } else {
            *self.pts.iter().find(|p| p.0 > edge && !same(p.0, edge))?
        };
        if !self.exact(edge) || !self.exact(s2) {
            return None;
        }
        let y = |v: f64| (v + floor(target)).ln();
        let slope = (y(v2) - y(ve)) / (s2.ln() - edge.ln());
        let x = ((y(target) - y(ve)) / slope).exp();
        (slope > 0.0 && x.is_finite()).then_some(x)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.pts.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pts.is_empty()
    }

    /// (highest passing scale below the lowest violating one, lowest violating scale).
    fn bracket(&self, target: f64) -> (Option<f64>, Option<f64>) {
        let hi = self.pts.iter().find(|p| p.1 > target).map(|p| p.0);
        let lo = self.pts.iter().filter(|p| p.1 <= target && hi.is_none_or(|h| p.0 < h)).map(|p| p.0).next_back();
        (lo, hi)
    }
}

/// The next step for `target` given the points measured so far. `width` is how many new
/// scales the caller can measure at once: more than one turns bracketing into a
/// multi-step stride and bisection into a `width + 1`-way split.
pub fn next_step(points: &Points, target: f64, opts: &SearchOpts, width: usize) -> Step {
    let width = width.max(1);
    let clamp = |s: f64| s.clamp(opts.min_scale, opts.max_scale);
    let fresh = |v: Vec<f64>| {
        let mut out: Vec<f64> = Vec::with_capacity(v.len());
        for s in v {
            if points.get(s).is_none() && !out.iter().any(|&o| same(o, s)) {
                out.push(s);
            }
        }
        out
    };
    let (lo, hi) = points.bracket(target);
    let step = (1.0 + opts.precision).ln();
    let want = match (lo, hi) {
        // Nothing known yet: scale 1 first; spare width guesses both directions around it.
        (None, None) => {
            (0..width as i32).map(|k| clamp(2f64.powi(if k % 2 == 1 { -(k + 1) / 2 } else { k / 2 }))).collect()
        }
        (None, Some(h)) if same(h, opts.min_scale) || h <= opts.min_scale => return Step::Done(Outcome::ViolatesAtMin),
        (None, Some(h)) => {
            // Down by the extrapolated distance (between a halving and a 16th), then halvings.
            let first = points.extrapolate(h, target, false).map_or(0.5, |x| x.clamp(1.0 / 16.0, 0.5));
            (0..width as i32).map(|k| clamp(h * first / 2f64.powi(k))).collect()
        }
        (Some(l), None) if same(l, opts.max_scale) || l >= opts.max_scale => return Step::Done(Outcome::CappedAtMax),
        (Some(l), None) => {
            let first = points.extrapolate(l, target, true).map_or(2.0, |x| x.clamp(2.0, 16.0));
            (0..width as i32).map(|k| clamp(l * first * 2f64.powi(k))).collect()
        }
        (Some(l), Some(h)) if h <= l * (1.0 + opts.precision) => return Step::Done(Outcome::Found(l)),
        (Some(l), Some(h)) => {
            // Equal steps in log space: the interesting quantity is the ratio, not the
            // difference.
            let r = (h / l).ln();
            let mut v = Vec::with_capacity(width);
            if r > 2.0 * step {
                let f = points.interpolate(l, h, target);
                // One precision (a hair less, so the bracket closes) inside either end.
                v.push(l * (r * f).clamp(step * 0.999, r - step * 0.999).exp());
            }
            let n = width - v.len();
            v.extend((1..=n).map(|k| l * (r * k as f64 / (n + 1) as f64).exp()));
            v
        }
    };
    let next = fresh(want);
    // Only possible when clamping collapsed every stride onto known points; the bracket
    // then already touches a bound and the arms above finish on the next call.
    if next.is_empty() {
        return match (lo, hi) {
            (None, _) => Step::Done(Outcome::ViolatesAtMin),
            (_, None) => Step::Done(Outcome::CappedAtMax),
            (Some(l), Some(_)) => Step::Done(Outcome::Found(l)),
        };
    }
    Step::Measure(next)
}

/// Runs one target's search to the end, measuring one scale at a time with `eval` and
/// reusing (and extending) `points`. The command drives [`next_step`] itself to replay
/// several scales at once; the API's background sweeps use this one, a scale at a time.
pub fn search(mut eval: impl FnMut(f64) -> f64, target: f64, opts: &SearchOpts, points: &mut Points) -> Outcome {
    loop {
        match next_step(points, target, opts, 1) {
            Step::Done(o) => return o,
            Step::Measure(scales) => {
                for s in scales {
                    points.insert(s, eval(s));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A smooth monotone violation curve crossing `v` at scale `at`.
    fn logistic(at: f64, v: f64) -> impl Fn(f64) -> f64 {
        move |s: f64| {
            let k = ((1.0 - v) / v).ln();
            1.0 / (1.0 + (k - 8.0 * (s / at).ln()).exp())
        }
    }

    fn run(f: impl Fn(f64) -> f64, target: f64, opts: &SearchOpts) -> (Outcome, usize) {
        let calls = Cell::new(0);
        let mut pts = Points::default();
        let o = search(
            |s| {
                calls.set(calls.get() + 1);
                f(s)
            },
            target,
            opts,
            &mut pts,
        );
        (o, calls.get())
    }

    #[test]
    fn finds_the_boundary_within_precision() {
        let opts = SearchOpts::default();
        for at in [0.07, 0.3, 1.0, 1.7, 5.0, 40.0] {
            let f = logistic(at, 0.05);
            let (o, calls) = run(&f, 0.05, &opts);
            let Outcome::Found(s) = o else { panic!("{at}: {o:?}") };
            assert!(f(s) <= 0.05, "{at}: returned a violating scale {s}");
            assert!(s <= at * (1.0 + 1e-9) && s >= at / (1.0 + opts.precision), "{at}: {s}");
            assert!(calls <= 10, "{at}: {calls} replays");
        }
    }

    #[test]
    fn a_step_function_is_bracketed_exactly() {
        let opts = SearchOpts { precision: 0.01, ..SearchOpts::default() };
        let (o, _) = run(|s| if s > 3.3 { 0.5 } else { 0.0 }, 0.1, &opts);
        let Outcome::Found(s) = o else { panic!("{o:?}") };
        assert!((3.3 / 1.01..=3.3).contains(&s), "{s}");
    }

    #[test]
    fn always_and_never_violating() {
        let opts = SearchOpts::default();
        let (o, calls) = run(|_| 1.0, 0.09, &opts);
        assert_eq!(o, Outcome::ViolatesAtMin);
        assert!(calls <= 7, "1, 1/2, ... down to the minimum: {calls}");
        let (o, calls) = run(|_| 0.0, 0.09, &opts);
        assert_eq!(o, Outcome::CappedAtMax);
        assert!(calls <= 8, "{calls}");
        // Exactly at the target passes: the contract is `violation_rate <= target`.
        let (o, _) = run(|_| 0.09, 0.09, &opts);
        assert_eq!(o, Outcome::CappedAtMax);
    }

    #[test]
    fn bounds_are_respected() {
        let opts = SearchOpts { precision: 0.03, min_scale: 0.3, max_scale: 3.0 };
        let seen = std::cell::RefCell::new(Vec::new());
        let mut pts = Points::default();
        search(
            |s| {
                seen.borrow_mut().push(s);
                1.0
            },
            0.01,
            &opts,
            &mut pts,
        );
        assert!(seen.borrow().iter().all(|&s| (0.3..=3.0).contains(&s)), "{:?}", seen.borrow());
        assert!(seen.borrow().contains(&0.3));
    }

    #[test]
    fn cached_points_are_reused_across_targets() {
        let opts = SearchOpts::default();
        let f = logistic(2.0, 0.05);
        let mut pts = Points::default();
        let calls = Cell::new(0);
        let eval = |s: f64| {
            calls.set(calls.get() + 1);
            f(s)
        };
        let strict = search(eval, 0.01, &opts, &mut pts);
        let first = calls.replace(0);
        assert_eq!(first, pts.len(), "every replay is a new point");
        let loose = search(eval, 0.2, &opts, &mut pts);
        assert!(calls.get() < first, "second target measured {} new points vs {first}", calls.get());
        let (Outcome::Found(a), Outcome::Found(b)) = (strict, loose) else { panic!() };
        assert!(b >= a);
        // A third search over the same target measures nothing.
        calls.set(0);
        assert_eq!(search(eval, 0.2, &opts, &mut pts), loose);
        assert_eq!(calls.get(), 0);
    }

    #[test]
    fn wider_steps_split_the_bracket_and_stride_further() {
        let opts = SearchOpts::default();
        let mut pts = Points::default();
        assert_eq!(next_step(&pts, 0.1, &opts, 1), Step::Measure(vec![1.0]));
        assert_eq!(next_step(&pts, 0.1, &opts, 3), Step::Measure(vec![1.0, 0.5, 2.0]));
        pts.insert(1.0, 0.5);
        assert_eq!(next_step(&pts, 0.1, &opts, 3), Step::Measure(vec![0.5, 0.25, 0.125]));
        pts.insert(0.5, 0.0);
        let Step::Measure(mid) = next_step(&pts, 0.1, &opts, 3) else { panic!() };
        assert_eq!(mid.len(), 3);
        // The interpolated crossing (ln(v + 0.01) linear in ln(scale)), then the bracket
        // split evenly by the rest of the width.
        let f = ((0.11f64).ln() - (0.01f64).ln()) / ((0.51f64).ln() - (0.01f64).ln());
        let want = [0.5 * 2f64.powf(f), 0.5 * 2f64.powf(1.0 / 3.0), 0.5 * 2f64.powf(2.0 / 3.0)];
        for (m, w) in mid.iter().zip(want) {
            assert!((m - w).abs() < 1e-12, "{mid:?}");
        }
    }

    /// Interpolation spends fewer replays than bisection on violation curves shaped
    /// like queueing blow-ups, and never more than bisection's bound on a step.
    #[test]
    fn interpolation_needs_few_points() {
        let opts = SearchOpts::default();
        let mut total = 0;
        for at in [0.13, 0.42, 0.84, 1.0, 2.3, 9.0] {
            for target in [0.01, 0.09] {
                // Power-law growth below saturation, then a wall.
                let f = move |s: f64| ((s / at).powf(3.0) * target).min(1.0);
                let (o, calls) = run(f, target, &opts);
                let Outcome::Found(s) = o else { panic!("{at}: {o:?}") };
                assert!(s <= at * (1.0 + 1e-9) && s >= at / (1.0 + opts.precision), "{at}: {s}");
                assert!(calls <= 7, "{at} {target}: {calls} replays");
                total += calls;
            }
        }
        // Bisection alone (the search before interpolation) took 98 on these curves.
        assert!(total <= 64, "{total} replays for 12 searches");
        let (o, calls) = run(|s| if s > 3.3 { 0.5 } else { 0.0 }, 0.1, &opts);
        assert!(matches!(o, Outcome::Found(s) if (3.3 / 1.03..=3.3).contains(&s)), "{o:?}");
        assert!(calls <= 12, "a step function: {calls}");
    }

    /// A point known only to violate by at least its value is an end the search bisects
    /// from, instead of interpolating next to it.
    #[test]
    fn lower_bounds_bracket_but_are_not_interpolated() {
        let opts = SearchOpts::default();
        let mut pts = Points::default();
        pts.insert(0.5, 0.0758);
        pts.insert_lower_bound(1.0, 0.0901);
        let Step::Measure(next) = next_step(&pts, 0.09, &opts, 1) else { panic!() };
        assert!((next[0] - 0.5f64.sqrt()).abs() < 1e-12, "{next:?}");
        // Measured exactly later, it interpolates again.
        pts.insert(1.0, 0.30);
        let Step::Measure(next) = next_step(&pts, 0.09, &opts, 1) else { panic!() };
        assert!(next[0] < 0.6, "{next:?}");
    }

    #[test]
    fn noisy_points_keep_the_answer_conservative() {
        let mut pts = Points::default();
        // 2.0 passes although 1.5 violates: the lowest violating scale bounds the answer.
        for (s, v) in [(1.0, 0.0), (1.5, 0.3), (2.0, 0.0)] {
            pts.insert(s, v);
        }
        let opts = SearchOpts { precision: 0.6, ..SearchOpts::default() };
        assert_eq!(next_step(&pts, 0.1, &opts, 1), Step::Done(Outcome::Found(1.0)));
    }
}
