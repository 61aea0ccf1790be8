//! Whole-run busy time at fine resolution: per GPU and tenant, the op time in each
//! fixed-width bucket, the part of it that ran away from the op's home (borrowed), and
//! how many ops started there. Unlike the op window (bounded by a count, so a long run
//! is recorded only in part), these cover every op of the replay in bounded memory, so
//! a timeline can show any part of any run and never has to draw unrecorded time.

use serde::Serialize;

/// Fewest nanoseconds per bucket (1 ms): finer than this the op windows answer.
pub const MIN_BUCKET_NS: u64 = 1_000_000;
/// Most buckets per (GPU, tenant) row: bounds memory on long replays.
pub const MAX_BUCKETS: u64 = 65_536;
/// Most buckets over all the rows a replay may fill (every GPU × tenant pair), 12 bytes
/// each: a cluster of many GPUs and tenants gets wider buckets, not more memory.
pub const MAX_TOTAL_BUCKETS: u64 = 8 << 20;
/// Widest bucket: its busy nanoseconds fit the rows' `u32`s.
pub const MAX_BUCKET_NS: u64 = 2_000_000_000;
const BYTES_PER_BUCKET: u64 = 12;

/// The bucket width for a replay of `rows` possible (GPU, tenant) rows expected to last
/// `horizon_ns`: the smallest of 1, 2, 5 × 10^k ms that keeps each row within
/// [`MAX_BUCKETS`] and all of them within [`MAX_TOTAL_BUCKETS`] (1 ms for a minute, 50 ms
/// for 30 minutes on a few dozen rows), at most [`MAX_BUCKET_NS`] (a run of days gets
/// longer rows).
pub fn bucket_ns_for(horizon_ns: u64, rows: u64) -> u64 {
    let cap = (MAX_TOTAL_BUCKETS / rows.max(1)).clamp(1, MAX_BUCKETS);
    let mut decade = MIN_BUCKET_NS;
    loop {
        for m in [1, 2, 5] {
            let w = decade * m;
            if w >= MAX_BUCKET_NS {
                return MAX_BUCKET_NS;
            }
            if horizon_ns / w < cap {
                return w;
            }
        }
        decade *= 10;
    }
}

/// Bytes the busy rows of such a replay hold at most (every pair filled).
pub fn max_bytes(horizon_ns: u64, rows: u64) -> u64 {
    let w = bucket_ns_for(horizon_ns, rows);
    rows.saturating_mul(horizon_ns / w + 1).saturating_mul(BYTES_PER_BUCKET)
}

/// One (GPU, tenant) row: dense arrays over the run's buckets, only for pairs where the
/// tenant ran something on that GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BusyRow {
    pub gpu: u32,
    pub tenant: u32,
    /// Op time of the tenant's ops on the GPU per bucket, ns (at most the bucket width:
    /// a tenant runs one op at a time on a GPU).
    pub busy_ns: Vec<u32>,
    /// Of that, ops that ran away from their engine instance's GPUs.
    pub borrowed_ns: Vec<u32>,
    /// Ops that started in the bucket.
    pub ops: Vec<u32>,
}

/// The whole run's busy buckets, as a replay returns them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BusyBuckets {
    pub bucket_ns: u64,
    /// Buckets per row (every row has this many).
    pub buckets: usize,
    /// Sorted by (gpu, tenant).
    pub rows: Vec<BusyRow>,
}

/// Recording state: rows allocated on a pair's first op.
#[derive(Debug)]
pub(crate) struct BusyRecorder {
    bucket_ns: u64,
    tenants: usize,
    /// Index gpu * tenants + tenant → row position + 1 (0: none yet).
    index: Vec<u32>,
    rows: Vec<BusyRow>,
}

impl BusyRecorder {
    pub fn new(bucket_ns: u64, gpus: usize, tenants: usize) -> Self {
        assert!(bucket_ns > 0 && bucket_ns <= u32::MAX as u64, "bucket width fits a u32 of ns");
        Self { bucket_ns, tenants, index: vec![0; gpus * tenants], rows: Vec::new() }
    }

