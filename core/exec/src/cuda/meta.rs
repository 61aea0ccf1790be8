//! The CPU backend's checks of a kernel's i32 inputs (token ids, positions, KV slots,
//! block tables, sequence bounds), made on the host before a CUDA launch. A GPU kernel
//! cannot refuse: an id out of range would read outside the table (or write NaN, as
//! the embedding kernel does) and a bad block index outside the cache. The values come
//! from the buffers' host copies (`Buffer::shadow`), known for the metadata the runner
//! uploads; a buffer a kernel wrote on the device (sampled ids) is not checked here.
//! Messages are the CPU backend's, so both backends refuse alike.

use crate::backend::View;
use crate::kernels::{Kernel, BLOCK_TOKENS};
use crate::ExecError;

/// Checks `k`'s i32 inputs where `read` knows them (None: not known on the host).
pub(super) fn check(k: &Kernel, read: &dyn Fn(View) -> Option<Vec<i32>>) -> Result<(), ExecError> {
    let refuse = |m: String| Err(ExecError::Launch(format!("{}: {m}", k.name())));
    match k {
        Kernel::Embedding { ids, table, hidden, .. } => {
            let vocab = table.len / (*hidden).max(1);
            if let Some(id) = read(*ids).and_then(|v| v.into_iter().find(|&id| id < 0 || id as usize >= vocab)) {
                return refuse(format!("token id {id} outside the vocabulary of {vocab}"));
            }
        }
        Kernel::GatherRows { x, rows, width, .. } => {
            if let Some(r) =
                read(*rows).and_then(|v| v.into_iter().find(|&r| r < 0 || (r as usize + 1) * width > x.len))
            {
                return refuse(format!(
                    "gather x: view of {} elements, row {r} needs {}",
                    x.len,
                    (r + 1) as usize * width
                ));
            }
        }
        Kernel::Rope { positions, tokens, max_pos, .. } => {
            if let Some(p) =
                read(*positions).and_then(|v| v.into_iter().take(*tokens).find(|&p| p < 0 || p as usize >= *max_pos))
            {
                return refuse(format!("position {p} outside the RoPE table of {max_pos}"));
            }
        }
        Kernel::CacheWrite { slots, cache, tokens, heads, .. } => {
            let w = (heads.kv * heads.dim).max(1);
            let cap = cache.len / 2 / w;
            if let Some(s) =
                read(*slots).and_then(|v| v.into_iter().take(*tokens).find(|&s| s >= 0 && s as usize >= cap))
            {
                return refuse(format!("KV slot {s} outside a cache of {cap} slots"));
            }
        }
        Kernel::Attention { cache, block_tables, q_start, ctx_lens, out, seqs, max_blocks, heads, .. } => {
            let (Some(qs), Some(ctx)) = (read(*q_start), read(*ctx_lens)) else { return Ok(()) };
            if qs.len() < seqs + 1 || ctx.len() < *seqs {
                return Ok(()); // the view lengths are refused by the launch's own checks
            }
            let tables = read(*block_tables);
            let blocks = cache.len / 2 / (BLOCK_TOKENS * heads.kv * heads.dim).max(1);
            for seq in 0..*seqs {
                let (q0, q1, c) = (qs[seq], qs[seq + 1], ctx[seq]);
                if q0 < 0 || q1 < q0 || c < 0 || q1 - q0 > c || c as usize > max_blocks * BLOCK_TOKENS {
                    return refuse(format!("sequence {seq}: {} queries over a context of {c}", q1.wrapping_sub(q0)));
                }
                if (q1 as usize) * heads.q * heads.dim > out.len {
                    return refuse(format!(
                        "attention out: view of {} elements, shape needs {}",
                        out.len,
                        q1 as usize * heads.q * heads.dim
                    ));
                }
                let Some(t) = &tables else { continue };
                let used = (c as usize).div_ceil(BLOCK_TOKENS);
                let row = t.get(seq * max_blocks..seq * max_blocks + used).unwrap_or_default();
                if let Some(&b) = row.iter().find(|&&b| b < 0 || b as usize >= blocks) {
                    return refuse(format!("sequence {seq}: KV block {b} outside the cache"));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BufId;
    use crate::kernels::Heads;
    use std::collections::HashMap;

    fn v(buf: u64, len: usize) -> View {
        View::whole(BufId(buf), len)
    }

    fn reader(m: HashMap<u64, Vec<i32>>) -> impl Fn(View) -> Option<Vec<i32>> {
        move |w: View| m.get(&w.buf.0).map(|d| d[w.offset..w.offset + w.len].to_vec())
    }

    #[test]
    fn token_ids_outside_the_vocabulary_are_refused_before_launch() {
        let k = |n| Kernel::Embedding { ids: v(1, n), table: v(2, 256 * 8), out: v(3, n * 8), hidden: 8, scale: None };
        let ok = reader(HashMap::from([(1, vec![0, 255, 7])]));
        assert!(check(&k(3), &ok).is_ok());
        for bad in [256, -1] {
            let r = reader(HashMap::from([(1, vec![3, bad])]));
            let e = check(&k(2), &r).unwrap_err().to_string();
            assert!(e.contains(&format!("token id {bad} outside the vocabulary of 256")), "{e}");
        }
        // A buffer the device wrote is not known on the host: nothing to check.
        assert!(check(&k(2), &|_| None).is_ok());
    }

    #[test]
    fn positions_slots_and_gathered_rows_are_bounded() {
        let h = Heads { q: 2, kv: 1, dim: 4 };
        let rope = Kernel::Rope {
            qkv: v(1, 64),
            positions: v(2, 2),
            table: v(3, 64),
            tokens: 2,
            heads: h,
            max_pos: 16,
            rotary: 4,
        };
        assert!(check(&rope, &reader(HashMap::from([(2, vec![0, 15])]))).is_ok());
        let e = check(&rope, &reader(HashMap::from([(2, vec![0, 16])]))).unwrap_err().to_string();
        assert!(e.contains("position 16 outside the RoPE table of 16"), "{e}");
        // A cache of 2 blocks: 32 slots of kv·dim = 4 elements, K and V halves.
        let cw = Kernel::CacheWrite { qkv: v(1, 64), slots: v(2, 2), cache: v(4, 2 * 32 * 4), tokens: 2, heads: h };
        assert!(check(&cw, &reader(HashMap::from([(2, vec![-1, 31])]))).is_ok());
        let e = check(&cw, &reader(HashMap::from([(2, vec![5, 32])]))).unwrap_err().to_string();
        assert!(e.contains("KV slot 32 outside a cache of 32 slots"), "{e}");
        let g = Kernel::GatherRows { x: v(1, 3 * 8), rows: v(2, 2), out: v(3, 16), width: 8 };
        assert!(check(&g, &reader(HashMap::from([(2, vec![0, 2])]))).is_ok());
        assert!(check(&g, &reader(HashMap::from([(2, vec![3, 0])]))).is_err());
    }

    #[test]
    fn attention_metadata_is_checked_as_on_cpu() {
        let h = Heads { q: 2, kv: 1, dim: 4 };
        // 2 blocks in the cache; one sequence of 3 queries over a context of 20.
        let k = Kernel::Attention {
            qkv: v(1, 3 * h.row()),
            cache: v(2, 2 * 2 * BLOCK_TOKENS * 4),
            block_tables: v(3, 2),
            q_start: v(4, 2),
            ctx_lens: v(5, 1),
            out: v(6, 3 * 8),
            seqs: 1,
            max_blocks: 2,
            heads: h,
            window: 0,
            scores: Default::default(),
        };
        let meta =
            |tables: Vec<i32>, qs: Vec<i32>, ctx: Vec<i32>| reader(HashMap::from([(3, tables), (4, qs), (5, ctx)]));
        assert!(check(&k, &meta(vec![1, 0], vec![0, 3], vec![20])).is_ok());
        let e = check(&k, &meta(vec![1, 2], vec![0, 3], vec![20])).unwrap_err().to_string();
        assert!(e.contains("KV block 2 outside the cache"), "{e}");
        let e = check(&k, &meta(vec![1, 0], vec![0, 3], vec![2])).unwrap_err().to_string();
        assert!(e.contains("3 queries over a context of 2"), "{e}");
        assert!(check(&k, &meta(vec![1, 0], vec![0, 3], vec![33])).is_err());
        // An unused table entry (-1 padding past the context) is fine.
        assert!(check(&k, &meta(vec![0, -1], vec![0, 3], vec![16])).is_ok());
    }
}
