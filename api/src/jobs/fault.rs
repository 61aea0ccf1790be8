//! Fault injection for the outage tests: `SLICESCHED_FAULT_PAUSE=start=4000,store=4000`
//! makes every job pause that many milliseconds just before the named bookkeeping write
//! (`start`: marking a run running; `store`: its final store), logging when the pause
//! begins. A test stops Postgres when it reads that line, so the write meets the outage
//! for certain instead of by timing. Unset (always, outside tests) it costs one lookup.

use std::sync::OnceLock;
use std::time::Duration;

const VAR: &str = "SLICESCHED_FAULT_PAUSE";

fn pauses() -> &'static [(String, Duration)] {
    static PAUSES: OnceLock<Vec<(String, Duration)>> = OnceLock::new();
    PAUSES.get_or_init(|| std::env::var(VAR).map(|v| parse(&v)).unwrap_or_default())
}

/// `point=ms` pairs separated by commas; a malformed pair is ignored with a warning
/// (this is a test hook: it must never stop a service from starting).
fn parse(v: &str) -> Vec<(String, Duration)> {
    v.split(',')
        .filter(|p| !p.trim().is_empty())
        .filter_map(|p| match p.split_once('=').map(|(k, ms)| (k.trim(), ms.trim().parse::<u64>())) {
            Some((k, Ok(ms))) if !k.is_empty() => Some((k.to_string(), Duration::from_millis(ms))),
            _ => {
                tracing::warn!(pair = p, "{VAR}: expected point=milliseconds; ignored");
                None
            }
        })
        .collect()
}

/// Waits before `point` when the fault hook names it.
pub async fn pause(point: &str) {
    if let Some((_, d)) = pauses().iter().find(|(k, _)| k == point) {
        tracing::warn!(point, ms = d.as_millis() as u64, "fault injection: pausing before the write");
        tokio::time::sleep(*d).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_and_bad_ones_are_skipped() {
        let p = parse("start=4000, store=25,bogus,=3,x=y");
        assert_eq!(p, vec![("start".into(), Duration::from_millis(4000)), ("store".into(), Duration::from_millis(25))]);
        assert!(parse("").is_empty());
    }
}
