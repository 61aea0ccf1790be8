//! BurstGPT CSV (`Timestamp,Model,Request tokens,Response tokens,...`).
//!
//! Releases differ in extra columns (`Session ID`, `Elapsed time`, `Total tokens`,
//! `Log Type`), so only the four used columns are looked up, by name. `Timestamp` is
//! seconds from the trace start. Failed requests are logged with zero tokens; they
//! are expected, so they are skipped and counted rather than treated as errors.

use crate::common::{cell, csv_err, csv_reader, find_column, finish, headers, row_err, seconds_to_ns, tokens};
use crate::{reason, Loaded, Request, Skipped, TraceError};

pub const COL_TIME: &str = "Timestamp";
pub const COL_MODEL: &str = "Model";
pub const COL_PROMPT: &str = "Request tokens";
pub const COL_OUTPUT: &str = "Response tokens";

pub fn parse<R: std::io::Read>(r: R, label: &str) -> Result<Loaded, TraceError> {
    let mut rdr = csv_reader(r);
    let h = headers(&mut rdr, label)?;
    let ct = find_column(&h, COL_TIME, label)?;
    let cm = find_column(&h, COL_MODEL, label)?;
    let cp = find_column(&h, COL_PROMPT, label)?;
    let co = find_column(&h, COL_OUTPUT, label)?;
    let mut rows = Vec::new();
    let mut skipped = Skipped::default();
    let mut rec = csv::StringRecord::new();
    while rdr.read_record(&mut rec).map_err(|e| csv_err(e, label))? {
        let line = rec.position().map_or(0, |p| p.line());
        if rec.len() == 1 && rec[0].trim().is_empty() {
            continue;
        }
        skipped.rows_read += 1;
        let ts = cell(&rec, ct, COL_TIME, label, line)?;
        let secs: f64 =
            ts.parse().map_err(|_| row_err(label, line, COL_TIME, format!("not a number of seconds: {ts:?}")))?;
        let t = seconds_to_ns(secs, COL_TIME, label, line)?;
        let model = cell(&rec, cm, COL_MODEL, label, line)?;
        if model.is_empty() {
            return Err(row_err(label, line, COL_MODEL, "empty model name"));
        }
        let p = tokens(cell(&rec, cp, COL_PROMPT, label, line)?, COL_PROMPT, label, line)?;
        let o = tokens(cell(&rec, co, COL_OUTPUT, label, line)?, COL_OUTPUT, label, line)?;
        match (p, o) {
            (0, 0) => skipped.add(reason::FAILED_0_0, 1),
            (0, _) | (_, 0) => skipped.add(reason::FAILED_ZERO, 1),
            _ => {
                let mut req = Request::new(0, p, o);
                req.key = Some(model.to_string());
                rows.push((t, req));
            }
        }
    }
    Ok(Loaded { requests: finish(rows), skipped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_columns_in_any_order() {
        let csv = "Session ID,Timestamp,Elapsed time,Response tokens,Model,Request tokens\n\
                   s1,10,0.5,7,GPT-4,100\ns2,4,0.2,9,ChatGPT,50\n";
        let l = parse(csv.as_bytes(), "b.csv").unwrap();
        let got: Vec<_> = l.requests.iter().map(|r| (r.arrival_ns, r.prompt_tokens, r.output_tokens)).collect();
        assert_eq!(got, vec![(0, 50, 9), (6_000_000_000, 100, 7)]);
        assert_eq!(l.requests[0].key.as_deref(), Some("ChatGPT"));
    }

    #[test]
    fn zero_rows_are_counted_by_kind() {
        let csv = "Timestamp,Model,Request tokens,Response tokens\n1,A,0,0\n2,A,5,0\n3,A,5,5\n";
        let l = parse(csv.as_bytes(), "b.csv").unwrap();
        assert_eq!(l.requests.len(), 1);
        assert_eq!(l.skipped.rows_read, 3);
        assert_eq!(l.skipped.get(reason::FAILED_0_0), 1);
        assert_eq!(l.skipped.get(reason::FAILED_ZERO), 1);
    }

    #[test]
    fn negative_time_is_an_error() {
        let csv = "Timestamp,Model,Request tokens,Response tokens\n-1,A,5,5\n";
        let e = parse(csv.as_bytes(), "b.csv").unwrap_err().to_string();
        assert!(e.contains("b.csv:2") && e.contains("Timestamp"), "{e}");
    }
}
