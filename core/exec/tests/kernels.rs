//! Every CPU kernel against the f64 reference, on fresh random data.

mod common;

use common::*;
use half::bf16;
use slicesched_exec::kernels::{Heads, Kernel, Scores, BLOCK_TOKENS};
use slicesched_exec::reference as r;
use slicesched_exec::*;

struct K {
    b: CpuBackend,
    s: StreamId,
}

impl K {
    fn new() -> Self {
        let b = backend(1);
        let s = b.stream(DeviceId(0), 0).unwrap();
        Self { b, s }
    }
    fn put(&self, d: HostData) -> View {
        let id = self.b.alloc(DeviceId(0), Arena::Workspace, d.dtype(), d.len()).unwrap();
        let v = View::whole(id, d.len());
        self.b.upload(v, &d).unwrap();
        v
    }
    fn out(&self, dtype: Dtype, n: usize) -> View {
        View::whole(self.b.alloc(DeviceId(0), Arena::Workspace, dtype, n).unwrap(), n)
    }
    fn run(&self, k: Kernel) -> Result<Timing, ExecError> {
        self.b.launch(self.s, k, &[]).unwrap().wait()
    }
    fn bf(&self, v: View) -> Vec<f64> {
        match self.b.download(v).unwrap() {
            HostData::Bf16(x) => x.iter().map(|v| v.to_f64()).collect(),
            HostData::F32(x) => x.iter().map(|v| *v as f64).collect(),
            HostData::I32(x) => x.iter().map(|v| *v as f64).collect(),
        }
    }
}

