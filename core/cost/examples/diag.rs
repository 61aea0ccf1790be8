//! Signed errors of the carried model on the H100 by op and token bucket (diagnostic).
use slicesched_cost::profiles::MLP_OPS;
use slicesched_cost::{CostModel, DeviceCtx, ProfileSet};
use slicesched_model::{IterationBatch, OpKind, PrefillItem};
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/profiles");
    let a = ProfileSet::from_dir(&root.join("a100")).unwrap();
    let h = ProfileSet::from_dir(&root.join("h100")).unwrap();
    let m = CostModel::fit(&a, &slicesched_hw::sku("A100").unwrap()).unwrap();
    let dev = DeviceCtx::single_node(slicesched_hw::sku("H100").unwrap());
    let mut a_x = slicesched_hw::sku("A100").unwrap();
    a_x.name = "A100-class".into();
    let dev_ax = DeviceCtx::single_node(a_x);
    let dev_a = DeviceCtx::single_node(slicesched_hw::sku("A100").unwrap());
    for (mi, mp) in h.models.iter().enumerate() {
        for kind in [
            OpKind::DownProj,
            OpKind::OProj,
            OpKind::QkvProj,
            OpKind::InputNorm,
            OpKind::Activation,
            OpKind::ResidualAdd,
        ] {
            let oi = MLP_OPS.iter().position(|n| kind.profile_name() == Some(n)).unwrap();
            for tp in [1u32, 8] {
                let mut line = format!("{} {kind:?} tp{tp}:", mp.name);
                for t in [1u32, 16, 64, 128, 256, 512, 1024, 2048, 4096] {
                    let b = IterationBatch {
                        prefills: vec![PrefillItem { chunk: t, prior_kv: 0, samples: false }],
                        decodes: vec![],
                    };
                    let d = mp.config.iteration_dag(&b, tp);
                    let o = d.head.iter().chain(&d.layer).find(|o| o.kind == kind).unwrap();
                    let meas = |set: &ProfileSet| {
                        set.models
                            .iter()
                            .find(|x| x.name == mp.name)
                            .and_then(|x| x.mlp.iter().find(|r| r.tp == tp && r.tokens == t))
                            .and_then(|r| r.secs[oi])
                            .unwrap_or(0.0)
                            * 1e6
                    };
                    let _ = mi;
                    line += &format!(
                        " {t}:{:.0}/{:.0}|{:.0}/{:.0}",
                        meas(&a),
                        m.kernel_secs(&dev_ax, o) * 1e6,
                        meas(&h),
                        m.kernel_secs(&dev, o) * 1e6
                    );
                }
                println!("{line}");
            }
        }
    }
    let _ = dev_a;
    let buckets = [(1, 16), (17, 128), (129, 512), (513, 2048), (2049, 1 << 20)];
    for (oi, name) in MLP_OPS.iter().enumerate() {
        let kind = OpKind::ALL.iter().copied().find(|k| k.profile_name() == Some(name)).unwrap();
        let mut line = format!("{name:26}");
        for tp in [1u32, 2, 4, 8] {
            for &(lo, hi) in &buckets {
                let mut v = Vec::new();
                for mp in &h.models {
                    for r in mp.mlp.iter().filter(|r| r.tp == tp && r.tokens >= lo && r.tokens <= hi) {
                        let Some(s) = r.secs[oi] else { continue };
                        if s < 10e-6 || mp.config.check_tp(tp).is_err() {
                            continue;
                        }
                        let b = IterationBatch {
                            prefills: vec![PrefillItem { chunk: r.tokens, prior_kv: 0, samples: false }],
                            decodes: vec![],
                        };
                        let d = mp.config.iteration_dag(&b, tp);
                        let Some(o) = d.head.iter().chain(&d.layer).find(|o| o.kind == kind) else { continue };
                        v.push(m.kernel_secs(&dev, o) / s - 1.0);
                    }
                }
                v.sort_by(|a, b| a.total_cmp(b));
                line += &if v.is_empty() { "    - ".to_string() } else { format!("{:+6.0}", v[v.len() / 2] * 100.0) };
            }
            line += " |";
        }
        println!("{line}");
    }
}
