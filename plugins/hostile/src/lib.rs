//! Hostile policies for the plugin host's tests: each feature turns on one
//! misbehaviour in `place`, after a first well-behaved call, so the host sees a
//! plugin that loads fine and goes wrong in the decision loop.

use slicesched_plugin_sdk::{Info, Placement, Policy, ReadyOp, View, WhatIf};

#[derive(Default)]
pub struct Hostile {
    calls: u64,
}

impl Policy for Hostile {
    fn info(&self) -> Info {
        if cfg!(feature = "nul-version") {
            Info::new("hostile", "6.6.6\0evil")
        } else if cfg!(feature = "long-version") {
            Info::new("hostile", &"6".repeat(100_000))
        } else {
            Info::new("hostile", "6.6.6")
        }
    }

    fn place(&mut self, view: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
        self.calls += 1;
        let home = |k: usize, r: &ReadyOp| Placement { op: k as u32, group: r.home, priority: 0 };
        if self.calls == 1 {
            out.extend(ready.iter().enumerate().map(|(k, r)| home(k, r)));
            return Ok(());
        }
        misbehave(view, ready, out)
    }

    fn place_with_what_if(
        &mut self,
        view: &View,
        ready: &[ReadyOp],
        what_if: &mut dyn WhatIf,
        out: &mut Vec<Placement>,
    ) -> Result<(), String> {
        if cfg!(feature = "probe-storm") && self.calls >= 1 {
            storm(what_if, ready);
        }
        self.place(view, ready, out)
    }
}

/// Probes without end: 1 000 per ask, half naming ops that do not exist.
fn storm(what_if: &mut dyn WhatIf, ready: &[ReadyOp]) -> ! {
    use slicesched_plugin_sdk::{Probe, WhatIfAnswer};
    let probes: Vec<Probe> = (0..1_000u32)
        .map(|k| Probe { op: if k % 2 == 0 { k } else { u32::MAX - k }, group: k % 3, priority: k as i32 })
        .collect();
    let mut answer = WhatIfAnswer::default();
    let mut seen = 0u64;
    loop {
        what_if.ask(&probes, &mut answer);
        seen = std::hint::black_box(seen + answer.outcomes.len() as u64 + ready.len() as u64);
    }
}

#[cfg(feature = "spin")]
fn misbehave(_: &View, _: &[ReadyOp], _: &mut Vec<Placement>) -> Result<(), String> {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

#[cfg(feature = "bomb")]
fn misbehave(_: &View, _: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        // Reserved, not written: growing memory is what is hostile, and it is cheap.
        let mut chunk = Vec::<u8>::with_capacity(16 << 20);
        chunk.push(1);
        hoard.push(chunk);
        out.truncate(hoard.len() % 2);
    }
}

#[cfg(feature = "panic")]
fn misbehave(_: &View, ready: &[ReadyOp], _: &mut Vec<Placement>) -> Result<(), String> {
    panic!("hostile plugin gave up on a batch of {} ops", ready.len());
}

#[cfg(feature = "refuse")]
fn misbehave(_: &View, _: &[ReadyOp], _: &mut Vec<Placement>) -> Result<(), String> {
    Err("refusing to decide".into())
}

/// 24 MiB of refusal with NULs and escape sequences in it: Postgres refuses 0x00 in text,
/// so every record of this failure must be cleaned and bounded.
#[cfg(feature = "nul-refusal")]
fn misbehave(_: &View, _: &[ReadyOp], _: &mut Vec<Placement>) -> Result<(), String> {
    Err("no\0way\u{1b}[31m nul!".repeat(24 << 20 >> 4))
}

#[cfg(feature = "garbage")]
fn misbehave(_: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
    out.extend(ready.iter().map(|r| Placement { op: u32::MAX - r.tenant, group: r.home, priority: i32::MIN }));
    Ok(())
}

#[cfg(feature = "oversized")]
fn misbehave(_: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
    // 200 000 placements: far more than any batch, small enough to pass the memory cap.
    out.extend((0..200_000u32).map(|k| Placement { op: k % ready.len().max(1) as u32, group: 0, priority: 0 }));
    Ok(())
}

#[cfg(feature = "no-group")]
fn misbehave(view: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
    let missing = view.groups.len() as u32 + 7;
    out.extend(ready.iter().enumerate().map(|(k, _)| Placement { op: k as u32, group: missing, priority: 0 }));
    Ok(())
}

#[cfg(feature = "no-weights")]
fn misbehave(view: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
    use slicesched_plugin_sdk::OpKind;
    for (k, r) in ready.iter().enumerate() {
        // A group that exists but holds none of the op's weights, if there is one.
        let elsewhere = (0..view.groups.len() as u32).find(|&g| !view.holds(r.tenant, g, r.layer));
        let group = if r.kind == OpKind::Attention { r.home } else { elsewhere.unwrap_or(r.home) };
        out.push(Placement { op: k as u32, group, priority: 0 });
    }
    Ok(())
}

#[cfg(feature = "attention-away")]
fn misbehave(view: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
    use slicesched_plugin_sdk::OpKind;
    for (k, r) in ready.iter().enumerate() {
        let other = (r.home + 1) % view.groups.len().max(1) as u32;
        let group = if r.kind == OpKind::Attention { other } else { r.home };
        out.push(Placement { op: k as u32, group, priority: 0 });
    }
    Ok(())
}

#[cfg(not(any(
    feature = "spin",
    feature = "bomb",
    feature = "panic",
    feature = "refuse",
    feature = "garbage",
    feature = "oversized",
    feature = "no-group",
    feature = "no-weights",
    feature = "attention-away",
    feature = "nul-refusal",
)))]
fn misbehave(_: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
    out.extend(ready.iter().enumerate().map(|(k, r)| Placement { op: k as u32, group: r.home, priority: 0 }));
    Ok(())
}

slicesched_plugin_sdk::export_policy!(Hostile);