fn f(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// ‖a − r‖ / ‖r‖.
fn rel(a: &[f64], r: &[f64]) -> f64 {
    let n: f64 = a.iter().zip(r).map(|(a, r)| (a - r).powi(2)).sum();
    (n / r.iter().map(|r| r * r).sum::<f64>()).sqrt()
}

#[test]
fn gemm_matches_f64_with_bf16_and_f32_outputs() {
    let k = K::new();
    for (m, n, kk) in [(1, 300, 64), (7, 129, 257), (33, 64, 512)] {
        let (x, w) = (random_bf16(m * kk, 1, 1.0), random_bf16(n * kk, 2, 0.1));
        let want = r::gemm(&f(&x), &f(&w), m, n, kk);
        let (xv, wv) = (k.put(HostData::Bf16(x)), k.put(HostData::Bf16(w)));
        for dt in [Dtype::Bf16, Dtype::F32] {
            let y = k.out(dt, m * n);
            k.run(Kernel::Gemm { bias: None, x: xv, w: wv, y, m, n, k: kk }).unwrap();
            let e = rel(&k.bf(y), &want);
            let tol = if dt == Dtype::F32 { 1e-5 } else { 4e-3 };
            assert!(e < tol, "{m}x{n}x{kk} {dt:?}: {e}");
        }
    }
}

#[test]
fn norms_add_silu_embedding_gather_and_argmax() {
    let k = K::new();
    let (rows, w) = (5, 96);
    let x = random_bf16(rows * w, 3, 2.0);
    let g = random_bf16(w, 4, 1.0);
    let (xv, gv) = (k.put(HostData::Bf16(x.clone())), k.put(HostData::Bf16(g.clone())));
    let out = k.out(Dtype::Bf16, rows * w);
    k.run(Kernel::RmsNorm { x: xv, weight: gv, out, rows, width: w, eps: 1e-5, unit_offset: false }).unwrap();
    let want = r::rmsnorm(&f(&x), &f(&g), 1e-5);
    for (a, b) in k.bf(out).iter().zip(&want) {
        assert!((a - b).abs() <= b.abs() * 8e-3 + 1e-6, "rmsnorm {a} vs {b}");
    }
    let y = random_bf16(rows * w, 5, 2.0);
    let yv = k.put(HostData::Bf16(y.clone()));
    let sum = k.out(Dtype::Bf16, rows * w);
    k.run(Kernel::Add { a: xv, b: yv, out: sum }).unwrap();
    for ((a, x), y) in k.bf(sum).iter().zip(&x).zip(&y) {
        assert_eq!(*a, bf16::from_f64(x.to_f64() + y.to_f64()).to_f64(), "add rounds once");
    }
    let act = k.out(Dtype::Bf16, rows * w / 2);
    k.run(Kernel::SiluMul { x: xv, out: act, rows, inter: w / 2 }).unwrap();
    let got = k.bf(act);
    for t in 0..rows {
        for i in 0..w / 2 {
            let want = r::silu_mul(x[t * w + i].to_f64(), x[t * w + w / 2 + i].to_f64());
            assert!((got[t * w / 2 + i] - want).abs() <= want.abs() * 8e-3 + 1e-6);
        }
    }
    let ids = k.put(HostData::I32(vec![4, 0, 4]));
    let emb = k.out(Dtype::Bf16, 3 * w);
    k.run(Kernel::Embedding { ids, table: xv, out: emb, hidden: w, scale: None }).unwrap();
    assert_eq!(k.bf(emb)[..w], f(&x[4 * w..5 * w])[..]);
    let bad = k.put(HostData::I32(vec![5]));
    let e = k.run(Kernel::Embedding { ids: bad, table: xv, out: emb.sub(0, w), hidden: w, scale: None }).unwrap_err();
    assert!(e.to_string().contains("token id 5"), "{e}");
    let rows_v = k.put(HostData::I32(vec![2, 0]));
    let gath = k.out(Dtype::Bf16, 2 * w);
    k.run(Kernel::GatherRows { x: xv, rows: rows_v, out: gath, width: w }).unwrap();
    assert_eq!(k.bf(gath)[..w], f(&x[2 * w..3 * w])[..]);
    let logits = k.put(HostData::F32(vec![0.0, 3.0, 1.0, 3.0, /* shard 2 */ 2.0, 9.0, 3.0, 0.5]));
    let am = k.out(Dtype::I32, 2);
    k.run(Kernel::Argmax { logits, out: am, rows: 2, shards: 2, shard_n: 2 }).unwrap();
    // Row 0 is [0, 3 | 2, 9] → id 3; row 1 is [1, 3 | 3, 0.5] → the first 3, id 1.
    assert_eq!(k.bf(am), vec![3.0, 1.0]);
}

#[test]
fn rope_matches_f64_with_llama3_scaling() {
    let k = K::new();
    let mut m = micro();
    m.numerics.rope_theta = 500_000.0;
    m.numerics.rope_scaling =
        slicesched_exec::model::Numerics::for_model(&slicesched_model::ModelConfig::preset("llama-3-8b").unwrap())
            .rope_scaling;
    let heads = Heads { q: 4, kv: 2, dim: 16 };
    let tokens = 6;
    let max_pos = 256;
    let inv = m.numerics.inv_freq(16);
    // The scaling leaves the high frequencies and divides the low ones by the factor.
    let plain = slicesched_exec::model::Numerics { rope_scaling: None, ..m.numerics.clone() }.inv_freq(16);
    assert_eq!(inv[0], plain[0]);
    assert!((inv[7] - plain[7] / 8.0).abs() < 1e-12 * plain[7]);
    let table = k.put(HostData::F32(m.numerics.rope_table(16, max_pos)));
    let x = random_bf16(tokens * heads.row(), 9, 1.0);
    let qkv = k.put(HostData::Bf16(x.clone()));
    let pos = [0, 1, 5, 17, 100, 255];
    let positions = k.put(HostData::I32(pos.to_vec()));
    k.run(Kernel::Rope { qkv, positions, table, tokens, heads, max_pos, rotary: heads.dim }).unwrap();
    let got = k.bf(qkv);
    let mut want = f(&x);
    for t in 0..tokens {
        for h in 0..heads.q + heads.kv {
            r::rope(&mut want[t * heads.row() + h * 16..][..16], pos[t] as usize, &inv);
        }
    }
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() <= b.abs() * 8e-3 + 2e-3, "rope {a} vs {b}");
    }
    let far = k.put(HostData::I32(vec![256; tokens]));
    assert!(k.run(Kernel::Rope { qkv, positions: far, table, tokens, heads, max_pos, rotary: heads.dim }).is_err());
}

