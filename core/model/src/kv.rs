//! How many paged KV blocks a sequence holds: one rule for the engine that books them
//! and the executor that fills them, so the two never disagree about a cache's room.

/// Blocks a sequence holds once a step has computed its positions `start..end`, with
/// `block`-token blocks and, where every layer attends at most `window` tokens back,
/// blocks whose positions no query of this step or a later one can see recycled.
///
/// Without a window that is every block up to `end`. With one, the step's first query
/// (position `start`) still reads from `start + 1 - window`, and the step writes up to
/// `end - 1`: the blocks of that whole span are live at once, so a prefill chunk of `c`
/// tokens holds about `window + c` tokens' blocks while it runs (vLLM's sliding-window
/// manager frees the rest only after the step). A decode step holds the window's blocks
/// plus the one its start is part-way through.
pub fn live_blocks(block: u32, window: Option<u32>, start: u32, end: u32) -> u32 {
    if end == 0 || block == 0 {
        return 0;
    }
    let first_live = window.filter(|&w| w > 0).map_or(0, |w| (start + 1).saturating_sub(w) / block);
    (end - 1) / block - first_live.min((end - 1) / block) + 1
}

/// The most blocks a sequence of `tokens` positions ever holds when no step computes
/// more than `chunk` of them: what it must be able to get from a cache to run at all.
pub fn peak_blocks(block: u32, window: Option<u32>, tokens: u32, chunk: u32) -> u32 {
    let whole = live_blocks(block, None, 0, tokens);
    match window.filter(|&w| w > 0) {
        // The live span of a step is at most `window + chunk - 1` positions, which
        // straddle at most one more block than they fill.
        Some(w) => whole.min((w + chunk.clamp(1, tokens.max(1)) - 1).div_ceil(block) + 1),
        None => whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_window_every_block_up_to_the_end() {
        assert_eq!(live_blocks(16, None, 0, 1), 1);
        assert_eq!(live_blocks(16, None, 0, 16), 1);
        assert_eq!(live_blocks(16, None, 16, 17), 2);
        assert_eq!(live_blocks(16, None, 9_990, 10_000), 625);
        assert_eq!(peak_blocks(16, None, 10_000, 512), 625);
    }

    #[test]
    fn a_window_keeps_the_span_its_queries_read() {
        // A decode at position 10,000 reads 5,905..=10,000 under a 4,096 window: blocks
        // 369..=625, 257 of them.
        assert_eq!(live_blocks(16, Some(4096), 10_000, 10_001), 257);
        // A chunk of 2,048 starting there also holds what it writes.
        assert_eq!(live_blocks(16, Some(4096), 10_000, 12_048), 384);
        // Inside the window nothing is recycled.
        assert_eq!(live_blocks(16, Some(4096), 0, 4096), 256);
        assert_eq!(live_blocks(16, Some(4096), 4000, 4097), 257);
    }

    #[test]
    fn the_peak_bounds_every_step() {
        for (w, chunk) in [(4096, 2048), (64, 16), (8, 1), (100, 37)] {
            let tokens = 9_000;
            let peak = peak_blocks(16, Some(w), tokens, chunk);
            for start in 0..tokens {
                for c in [1, chunk / 2 + 1, chunk] {
                    let end = (start + c).min(tokens);
                    assert!(live_blocks(16, Some(w), start, end) <= peak, "w {w} start {start} chunk {c}");
                }
            }
        }
    }
}
