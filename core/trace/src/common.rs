//! Helpers the parsers share: columns by name, token checks, error positions.

use crate::{Request, TraceError};

/// Larger counts are data corruption, not requests: no served model has a 10M context.
pub const MAX_TOKENS: i64 = 10_000_000;

pub fn row_err(label: &str, line: u64, field: &str, msg: impl Into<String>) -> TraceError {
    TraceError::Row { path: label.to_string(), line, field: field.to_string(), msg: msg.into() }
}

/// Headers, as read from the file, are compared trimmed and case-insensitively because
/// dataset releases have changed spacing and case; a UTF-8 BOM is ignored.
pub fn find_column(headers: &csv::StringRecord, name: &str, label: &str) -> Result<usize, TraceError> {
    let norm = |s: &str| s.trim_start_matches('\u{feff}').trim().to_ascii_lowercase();
    let want = norm(name);
    headers.iter().position(|h| norm(h) == want).ok_or_else(|| {
        let have: Vec<&str> = headers.iter().map(str::trim).collect();
        row_err(label, 1, name, format!("missing column (header has: {})", have.join(", ")))
    })
}

pub fn csv_reader<R: std::io::Read>(r: R) -> csv::Reader<R> {
    // Flexible so that a short row is reported as a missing *field* by name rather than
    // as an anonymous record-length mismatch.
    // `\n` only as terminator: with the default CRLF handling csv-core reports wrong
    // line numbers for CRLF files (Azure's layout); the stray `\r` ends up at the end
    // of the last cell, and every cell is trimmed.
    csv::ReaderBuilder::new().has_headers(true).flexible(true).terminator(csv::Terminator::Any(b'\n')).from_reader(r)
}

pub fn csv_err(e: csv::Error, label: &str) -> TraceError {
    let line = e.position().map(|p| p.line());
    let msg = match e.kind() {
        csv::ErrorKind::Utf8 { .. } => "invalid UTF-8".to_string(),
        _ => e.to_string(),
    };
    match line {
        Some(line) => row_err(label, line, "<record>", msg),
        None => TraceError::File { path: label.to_string(), msg },
    }
}

pub fn headers(rdr: &mut csv::Reader<impl std::io::Read>, label: &str) -> Result<csv::StringRecord, TraceError> {
    let h = rdr.headers().map_err(|e| csv_err(e, label))?.clone();
    if h.is_empty() || (h.len() == 1 && h[0].trim().is_empty()) {
        return Err(TraceError::File { path: label.to_string(), msg: "empty file (no header row)".into() });
    }
    Ok(h)
}

/// The cell of a named column; a short row is a missing-field error.
pub fn cell<'r>(
    rec: &'r csv::StringRecord,
    idx: usize,
    field: &str,
    label: &str,
    line: u64,
) -> Result<&'r str, TraceError> {
    rec.get(idx).map(str::trim).ok_or_else(|| row_err(label, line, field, "missing value (row too short)"))
}

/// Parses a token count; zero is returned as 0 so callers decide whether it is an
/// error or a failed row the format expects.
pub fn tokens(s: &str, field: &str, label: &str, line: u64) -> Result<u32, TraceError> {
    let v: i64 = s.parse().map_err(|_| row_err(label, line, field, format!("not an integer token count: {s:?}")))?;
    if v < 0 {
        return Err(row_err(label, line, field, format!("negative token count {v}")));
    }
    if v > MAX_TOKENS {
        return Err(row_err(label, line, field, format!("absurd token count {v} (> {MAX_TOKENS})")));
    }
    Ok(v as u32)
}

/// Like [`tokens`] but zero is an error too.
pub fn positive_tokens(s: &str, field: &str, label: &str, line: u64) -> Result<u32, TraceError> {
    let v = tokens(s, field, label, line)?;
    if v == 0 {
        return Err(row_err(label, line, field, "zero token count"));
    }
    Ok(v)
}

/// Seconds as a non-negative finite number, to ns. Bounded so the ns fit in u64 with
/// room for wrap-around arithmetic later (about 3,000 years).
pub fn seconds_to_ns(secs: f64, field: &str, label: &str, line: u64) -> Result<i64, TraceError> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(row_err(label, line, field, format!("timestamp must be finite and >= 0, got {secs}")));
    }
    if secs > 1e11 {
        return Err(row_err(label, line, field, format!("absurd timestamp {secs} s")));
    }
    Ok((secs * 1e9).round() as i64)
}

/// Stable sort by timestamp, then rebase so the first request arrives at 0.
pub fn finish(mut rows: Vec<(i64, Request)>) -> Vec<Request> {
    rows.sort_by_key(|(t, _)| *t);
    let t0 = rows.first().map(|(t, _)| *t).unwrap_or(0);
    rows.into_iter()
        .map(|(t, mut r)| {
            // i128: the span between two in-range i64 timestamps can exceed i64.
            r.arrival_ns = u64::try_from(t as i128 - t0 as i128).unwrap_or(u64::MAX);
            r
        })
        .collect()
}