#[test]
fn paged_attention_prefill_chunks_and_decodes_with_gqa() {
    let k = K::new();
    let heads = Heads { q: 4, kv: 2, dim: 16 };
    let kvw = heads.kv * heads.dim;
    // Two sequences: a 20-token history of which the last 5 are this chunk, and a decode
    // at position 33 (34 keys). Their blocks are scattered on purpose.
    let (hist_a, q_a, hist_b) = (20usize, 5usize, 34usize);
    let blocks = 8;
    let table_a = [5, 1];
    let table_b = [0, 7, 3];
    let kv_a = random_bf16(hist_a * 2 * kvw, 11, 1.0);
    let kv_b = random_bf16(hist_b * 2 * kvw, 12, 1.0);
    let mut cache = vec![bf16::ZERO; 2 * blocks * BLOCK_TOKENS * kvw];
    let half = cache.len() / 2;
    for (kv, table, n) in [(&kv_a, &table_a[..], hist_a), (&kv_b, &table_b[..], hist_b)] {
        for t in 0..n {
            let slot = table[t / 16] as usize * 16 + t % 16;
            cache[slot * kvw..(slot + 1) * kvw].copy_from_slice(&kv[t * 2 * kvw..t * 2 * kvw + kvw]);
            cache[half + slot * kvw..half + (slot + 1) * kvw]
                .copy_from_slice(&kv[t * 2 * kvw + kvw..(t + 1) * 2 * kvw]);
        }
    }
    let q = random_bf16((q_a + 1) * heads.row(), 13, 1.0);
    let cache_v = k.put(HostData::Bf16(cache));
    let qkv = k.put(HostData::Bf16(q.clone()));
    let tables = k.put(HostData::I32(vec![5, 1, -1, 0, 7, 3]));
    let q_start = k.put(HostData::I32(vec![0, q_a as i32, q_a as i32 + 1]));
    let ctx = k.put(HostData::I32(vec![hist_a as i32, hist_b as i32]));
    // Every key, and a sliding window of 7 (reaching back across a block boundary); each
    // with Llama's scores, Gemma-2's (a query scale, a soft-cap that bites) and ALiBi's
    // (slopes by key distance, so the chunk's queries sit at their true positions).
    let slopes = [0.5, 0.25, 0.125, 0.0625];
    let alibi = k.put(HostData::F32(slopes.to_vec()));
    let plain = r::Scores::plain(heads.dim);
    let gemma = r::Scores { scale: 0.4, softcap: Some(1.0), slopes: vec![] };
    let bloom = r::Scores { slopes: slopes.iter().map(|&s| s as f64).collect(), ..plain.clone() };
    let forms = [
        (Scores::default(), plain),
        (Scores { scale: Some(0.4), softcap: Some(1.0), alibi: None }, gemma),
        (Scores { alibi: Some(alibi), ..Scores::default() }, bloom),
    ];
    for (window, (scores, want_scores)) in [0, 7].into_iter().flat_map(|w| forms.iter().map(move |f| (w, f))) {
        let out = k.out(Dtype::Bf16, (q_a + 1) * heads.q * heads.dim);
        k.run(Kernel::Attention {
            qkv,
            cache: cache_v,
            block_tables: tables,
            q_start,
            ctx_lens: ctx,
            out,
            seqs: 2,
            max_blocks: 3,
            heads,
            window,
            scores: *scores,
        })
        .unwrap();
        let got = k.bf(out);
        // The reference sees each sequence whole: queries at the history's last positions.
        for (kv, n, q_rows, row0) in [(&kv_a, hist_a, q_a, 0usize), (&kv_b, hist_b, 1, q_a)] {
            let kk: Vec<f64> = (0..n).flat_map(|t| f(&kv[t * 2 * kvw..t * 2 * kvw + kvw])).collect();
            let vv: Vec<f64> = (0..n).flat_map(|t| f(&kv[t * 2 * kvw + kvw..(t + 1) * 2 * kvw])).collect();
            let mut qq = vec![0.0; n * heads.q * heads.dim];
            for j in 0..q_rows {
                let src = &q[(row0 + j) * heads.row()..][..heads.q * heads.dim];
                qq[(n - q_rows + j) * heads.q * heads.dim..][..heads.q * heads.dim].copy_from_slice(&f(src));
            }
            let want = r::attention(&qq, &kk, &vv, n, heads.q, heads.kv, heads.dim, window, want_scores);
            let w = &want[(n - q_rows) * heads.q * heads.dim..];
            if *scores != Scores::default() {
                // Each form is far from Llama's, so a kernel ignoring it fails below.
                let llama = r::attention(&qq, &kk, &vv, n, heads.q, heads.kv, heads.dim, window, &forms[0].1);
                let apart = rel(w, &llama[(n - q_rows) * heads.q * heads.dim..]);
                assert!(apart > 5e-2, "{scores:?} is {apart} from Llama's scores");
            }
            let g = &got[row0 * heads.q * heads.dim..(row0 + q_rows) * heads.q * heads.dim];
            let e = rel(g, w);
            assert!(e < 1e-2, "window {window}, {scores:?}: attention rel err {e}");
        }
    }
}

