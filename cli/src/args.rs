//! Value parsers every command's numeric flags share: a bad number is a usage error
//! naming the flag and the accepted range (clap prints it), never a panic deep inside a
//! command.

/// A finite number > 0 (rate scales, precisions, durations).
pub fn positive(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("must be a finite number > 0, got {s}"))
    }
}

/// A fraction in [0, 1) (violation targets).
pub fn fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be a fraction in [0, 1), got {s}"))
    }
}

/// A whole number >= 1 (repeats, jobs, calls, tensor-parallel degree).
pub fn at_least_one<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    let v: u64 = s.trim().parse().map_err(|_| format!("`{s}` is not a whole number"))?;
    if v == 0 {
        return Err("must be at least 1".into());
    }
    T::try_from(v).map_err(|_| format!("{s} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_parser_refuses_what_it_must() {
        for bad in ["0", "-1", "nan", "inf", "x", "1e999"] {
            assert!(positive(bad).is_err(), "{bad}");
        }
        assert_eq!(positive("0.5"), Ok(0.5));
        assert!(fraction("1").is_err() && fraction("-0.1").is_err() && fraction("nan").is_err());
        assert_eq!(fraction("0.09"), Ok(0.09));
        assert!(at_least_one::<u32>("0").is_err() && at_least_one::<u32>("4294967296").is_err());
        assert_eq!(at_least_one::<usize>("3"), Ok(3));
    }
}
