//! Held-out accuracy of the fitted model on the repository's A100 profiles.

use slicesched_cost::{holdout, leave_one_model_out, validate, ProfileSet, ValidationReport};
use std::path::Path;

fn repo_profiles() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/profiles/a100")
}

#[test]
fn holdout_meets_targets() {
    let r = validate(&repo_profiles(), &repo_profiles(), None).unwrap();
    eprintln!("{}", r.table());
    for g in ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"] {
        let o = r.op(g).unwrap_or_else(|| panic!("{g} missing"));
        assert!(o.median <= 0.03 && o.p90 <= 0.10, "{g}: {o:?}");
    }
    for o in &r.ops {
        assert!(o.p90 <= 0.15, "{o:?}");
    }
    assert!(r.op("attn_prefill").is_some() && r.op("attn_decode").is_some());
    // The directory and the embedded copy are the same data.
    let emb = holdout(&ProfileSet::embedded_a100().unwrap(), &slicesched_hw::sku("A100").unwrap());
    assert_eq!(emb, r);
}

#[test]
fn report_serializes_to_the_documented_shape() {
    let r = validate(&repo_profiles(), &repo_profiles(), None).unwrap();
    let v: serde_json::Value = serde_json::from_str(&serde_json::to_string_pretty(&r).unwrap()).unwrap();
    let op = &v["ops"][0];
    let mut keys: Vec<_> = op.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["max", "median", "n", "op", "p90"]);
    assert_eq!(v["overall"].as_object().unwrap().len(), 2);
    assert!(r.table().contains('%'));
    let _: ValidationReport = serde_json::from_value(v).unwrap();
}

#[test]
fn leave_one_model_out_runs() {
    let set = ProfileSet::embedded_a100().unwrap();
    for m in leave_one_model_out(&set) {
        eprintln!("left out {}:\n{}", m.model, m.report.table());
        assert!(m.report.overall.median < 0.5, "{}: {:?}", m.model, m.report.overall);
    }
}

#[test]
fn fit_here_test_there() {
    let tmp = std::env::temp_dir().join(format!("slicesched-cost-test-{}", std::process::id()));
    let m = tmp.join("Llama-2-7b-hf");
    std::fs::create_dir_all(&m).unwrap();
    for f in ["mlp.csv", "model_config.yml"] {
        std::fs::copy(repo_profiles().join("Llama-2-7b-hf").join(f), m.join(f)).unwrap();
    }
    let r = validate(&repo_profiles(), &tmp, None).unwrap();
    // Every point of the test set was also fitted: near-exact.
    assert!(r.overall.median < 0.02 && r.op("attn_prefill").is_none(), "{}", r.table());
    let h = validate(&repo_profiles(), &tmp, Some("H100")).unwrap();
    assert!(h.overall.median > r.overall.median, "H100 predictions differ from A100 measurements");
    assert!(validate(&repo_profiles(), &tmp, Some("B300")).unwrap_err().to_string().contains("B300"));
    std::fs::remove_dir_all(&tmp).unwrap();
}
