//! Keyset pagination: an opaque cursor names the last item of the previous page, so a
//! page costs an index range scan however deep it is.

use crate::error::ApiError;
use base64::Engine;

pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 1000;

/// The page size asked for, checked.
pub fn limit(asked: Option<i64>) -> Result<i64, ApiError> {
    match asked {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::bad("limit", format!("must be between 1 and {MAX_LIMIT}"))),
    }
}

pub fn encode(key: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
}

/// The key inside a cursor; `parts` fields separated by `|`.
pub fn decode(cursor: &str, parts: usize) -> Result<Vec<String>, ApiError> {
    let bad = || ApiError::bad("cursor", "not a cursor this API returned");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).map_err(|_| bad())?;
    let s = String::from_utf8(bytes).map_err(|_| bad())?;
    let v: Vec<String> = s.split('|').map(str::to_string).collect();
    if v.len() != parts {
        return Err(bad());
    }
    Ok(v)
}

/// Splits a fetched `limit + 1` rows into the page and whether another follows.
pub fn split<T>(mut rows: Vec<T>, limit: i64) -> (Vec<T>, bool) {
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    (rows, more)
}
