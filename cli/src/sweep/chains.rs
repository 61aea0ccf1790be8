//! The replays of a sweep, scheduled as independent search chains on `--jobs` threads.
//!
//! A chain is one (scenario, policy): its targets' searches share its points, and its
//! next scales depend on its own points alone. A chain plans a round, waits for that
//! round's replays, and plans the next; chains never wait for each other, so a thread
//! that finishes a short replay takes the next one of any chain instead of idling until
//! the slowest replay of a global round ends (`mix-6t`: 21 replays, 1,401 s of replay,
//! 984 s of wall on two threads with global rounds). Each chain's round width is fixed
//! when the sweep starts, so which scales are replayed — and so every figure — does not
//! depend on which replay happens to finish first.

use super::{build_report, next_round, replay_draw, Draw, Log, PolicyPoints, Sweeper};
use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use slicesched_report::search::Outcome;
use slicesched_report::SweepReport;
use slicesched_sim::Scenario;
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// One scenario to sweep, with the label its log lines carry (a family names it).
pub(crate) struct Job<'a> {
    /// The scenario's draws (`--seeds`), the file's own first.
    pub draws: &'a [Scenario],
    pub label: Option<String>,
}

struct Chain {
    scenario: usize,
    policy: usize,
    points: PolicyPoints,
    /// Per target.
    outcomes: Vec<Option<Outcome>>,
    /// Replays of its current round not yet back.
    pending: usize,
    /// Wall seconds of its latest replay: the queue starts the longest expected first.
    last_wall_s: f64,
    /// Points of its current round whose draws are not all back: (scale, per draw).
    partial: Vec<(f64, Vec<Option<Draw>>)>,
}

/// One replay: one draw of a chain's point.
struct Task {
    chain: usize,
    scale: f64,
    draw: usize,
    expect_s: f64,
}

/// The shared queue: tasks waiting, and whether the sweep is over (done or failed).
struct Queue {
    tasks: Vec<Task>,
    closed: bool,
}

/// The next task for a thread, the longest expected replay first (ties in the order
/// queued); None once the sweep is over. Waits while the queue is empty.
fn next_task(queue: &Mutex<Queue>, ready: &Condvar) -> Option<Task> {
    let mut q = queue.lock().expect("no thread panics holding the queue");
    loop {
        if q.closed {
            return None;
        }
        let best =
            (0..q.tasks.len()).max_by(|&a, &b| q.tasks[a].expect_s.total_cmp(&q.tasks[b].expect_s).then(b.cmp(&a)));
        match best {
            Some(i) => return Some(q.tasks.remove(i)),
            None => q = ready.wait(q).expect("no thread panics holding the queue"),
        }
    }
}

