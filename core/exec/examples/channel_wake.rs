//! What a send costs the submitting thread when the receiver is parked in `recv` against
//! when it polls (the CUDA collector's choice, cuda/timing.rs), side by side in one run:
//! `cargo run --release -p slicesched-exec --example channel_wake`. Each send follows
//! ~5 µs of busy work, as an executor's submit does; the figure is the send's share.

use std::sync::mpsc;
use std::time::{Duration, Instant};

fn extra_us_per_send(poll: bool, n: usize) -> f64 {
    let (tx, rx) = mpsc::channel::<u64>();
    let receiver = std::thread::spawn(move || loop {
        if poll {
            let t = Instant::now();
            let mut got = false;
            while t.elapsed() < Duration::from_micros(50) {
                match rx.try_recv() {
                    Ok(_) => got = true,
                    Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            }
            if got {
                continue;
            }
        }
        if rx.recv().is_err() {
            return;
        }
    });
    let work = Duration::from_micros(5);
    let t = Instant::now();
    for i in 0..n {
        let w = Instant::now();
        while w.elapsed() < work {}
        tx.send(i as u64).expect("the receiver runs until the sender goes");
    }
    let per = t.elapsed().as_secs_f64() * 1e6 / n as f64 - work.as_secs_f64() * 1e6;
    drop(tx);
    receiver.join().expect("the receiver does not panic");
    per
}

fn main() {
    println!("µs per send beyond the work: parked receiver, polling receiver, ratio");
    for _ in 0..3 {
        let (parked, polling) = (extra_us_per_send(false, 20_000), extra_us_per_send(true, 20_000));
        println!("{parked:8.2} {polling:8.2} {:6.1}×", parked / polling.max(0.01));
    }
}
