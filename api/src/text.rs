//! Text at the boundary: every string that reaches the database or the log passes here.
//!
//! Two treatments, by where the text comes from:
//! - a caller's input (a name, a plugin's declared version) is *checked*: NUL or control
//!   characters, or more than the field allows, are a 422 naming the field;
//! - text the service must keep whatever it holds (a plugin's refusal or panic message,
//!   an error cause, an audit detail) is *cleaned*: control characters replaced, length
//!   bounded, truncated with a marker saying how much was cut. Postgres refuses NUL in
//!   `text` and `jsonb`, so without this a hostile plugin could make the very write that
//!   records its quarantine fail.

use crate::error::ApiError;
use serde_json::Value;

/// Most characters kept of one plugin message, error cause or audit string.
pub const MAX_MESSAGE: usize = 2048;
/// Most strings an audit detail keeps per array (the rest are counted, not kept).
pub const MAX_ARRAY: usize = 64;
/// Nesting an audit detail may have (deeper values are replaced by a marker).
pub const MAX_DEPTH: usize = 8;

/// Refuses text with NUL or control characters, or longer than `max` characters.
pub fn check(field: &str, s: &str, max: usize) -> Result<(), ApiError> {
    let n = s.chars().count();
    if n > max {
        return Err(ApiError::invalid(field, format!("at most {max} characters (limit {max}, got {n})")));
    }
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(ApiError::invalid(field, format!("control character U+{:04X} is not accepted", c as u32)));
    }
    Ok(())
}

/// `s` with control characters (but newline and tab) replaced by U+FFFD, cut to `max`
/// characters with a marker naming how many bytes were dropped.
pub fn clean(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max * 4 + 64));
    for (kept, (i, c)) in s.char_indices().enumerate() {
        if kept == max {
            out.push_str(&format!("… [truncated: {} more bytes]", s.len() - i));
            return out;
        }
        out.push(if c.is_control() && c != '\n' && c != '\t' { '\u{FFFD}' } else { c });
    }
    out
}

/// [`clean`] for one line of a log or a problem's detail: newlines become spaces too.
pub fn one_line(s: &str, max: usize) -> String {
    clean(s, max).replace(['\n', '\t'], " ")
}

/// A JSON value safe to store: every string cleaned, arrays and depth bounded.
pub fn clean_json(v: &Value) -> Value {
    clean_at(v, 0)
}

fn clean_at(v: &Value, depth: usize) -> Value {
    match v {
        Value::String(s) => Value::String(clean(s, MAX_MESSAGE)),
        _ if depth >= MAX_DEPTH => Value::String("[nested too deep]".into()),
        Value::Array(a) => {
            let mut out: Vec<Value> = a.iter().take(MAX_ARRAY).map(|x| clean_at(x, depth + 1)).collect();
            if a.len() > MAX_ARRAY {
                out.push(Value::String(format!("[{} more items]", a.len() - MAX_ARRAY)));
            }
            Value::Array(out)
        }
        Value::Object(m) => {
            Value::Object(m.iter().take(MAX_ARRAY).map(|(k, x)| (clean(k, 128), clean_at(x, depth + 1))).collect())
        }
        other => other.clone(),
    }
}

/// `msg` without the absolute path of `root` (responses never show where the service
/// lives on disk) and without anything after its first line (a parser's error snippet
/// quotes the file it read), bounded.
pub fn scrub(msg: &str, roots: &[&std::path::Path]) -> String {
    let mut s = msg.lines().next().unwrap_or("").to_string();
    for r in roots {
        let r = r.display().to_string();
        if r.len() > 1 {
            s = s.replace(&format!("{r}/"), "").replace(&r, ".");
        }
    }
    one_line(&s, MAX_MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_replaces_controls_and_marks_truncation() {
        assert_eq!(clean("a\0b\u{1b}c\nd", 100), "a\u{FFFD}b\u{FFFD}c\nd");
        let long = "é".repeat(5000);
        let c = clean(&long, 10);
        assert!(c.starts_with(&"é".repeat(10)));
        assert!(c.ends_with(&format!("[truncated: {} more bytes]", 2 * 4990)), "{c}");
        assert!(!clean(&"\0".repeat(1 << 20), MAX_MESSAGE).contains('\0'));
    }

    #[test]
    fn clean_json_bounds_everything() {
        let mut deep = Value::String("x\0".into());
        for _ in 0..100 {
            deep = Value::Array(vec![deep]);
        }
        let v = serde_json::json!({ "a\0": "b\0", "list": vec!["y"; 1000], "deep": deep });
        let c = clean_json(&v).to_string();
        assert!(!c.contains("\\u0000"), "{c}");
        assert!(c.contains("[936 more items]") && c.contains("nested too deep"), "{c}");
    }

    #[test]
    fn check_names_the_field_limit_and_value() {
        let e = check("version", &"1".repeat(200), 64).unwrap_err().to_string();
        assert!(e.contains("version") && e.contains("64") && e.contains("200"), "{e}");
        assert!(check("version", "1.0\0", 64).unwrap_err().to_string().contains("U+0000"));
        assert!(check("version", "1.0.0-rc1+build", 64).is_ok());
    }

    #[test]
    fn scrub_drops_roots_and_snippets() {
        let root = std::path::Path::new("/srv/app");
        let s = scrub("/srv/app/data/x.toml: TOML parse error at line 3\n3 | secret\n", &[root]);
        assert_eq!(s, "data/x.toml: TOML parse error at line 3");
    }
}