/// Sweeps every job; `done(i, report)` is called as soon as job `i`'s last chain ends.
pub(crate) fn sweep_all(
    jobs_in: &[Job<'_>],
    sw: &Sweeper,
    log: &Log,
    started: Instant,
    mut done: impl FnMut(usize, SweepReport) -> Result<()>,
) -> Result<()> {
    let (policies, targets) = (&sw.policies, &sw.targets);
    let mut chains: Vec<Chain> = Vec::new();
    let floors: Vec<f64> = jobs_in.iter().map(|j| j.draws[0].refused_share()).collect();
    for (s, job) in jobs_in.iter().enumerate() {
        let label = job.label.as_ref().map_or(String::new(), |l| format!("{l} "));
        // Requests a model's context window refuses at arrival violate under every policy
        // at every scale: a target below their share is out of reach, and searching for
        // it would replay down to the smallest scale (the slowest replays) to learn that.
        let mut outcomes = vec![None; targets.len()];
        for (t, &target) in targets.iter().enumerate() {
            if floors[s] > target {
                log.note(format!(
                    "{label}{:.2}% of the requests are refused for their length (context window) under every \
                     policy: no goodput at {:.1}% violations",
                    100.0 * floors[s],
                    100.0 * target
                ));
                outcomes[t] = Some(Outcome::ViolatesAtMin);
            }
        }
        for p in 0..policies.len() {
            chains.push(Chain {
                scenario: s,
                policy: p,
                points: PolicyPoints::default(),
                outcomes: outcomes.clone(),
                pending: 0,
                last_wall_s: f64::INFINITY,
                partial: Vec::new(),
            });
        }
    }
    // Spare threads widen each chain's rounds (longer strides, finer splits) only where
    // there are fewer replays of a round (chains × draws) than threads.
    let draws = sw.seeds.max(1) as usize;
    debug_assert!(jobs_in.iter().all(|j| j.draws.len() == draws), "every job holds --seeds draws");
    let width = (sw.jobs / (chains.len() * draws).max(1)).max(1);
    let mut left: Vec<usize> = jobs_in.iter().map(|_| policies.len()).collect();

    let total = log.mp.add(ProgressBar::new(0));
    total.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {pos}/{len} replays {msg}").expect("static template"),
    );
    let queue = Mutex::new(Queue { tasks: Vec::new(), closed: false });
    let ready = Condvar::new();
    // A replay stops once it violates past the largest target; with several draws each is
    // replayed whole: one draw's share so far says nothing of the others'.
    let stop_above = if draws == 1 { targets.iter().copied().reduce(f64::max) } else { None };
    let (tx, rx) = mpsc::channel::<(usize, f64, usize, Result<Draw>)>();

    // Plans chain `c`'s next round: queues its replays (every draw of every scale), or
    // reports it finished.
    let plan = |c: &mut Chain, q: &mut Queue, chain: usize| -> usize {
        let scales = next_round(&c.points, &mut c.outcomes, targets, &sw.opts, width);
        c.pending = scales.len() * draws;
        for scale in scales {
            c.partial.push((scale, vec![None; draws]));
            for draw in 0..draws {
                q.tasks.push(Task { chain, scale, draw, expect_s: c.last_wall_s });
            }
        }
        c.pending
    };

    let names: Vec<(usize, usize)> = chains.iter().map(|c| (c.scenario, c.policy)).collect();
    std::thread::scope(|scope| -> Result<()> {
        for _ in 0..sw.jobs {
            let tx = tx.clone();
            let (queue, ready) = (&queue, &ready);
            let bar = log.mp.add(ProgressBar::new(1000));
            bar.set_style(
                ProgressStyle::with_template("  {spinner} {prefix:<32} {bar:30} {msg}").expect("static template"),
            );
            let names = &names;
            scope.spawn(move || {
                while let Some(task) = next_task(queue, ready) {
                    let (s, p) = names[task.chain];
                    let job = &jobs_in[s];
                    let label = job.label.as_ref().map_or(String::new(), |l| format!("{l} "));
                    let of = if job.draws.len() > 1 {
                        format!(" draw {}/{}", task.draw + 1, job.draws.len())
                    } else {
                        String::new()
                    };
                    bar.set_prefix(format!("{label}{} @ {:.4}{of}", policies[p], task.scale));
                    bar.set_position(0);
                    let r = replay_draw(&job.draws[task.draw], &policies[p], task.scale, stop_above, sw, &bar);
                    if let Ok(m) = &r {
                        log.note(format!(
                            "{label}{} @ {:.4}{of}: {}{:.2}% violate, {:.0} prompt tok/s ({:.1} s)",
                            policies[p],
                            task.scale,
                            if m.violation_at_stop.is_some() { "stopped early, over " } else { "" },
                            100.0 * m.violation_at_stop.unwrap_or(m.violation_rate),
                            m.prompt_tokens_per_s,
                            m.wall_s
                        ));
                    }
                    if tx.send((task.chain, task.scale, task.draw, r)).is_err() {
                        break;
                    }
                }
                bar.finish_and_clear();
            });
        }
        drop(tx);
        // The main thread plans; whatever ends its loop (done, or a failed replay or
        // report), the threads are released.
        let mut drive = || -> Result<()> {
            let mut running = 0;
            {
                let mut q = queue.lock().expect("no thread panics holding the queue");
                for (i, c) in chains.iter_mut().enumerate() {
                    running += plan(c, &mut q, i);
                }
                total.inc_length(q.tasks.len() as u64);
            }
            ready.notify_all();
            // A chain has ended when its round plans nothing; its scenario's report goes
            // out with the scenario's last chain.
            let mut chain_ended = |s: usize, chains: &[Chain]| -> Result<()> {
                left[s] -= 1;
                if left[s] > 0 {
                    return Ok(());
                }
                let mine: Vec<&Chain> = chains.iter().filter(|c| c.scenario == s).collect();
                let per_policy: Vec<&PolicyPoints> = mine.iter().map(|c| &c.points).collect();
                let outcomes: Vec<Option<Outcome>> = mine.iter().flat_map(|c| c.outcomes.iter().copied()).collect();
                done(s, build_report(jobs_in[s].draws, sw, &per_policy, &outcomes, started, floors[s]))
            };
            // Chains with nothing to replay (every target out of reach) end at once.
            let idle: Vec<usize> = chains.iter().filter(|c| c.pending == 0).map(|c| c.scenario).collect();
            for s in idle {
                chain_ended(s, &chains)?;
            }
            while running > 0 {
                let Ok((i, scale, draw, r)) = rx.recv() else { bail!("every replay thread stopped") };
                running -= 1;
                total.inc(1);
                let d = r?;
                let c = &mut chains[i];
                c.pending -= 1;
                // A point counts once every draw of it is back.
                let k = c.partial.iter().position(|p| p.0 == scale).expect("a queued point");
                c.partial[k].1[draw] = Some(d);
                if c.partial[k].1.iter().any(Option::is_none) {
                    continue;
                }
                let (_, got) = c.partial.swap_remove(k);
                let got: Vec<Draw> = got.into_iter().map(|d| d.expect("every draw back")).collect();
                let m = slicesched_report::pool_draws(&got);
                if m.oom_events > 0 {
                    log.warn(format!(
                        "WARNING: {} OOM events replaying {} at rate scale {scale:.4}: the memory-safety invariant is broken",
                        m.oom_events, policies[c.policy]
                    ));
                }
                if m.stopped_early {
                    c.points.points.insert_lower_bound(scale, m.violation_rate);
                } else {
                    c.points.points.insert(scale, m.violation_rate);
                }
                c.points.measured.push((scale, m));
                c.last_wall_s = m.wall_s / got.len() as f64;
                if c.pending > 0 {
                    continue;
                }
                let n = plan(c, &mut queue.lock().expect("no thread panics holding the queue"), i);
                total.inc_length(n as u64);
                ready.notify_all();
                running += n;
                if n == 0 {
                    let s = c.scenario;
                    chain_ended(s, &chains)?;
                }
            }
            Ok(())
        };
        let outcome = drive();
        queue.lock().expect("no thread panics holding the queue").closed = true;
        ready.notify_all();
        outcome
    })?;
    total.finish_and_clear();
    Ok(())
}
