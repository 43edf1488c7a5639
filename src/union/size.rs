//! Byte sizes as mergerfs writes them: a number with an optional K, M, G or T suffix (powers of
//! 1024; a trailing `B` or `iB` is accepted).

/// Error for a malformed size.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid size '{0}' (expected a number with an optional K, M, G or T suffix)")]
pub struct ParseSizeError(pub String);

/// Parses `10G`, `512M`, `4096`, `1.5T`.
pub fn parse_size(s: &str) -> Result<u64, ParseSizeError> {
    let err = || ParseSizeError(s.to_string());
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    if num.is_empty() || num.starts_with('-') || num.starts_with('+') {
        return Err(err());
    }
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(1 << shift).ok_or_else(err);
    }
    let f: f64 = num.parse().map_err(|_| err())?;
    let v = f * (1u64 << shift) as f64;
    if !v.is_finite() || v < 0.0 || v >= u64::MAX as f64 {
        return Err(err());
    }
    Ok(v as u64)
}

/// A size as mergerfs shows it: the largest of T, G, M or K that divides it exactly, else bytes.
pub fn humanize(bytes: u64) -> String {
    for (unit, shift) in [('T', 40), ('G', 30), ('M', 20), ('K', 10)] {
        if bytes >= 1 << 10 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("10K"), Ok(10 << 10));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        for bad in ["", "G", "-1G", "x", "1Q", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn humanizes_as_mergerfs() {
        assert_eq!(humanize(0), "0");
        assert_eq!(humanize(1023), "1023");
        assert_eq!(humanize(4 << 30), "4G");
        assert_eq!(humanize(3072), "3K");
        assert_eq!(humanize(1536), "1536");
        assert_eq!(humanize((1 << 20) + 1), "1048577");
        assert_eq!(humanize(u32::MAX as u64), "4294967295");
    }
}