    /// Adds an op that ran on `gpu` over `[start, end)`.
    pub fn add(&mut self, gpu: usize, tenant: usize, start: u64, end: u64, borrowed: bool) {
        let slot = gpu * self.tenants + tenant;
        let Some(ix) = self.index.get(slot).copied() else { return };
        let row = if ix == 0 {
            self.rows.push(BusyRow {
                gpu: gpu as u32,
                tenant: tenant as u32,
                busy_ns: Vec::new(),
                borrowed_ns: Vec::new(),
                ops: Vec::new(),
            });
            self.index[slot] = self.rows.len() as u32;
            self.rows.last_mut().expect("just pushed")
        } else {
            &mut self.rows[ix as usize - 1]
        };
        let w = self.bucket_ns;
        let first = (start / w) as usize;
        let last = (end.max(start + 1) - 1) / w;
        grow(row, last as usize + 1);
        row.ops[first] = row.ops[first].saturating_add(1);
        let mut t = start;
        for b in first..=last as usize {
            let edge = (b as u64 + 1) * w;
            let piece = (end.min(edge) - t.min(end)) as u32;
            row.busy_ns[b] = row.busy_ns[b].saturating_add(piece);
            if borrowed {
                row.borrowed_ns[b] = row.borrowed_ns[b].saturating_add(piece);
            }
            t = edge;
        }
    }

    /// Every row padded to the run's length, sorted by (gpu, tenant).
    pub fn finish(mut self, end_ns: u64) -> BusyBuckets {
        let buckets = (end_ns / self.bucket_ns + 1) as usize;
        for r in &mut self.rows {
            grow(r, buckets);
        }
        let buckets = self.rows.iter().map(|r| r.busy_ns.len()).max().unwrap_or(buckets).max(buckets);
        for r in &mut self.rows {
            grow(r, buckets);
        }
        self.rows.sort_by_key(|r| (r.gpu, r.tenant));
        BusyBuckets { bucket_ns: self.bucket_ns, buckets, rows: self.rows }
    }
}

fn grow(r: &mut BusyRow, n: usize) {
    if r.busy_ns.len() < n {
        r.busy_ns.resize(n, 0);
        r.borrowed_ns.resize(n, 0);
        r.ops.resize(n, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_keep_runs_within_the_bucket_cap() {
        assert_eq!(bucket_ns_for(60_000_000_000, 64), 1_000_000);
        assert_eq!(bucket_ns_for(1_801_000_000_000, 64), 50_000_000);
        for rows in [1, 64, 16_384, 1 << 20] {
            for h in [0, 1, 65_536_000_000, 65_535_999_999, 10_u64.pow(13), 10_u64.pow(15)] {
                let w = bucket_ns_for(h, rows);
                assert!(w <= MAX_BUCKET_NS && w <= u32::MAX as u64, "{w}");
                // Within both caps, unless the widest bucket is reached (a run of days).
                if w < MAX_BUCKET_NS {
                    assert!(h / w < MAX_BUCKETS && rows * (h / w) <= MAX_TOTAL_BUCKETS, "{h} ns, {rows} rows: {w} ns");
                }
            }
        }
        // 1,024 GPUs × 16 tenants for 30 minutes: the widest buckets, and what they may
        // hold is what the control plane's estimate counts.
        assert_eq!(bucket_ns_for(1_801_000_000_000, 16_384), MAX_BUCKET_NS);
        assert_eq!(max_bytes(1_801_000_000_000, 16_384), 16_384 * 901 * 12);
        // 8 GPUs × 8 tenants for 30 minutes (`bursty-8t`): 50 ms, 36,021 buckets a row.
        assert_eq!(max_bytes(1_801_000_000_000, 64), 64 * 36_021 * 12);
        // A poisson trace over four days on one GPU no longer asks for a width a row's
        // u32 cannot hold.
        assert_eq!(bucket_ns_for(4 * 86_400 * 1_000_000_000, 1), MAX_BUCKET_NS);
    }

    #[test]
    fn an_op_is_split_over_the_buckets_it_spans() {
        let mut r = BusyRecorder::new(10, 2, 2);
        r.add(1, 0, 5, 27, true);
        r.add(1, 0, 27, 30, false);
        r.add(0, 1, 0, 10, false);
        let b = r.finish(35);
        assert_eq!(b.buckets, 4);
        assert_eq!(b.rows.len(), 2);
        assert_eq!((b.rows[0].gpu, b.rows[0].tenant), (0, 1));
        assert_eq!(b.rows[0].busy_ns, vec![10, 0, 0, 0]);
        let r1 = &b.rows[1];
        assert_eq!(r1.busy_ns, vec![5, 10, 10, 0]);
        assert_eq!(r1.borrowed_ns, vec![5, 10, 7, 0]);
        assert_eq!(r1.ops, vec![1, 0, 1, 0]);
        let total: u32 = b.rows.iter().flat_map(|r| r.busy_ns.iter()).sum();
        assert_eq!(total, 22 + 3 + 10);
    }
}
