//! A bounded, seeded fuzz run of hostile inputs (issue 16): oversized, overflowing,
//! NUL-laden and deeply nested variants of a valid scenario through `POST /api/v1/runs`
//! on the real router and Postgres, and of trace rows, model configs and plugin bytes
//! straight into their parsers. Zero panics, zero 5xx, every refusal names its field.
//! Same seed, same inputs: `FUZZ_CASES` (default 400 per parser) bounds the run.

use crate::common::*;
use axum::http::StatusCode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use sqlx::PgPool;
use std::panic::{catch_unwind, AssertUnwindSafe};

const SEED: u64 = 16;

fn cases() -> usize {
    std::env::var("FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400)
}

/// Values that overflow, wrap, or are not numbers at all.
const HOSTILE_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "-0.0",
    "1e308",
    "-1e308",
    "2e10",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "nan",
    "inf",
    "-inf",
    "1e-320",
    "0.000000001",
    "13000.0",
];

/// One hostile variant of `base`: a few mutations of its numbers, strings and structure.
fn mutate(base: &str, rng: &mut StdRng) -> String {
    let mut s = base.to_string();
    for _ in 0..rng.random_range(1..4) {
        match rng.random_range(0..8) {
            // Replace a number.
            0 | 1 => {
                let digits: Vec<usize> = s.match_indices(|c: char| c.is_ascii_digit()).map(|(i, _)| i).collect();
                if let Some(&i) = digits.get(rng.random_range(0..digits.len().max(1))) {
                    let end = s[i..].find(|c: char| !(c.is_ascii_digit() || c == '.')).map_or(s.len(), |e| i + e);
                    let n = HOSTILE_NUMBERS[rng.random_range(0..HOSTILE_NUMBERS.len())];
                    s.replace_range(i..end, n);
                }
            }
            // NUL and control characters inside a string.
            2 => {
                if let Some(i) = s.find('"') {
                    let junk = ["\\u0000", "\\u001b[31m", "\\u0007", "\\r\\n", "\u{202e}"][rng.random_range(0..5)];
                    s.insert_str(i + 1, junk);
                }
            }
            // An oversized string.
            3 => {
                if let Some(i) = s.find('"') {
                    s.insert_str(i + 1, &"A".repeat(rng.random_range(1_000..200_000)));
                }
            }
            // Deep nesting.
            4 => {
                let d = rng.random_range(10..5_000);
                s.push_str(&format!("\ndeep = {}1{}\n", "[".repeat(d), "]".repeat(d)));
            }
            // A truncation.
            5 => {
                let cut = rng.random_range(0..s.len().max(1));
                let cut = (0..=cut).rev().find(|&c| s.is_char_boundary(c)).unwrap_or(0);
                s.truncate(cut);
            }
            // Hostile paths.
            6 => {
                let p = [
                    "../.data/admin_token",
                    "../.git/HEAD",
                    "/etc/shadow",
                    "../../../../proc/self/environ",
                    "a\\u0000b",
                ][rng.random_range(0..5)];
                s = s.replacen("kind = \"poisson\", rate", &format!("kind = \"azure\", path = \"{p}\", rate"), 1);
            }
            // A huge cluster or request count.
            _ => {
                s = s.replacen(
                    "gpus = 2",
                    &format!("gpus = 64\ncount = {}", HOSTILE_NUMBERS[rng.random_range(0..HOSTILE_NUMBERS.len())]),
                    1,
                );
            }
        }
    }
    s
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn hostile_scenarios_never_get_a_5xx_and_every_refusal_names_its_field(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let base = std::fs::read_to_string(repo().join("scenarios/smoke.toml")).unwrap();
    let mut rng = StdRng::seed_from_u64(SEED);
    let (mut tried, mut server_errors, mut unnamed, mut accepted) = (0, 0, 0, 0);
    for _ in 0..cases() {
        let text = mutate(&base, &mut rng);
        let (s, v) =
            post(&app, "/api/v1/runs", ADMIN, json!({ "kind": "replay", "policy": "dedicated", "scenario": text }))
                .await;
        tried += 1;
        if s.is_server_error() {
            server_errors += 1;
            eprintln!("5xx: {s} {v} for {:?}", &text[..text.len().min(300)]);
        } else if s == StatusCode::ACCEPTED {
            accepted += 1;
            // Accepted runs are cancelled at once: the fuzz is about the boundary.
            let id = v["id"].as_str().unwrap();
            post(&app, &format!("/api/v1/runs/{id}/cancel"), ADMIN, json!({})).await;
        } else if v["field"].as_str().is_none_or(str::is_empty) {
            unnamed += 1;
            eprintln!("refusal without a field: {s} {v}");
        }
    }
    eprintln!("fuzz scenarios: {tried} tried, {accepted} accepted, {server_errors} 5xx, {unnamed} without a field");
    assert_eq!((server_errors, unnamed), (0, 0));
}

/// Runs `f` on each input, counting panics (a parser must return an error, never panic).
fn no_panics<T>(what: &str, inputs: impl Iterator<Item = T>, f: impl Fn(&T) -> Option<String>) {
    let (mut tried, mut panics, mut unnamed) = (0, 0, 0);
    for input in inputs {
        tried += 1;
        match catch_unwind(AssertUnwindSafe(|| f(&input))) {
            Err(_) => panics += 1,
            Ok(Some(err)) if err.trim().is_empty() => unnamed += 1,
            Ok(_) => {}
        }
    }
    eprintln!("fuzz {what}: {tried} tried, {panics} panics, {unnamed} errors naming nothing");
    assert_eq!((panics, unnamed), (0, 0), "{what}");
}

#[test]
fn hostile_traces_models_and_plugins_never_panic_their_parsers() {
    use slicesched_trace::{parse_bytes, Format};
    let mut rng = StdRng::seed_from_u64(SEED);
    let csv = std::fs::read_to_string(repo().join("data/traces/azure2023_code.csv")).unwrap();
    let head: String = csv.lines().take(40).collect::<Vec<_>>().join("\n");
    let mooncake = "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 10, \"hash_ids\": [1, 2]}\n\
                    {\"timestamp\": 1000, \"input_length\": 200, \"output_length\": 20, \"hash_ids\": [1]}\n";
    let burst =
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,ChatGPT,10,20,30,Conversation log\n";
    let traces: Vec<(Format, String)> = (0..cases())
        .map(|k| {
            let (f, base) = match k % 3 {
                0 => (Format::Azure, head.as_str()),
                1 => (Format::Mooncake, mooncake),
                _ => (Format::Burstgpt, burst),
            };
            (f, mutate(base, &mut rng).replace("\\u0000", "\0"))
        })
        .collect();
    no_panics("trace rows", traces.iter(), |(f, text)| {
        parse_bytes(text.as_bytes(), *f, "fuzz.csv").err().map(|e| e.to_string())
    });

    let model = json!({ "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192 })
    .to_string();
    let models: Vec<String> = (0..cases()).map(|_| mutate(&model, &mut rng)).collect();
    no_panics("model configs", models.iter(), |text| {
        slicesched_model::ModelConfig::from_hf_json(text, "config", "m").err().map(|e| e.to_string())
    });

    // Plugin bytes: the component header and mutations of a real component when one is
    // built (scripts/test.sh builds them), else of the bare header.
    let real =
        std::fs::read(repo().join("target/plugins/template.wasm")).unwrap_or_else(|_| b"\0asm\x0d\0\x01\0".to_vec());
    let plugins: Vec<Vec<u8>> = (0..cases().min(60))
        .map(|_| {
            let mut b = real.clone();
            for _ in 0..rng.random_range(1..8) {
                let i = rng.random_range(0..b.len());
                match rng.random_range(0..3) {
                    0 => b[i] = rng.random(),
                    1 => b.truncate(i.max(8)),
                    _ => b.splice(i..i, std::iter::repeat_n(0xff, rng.random_range(1..64))).for_each(drop),
                }
            }
            b
        })
        .collect();
    no_panics("plugin components", plugins.iter(), |bytes| slicesched_api::plugin_host::inspect(bytes).err());
}
