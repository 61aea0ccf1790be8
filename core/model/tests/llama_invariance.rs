//! The Llama-layout presets' DAGs and sizes, pinned: architecture support must not move
//! a single figure of a model that has none of it. The digest was taken before the
//! architectures landed (commit cbd2549) with this same file.

use slicesched_model::{DecodeItem, IterationBatch, ModelConfig, PrefillItem, PRESETS};

fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= *b as u64;
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

#[test]
fn llama_presets_are_bit_identical() {
    let batches = [
        IterationBatch { prefills: vec![PrefillItem { chunk: 100, prior_kv: 0, samples: true }], decodes: vec![] },
        IterationBatch {
            prefills: vec![
                PrefillItem { chunk: 512, prior_kv: 8000, samples: false },
                PrefillItem { chunk: 7, prior_kv: 3, samples: true },
            ],
            decodes: (1..40).map(|i| DecodeItem { kv_len: i * 97 }).collect(),
        },
        IterationBatch { prefills: vec![], decodes: vec![DecodeItem { kv_len: 5000 }] },
    ];
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    // Presets added since are left out, and so is the context window (it limits what a
    // request may ask, not what an op costs): the digest pins the original figures.
    for p in PRESETS.iter().filter(|p| p.0 != "codellama-13b") {
        let mut m = ModelConfig::preset(p.0).unwrap();
        m.context_window = None;
        fnv(&mut h, serde_json::to_string(&m).unwrap().as_bytes());
        for tp in [1u32, 2, 4, 8] {
            if m.check_tp(tp).is_err() {
                continue;
            }
            fnv(&mut h, &m.weight_bytes_per_gpu(tp).to_le_bytes());
            fnv(&mut h, &m.kv_bytes_per_token(tp).to_le_bytes());
            for b in &batches {
                let d = m.iteration_dag(b, tp);
                fnv(&mut h, serde_json::to_string(&d).unwrap().as_bytes());
                for (p, c, bytes) in d.edges() {
                    fnv(&mut h, &[p.to_le_bytes(), c.to_le_bytes()].concat());
                    fnv(&mut h, &bytes.to_le_bytes());
                }
            }
        }
    }
    assert_eq!(h, DIGEST, "got {h:#x}");
}

const DIGEST: u64 = 0x0253_a275_9840_3490;