#[test]
fn cache_write_skips_negative_slots_and_refuses_outside() {
    let k = K::new();
    let heads = Heads { q: 2, kv: 1, dim: 4 };
    let qkv_data = random_bf16(2 * heads.row(), 21, 1.0);
    let qkv = k.put(HostData::Bf16(qkv_data.clone()));
    let cache = k.out(Dtype::Bf16, 2 * 16 * 4);
    let slots = k.put(HostData::I32(vec![3, -1]));
    k.run(Kernel::CacheWrite { qkv, slots, cache, tokens: 2, heads }).unwrap();
    let c = k.bf(cache);
    assert_eq!(c[12..16], f(&qkv_data[8..12])[..], "k of token 0 in slot 3");
    assert_eq!(c[64 + 12..64 + 16], f(&qkv_data[12..16])[..], "v of token 0");
    assert_eq!(c.iter().filter(|v| **v != 0.0).count(), 8, "token 1 was skipped");
    let bad = k.put(HostData::I32(vec![16, -1]));
    let e = k.run(Kernel::CacheWrite { qkv, slots: bad, cache, tokens: 2, heads }).unwrap_err();
    assert!(e.to_string().contains("slot 16"), "{e}");
}

/// A GEMM agrees with the f64 reference at every batch size and a ragged k, and each
/// row's output is bit-identical whatever else shares its batch (batch invariance: a
/// decode alone, in a batch of decodes or beside a prefill chunk gives the same logits).
#[test]
fn gemms_are_exact_enough_and_batch_invariant() {
    let k = K::new();
    let (n, kk) = (70, 131);
    let w = random_bf16(n * kk, 20, 0.1);
    let wv = k.put(HostData::Bf16(w.clone()));
    let all = random_bf16(40 * kk, 10, 1.0);
    let mut first_row: Option<Vec<u64>> = None;
    for m in [1, 2, 3, 4, 5, 7, 8, 9, 17, 40] {
        let x = all[..m * kk].to_vec();
        let want = r::gemm(&f(&x), &f(&w), m, n, kk);
        let xv = k.put(HostData::Bf16(x));
        let y = k.out(Dtype::F32, m * n);
        k.run(Kernel::Gemm { bias: None, x: xv, w: wv, y, m, n, k: kk }).unwrap();
        let got = k.bf(y);
        let e = rel(&got, &want);
        assert!(e < 1e-5, "m = {m}: {e}");
        let row: Vec<u64> = got[..n].iter().map(|v| v.to_bits()).collect();
        match &first_row {
            None => first_row = Some(row),
            Some(r0) => assert_eq!(r0, &row, "row 0's bits changed in a batch of {m}"),
        }
    }
}
