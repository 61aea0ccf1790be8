//! Azure LLM inference trace CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`).
//!
//! 2023 files write `YYYY-MM-DD HH:MM:SS.fffffff` (7 fractional digits, no zone);
//! 2024 files write microseconds and a `+00:00` offset. Files are CRLF with no final
//! newline, which the `csv` crate handles. Rows may be out of order, so arrivals are
//! sorted stably and measured from the earliest row.

use crate::common::{cell, csv_err, csv_reader, find_column, finish, headers, positive_tokens, row_err};
use crate::{Loaded, Request, Skipped, TraceError};
use chrono::{DateTime, NaiveDateTime};

pub const COL_TIME: &str = "TIMESTAMP";
pub const COL_PROMPT: &str = "ContextTokens";
pub const COL_OUTPUT: &str = "GeneratedTokens";

/// Parses one timestamp to ns since the Unix epoch (UTC; zone-less times are UTC).
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    // A trailing zone is `+HH:MM`, `-HH:MM` or `Z`; the date's own '-' come before the
    // space, so look for a sign only after it.
    let time_part = s.split_once([' ', 'T']).map(|(_, t)| t).unwrap_or("");
    let has_zone = time_part.contains(['+', '-']);
    let dt = if let Some(utc) = s.strip_suffix('Z') {
        parse_zoned(&format!("{utc}+00:00"))?
    } else if has_zone {
        parse_zoned(s)?
    } else {
        parse_naive(s)?
    };
    dt.and_utc().timestamp_nanos_opt()
}

fn parse_naive(s: &str) -> Option<NaiveDateTime> {
    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"].iter().find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
}

fn parse_zoned(s: &str) -> Option<NaiveDateTime> {
    ["%Y-%m-%d %H:%M:%S%.f%:z", "%Y-%m-%dT%H:%M:%S%.f%:z"]
        .iter()
        .find_map(|f| DateTime::parse_from_str(s, f).ok())
        .map(|d| d.naive_utc())
}

pub fn parse<R: std::io::Read>(r: R, label: &str) -> Result<Loaded, TraceError> {
    let mut rdr = csv_reader(r);
    let h = headers(&mut rdr, label)?;
    let (ct, cp, co) =
        (find_column(&h, COL_TIME, label)?, find_column(&h, COL_PROMPT, label)?, find_column(&h, COL_OUTPUT, label)?);
    let mut rows = Vec::new();
    let mut rec = csv::StringRecord::new();
    while rdr.read_record(&mut rec).map_err(|e| csv_err(e, label))? {
        let line = rec.position().map_or(0, |p| p.line());
        if rec.len() == 1 && rec[0].trim().is_empty() {
            continue; // a blank line, e.g. a stray trailing newline
        }
        let ts = cell(&rec, ct, COL_TIME, label, line)?;
        let t = parse_timestamp(ts).ok_or_else(|| {
            row_err(label, line, COL_TIME, format!("bad timestamp {ts:?} (want YYYY-MM-DD HH:MM:SS.fffffff[+00:00])"))
        })?;
        let p = positive_tokens(cell(&rec, cp, COL_PROMPT, label, line)?, COL_PROMPT, label, line)?;
        let o = positive_tokens(cell(&rec, co, COL_OUTPUT, label, line)?, COL_OUTPUT, label, line)?;
        rows.push((t, Request::new(0, p, o)));
    }
    let skipped = Skipped { rows_read: rows.len() as u64, ..Default::default() };
    Ok(Loaded { requests: finish(rows), skipped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_2023_and_2024_agree() {
        let a = parse_timestamp("2023-11-16 18:17:03.9799600").unwrap();
        let b = parse_timestamp("2023-11-16 18:17:03.979960+00:00").unwrap();
        assert_eq!(a, b);
        assert_eq!(parse_timestamp("2023-11-16 18:17:04.0000000").unwrap() - a, 20_040_000);
        assert_eq!(parse_timestamp("2023-11-16 18:17:04").unwrap() - a, 20_040_000);
    }

    #[test]
    fn zone_offset_shifts_to_utc() {
        let utc = parse_timestamp("2024-05-10 00:00:00.000000+00:00").unwrap();
        let plus1 = parse_timestamp("2024-05-10 01:00:00.000000+01:00").unwrap();
        assert_eq!(utc, plus1);
        assert_eq!(parse_timestamp("2024-05-10T00:00:00Z"), Some(utc));
    }

    #[test]
    fn garbage_timestamps_are_rejected() {
        for s in ["", "yesterday", "2023-13-01 00:00:00", "2023-11-16 25:00:00.0", "2023-11-16 18:00:00.0+99:99"] {
            assert_eq!(parse_timestamp(s), None, "{s}");
        }
    }

    #[test]
    fn unsorted_rows_are_sorted_stably() {
        let csv = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n\
                   2023-11-16 18:00:02.0,1,1\r\n2023-11-16 18:00:00.0,2,2\r\n2023-11-16 18:00:02.0,3,3";
        let l = parse(csv.as_bytes(), "x").unwrap();
        let got: Vec<_> = l.requests.iter().map(|r| (r.arrival_ns, r.prompt_tokens)).collect();
        assert_eq!(got, vec![(0, 2), (2_000_000_000, 1), (2_000_000_000, 3)]);
    }
}
